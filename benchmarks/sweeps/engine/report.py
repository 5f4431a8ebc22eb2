"""The markdown report of a sweep, from its JSON-lines results.

What counts against xnnfold (`problems`): a program off from eager where stock's is not,
a lowering that fails where stock's succeeds, a program that lowers but does not load
where stock's loads, a computed-weight GEMM outside a delegate without a reason code.
"""

from __future__ import annotations

import collections
import re
from typing import Any

from benchmarks.sweeps.engine.library import Library
from benchmarks.sweeps.engine.lowering import (
    LOAD_FAILED,
    METHOD_NOT_LOADED,
    STOCK,
    wrong,
    XNNFOLD,
)
from benchmarks.sweeps.engine.relower import RELOWERED
from benchmarks.sweeps.engine.results import (
    CANDIDATE,
    COMPUTED,
    LOWERED,
    NOT_A_MODEL,
    out_of_memory,
    SCREENED,
    SKIPPED,
    TIMED_OUT,
)
from benchmarks.sweeps.engine.summary import larger_lines, summary_lines
from benchmarks.sweeps.engine.table import error_cell, row, table_head
from benchmarks.sweeps.engine.worker import WORKER_MEMORY

# The problem of xnnfold's entry out of the worker's memory where stock's lowering is not.
_OUT_OF_MEMORY_PROBLEM = "out of memory where stock's is not"
# Rows of the out-of-reach table (the most common reasons).
_REASON_ROWS = 30


def problems(result: dict[str, Any]) -> list[str]:
    """What the sweep counts against xnnfold in one class's result, through the folding
    partitioner and through the library's extra path."""
    found = []
    for where, path in (
        ("", result.get("variants", {})),
        (" (exporter)", result.get("exporter", {})),
    ):
        ours, stock = path.get(XNNFOLD, {}), path.get(STOCK, {})
        error = ours.get("error", "")
        # Unloadable as stock's program is (the same ops on portable: a missing kernel) is
        # not xnnfold's; unloadable where stock's loads, or where stock does not lower, is.
        # Out of the worker's memory counts only where stock's lowering was not.
        if out_of_memory(error):
            if not out_of_memory(stock.get("error", "")):
                found.append(f"{_OUT_OF_MEMORY_PROBLEM}{where}")
        elif ours.get("timeout"):
            if stock and "error" not in stock:
                found.append(f"timeout where stock lowers{where}")
        elif _unloadable(ours) and not _unloadable(stock):
            found.append(f"unloadable{where}")
        elif error and not stock.get("error"):
            found.append(f"crash where stock lowers{where}")
        # Off as far as stock is, the difference is not xnnfold's.
        if wrong(ours) and not (wrong(stock) and ours["diff"] <= stock["diff"] * 1.001):
            found.append(f"wrong{where}")
        if any(row.endswith("(no code)") for row in ours.get("outside", [])):
            found.append(f"outside without a code{where}")
    return found


def _unloadable(entry: dict[str, Any]) -> bool:
    error = entry.get("error", "")
    return error.startswith(LOAD_FAILED) or METHOD_NOT_LOADED in error


def computed(result: dict[str, Any]) -> int:
    """Computed-weight GEMMs `explain` found, through either path (0 when neither lowered):
    those xnnfold saw, or those stock left outside."""
    return max(
        (
            len(entry.get("outside", [])) if label == STOCK else entry.get("computed", 0)
            for path in ("variants", "exporter")
            for label, entry in result.get(path, {}).items()
            if isinstance(entry, dict)
        ),
        default=0,
    )


def report(
    library: Library, results: dict[str, dict[str, Any]], classes: list[tuple[str, str]]
) -> str:
    """The markdown report: counts, the table of the classes with a computed-weight GEMM,
    the lowering times, the classes out of reach and why."""
    noun = library.noun
    names = {n for _, n in classes}
    seen = {n: r for n, r in results.items() if n in names and r["status"] != NOT_A_MODEL}
    not_models = sum(1 for n, r in results.items() if n in names and r["status"] == NOT_A_MODEL)
    counts = collections.Counter(r["status"] for r in seen.values())
    reached = sum(1 for r in seen.values() if r["status"] in SCREENED)
    lowered = [r for r in seen.values() if r["status"] in LOWERED]
    found = sorted(
        (r for r in lowered if computed(r) or problems(r) or r["status"] == TIMED_OUT),
        key=lambda r: r["class"],
    )
    unread = sorted(
        (r for r in lowered if r["status"] == COMPUTED and r not in found),
        key=lambda r: r["class"],
    )
    flagged = {r["class"]: problems(r) for r in found}
    totals = collections.Counter(
        p.replace(" (exporter)", "") for ps in flagged.values() for p in ps
    )
    versions = library.versions()
    lines = [
        f"# {library.title} swept for computed-weight GEMMs",
        "",
        f"Written by `python -m {library.command} --report` from `{library.results.name}` "
        "(the commands are in benchmarks/sweeps/README.md). "
        f"{versions}. {library.method()} Latency is the median of interleaved calls "
        "through executorch.runtime on a shared 2-core machine (compare within a row only; "
        "'(alone)': the two programs did not fit in a worker's memory together, each was "
        "timed alone; 'untimed': a program that ran against eager did not load or run a "
        "second time for the timing, in what the lowerings left of the worker's memory); "
        "lowering time is the CPU seconds of `to_edge_transform_and_lower` through "
        "`xnnfold.save`, one thread; retimed: the two programs lowered again and timed alone "
        "in a fresh process over at least 31 interleaved calls, as many as take 3 s "
        "(`--retime`, the load average "
        "beside it), 'identical' where their files hash alike; lowering peak RSS: the "
        "worker's resident set at its peak during the lowering, reset as it starts "
        "(/proc/self/clear_refs); 'relowered': the medians of `--relower`'s lowerings, "
        "each alone in a fresh worker that built and exported the model for it, in place of "
        "the sweep's ('own': what the lowering added at its peak over what the export "
        "left); '—': not measured (excluded from the summary).",
        "",
        f"- {library.nouns} found: {len(classes)}",
    ]
    if not_models:
        lines.append(f"  - not model classes: {not_models}")
    lines += [
        f"- tried: {len(seen)}; built, fed, exported and screened: {reached} "
        f"({100 * reached / max(1, len(seen)):.1f}%)",
    ]
    for status, count in sorted(counts.items()):
        lines.append(f"  - {status}: {count}")
    lines += _other_stacks(library.nouns, seen, versions)
    lines += _more_memory(library.nouns, seen)
    lines += [
        f"- candidates lowered: {len(lowered)}",
        f"- {library.nouns} with a computed-weight GEMM (`explain`, either path): "
        f"{sum(1 for r in found if computed(r))}",
        f"  - wrong against eager: {totals['wrong']}",
        f"  - crashes where stock lowers: {totals['crash where stock lowers']}",
        f"  - lower but cannot load (where stock's program loads, or stock's does not "
        f"lower): {totals['unloadable']}",
        f"  - computed-weight GEMMs outside without a code: {totals['outside without a code']}",
        f"  - xnnfold over the lowering timeout where stock lowers: "
        f"{totals['timeout where stock lowers']}",
        f"  - xnnfold out of the worker's memory where stock's is not: "
        f"{totals[_OUT_OF_MEMORY_PROBLEM]}",
    ]
    lines += summary_lines(list(seen.values()))
    lines += [
        f"- a GEMM-like op reads a computed tensor, but no lowering to read: {len(unread)}",
        "",
        "## Through torch.export and the partitioners",
        "",
        "`torch.export` (`strict=False`), then `to_edge_transform_and_lower` with the stock "
        "`XnnpackPartitioner` or with `XnnpackFoldingPartitioner` (after "
        "`prepare_for_xnnpack`). GEMMs: with a computed weight or bias / folded by xnnfold. "
        "Outside: computed-weight GEMMs left on portable. Diff: max abs against eager "
        "through executorch.runtime (the largest eager output in brackets); bytes: the "
        "`.pte` and its `.ptd`, if any. Stock's columns are `-` where it was not lowered "
        "(another class of the same group has them, and xnnfold's program lowered, matched "
        "eager and left nothing outside); `timeout` where the lowering took over the "
        "timeout.",
        "",
        *table_head(noun),
    ]
    lines += [
        row(
            r["class"],
            r.get("variants", {}),
            flagged[r["class"]],
            retime=r.get("retime"),
            relowered=r.get(RELOWERED),
        )
        for r in found
    ]
    lines += library.extra_report(found)
    errors = [
        (r["class"], f"{path} {label}", error_cell(e))
        for r in found
        for path in ("variants", "exporter")
        for label, e in r.get(path, {}).items()
        if isinstance(e, dict) and "error" in e
    ]
    errors += [
        (r["class"], f"relowered {label}", error_cell(run))
        for r in found
        for label, runs in r.get(RELOWERED, {}).items()
        if isinstance(runs, list)
        for run in runs
        if "error" in run
    ]
    if errors:
        lines += ["", "Errors in the tables above (both ways alike unless a problem says):", ""]
        lines += [
            f"- {name}, {where.replace('variants', 'partitioner')}: {error}"
            for name, where, error in errors
        ]
    if unread:
        lines += [
            "",
            "## A GEMM-like op reads a computed tensor, but nothing lowered to read",
            "",
            "Neither partitioner lowered these, or `explain` found no computed-weight GEMM "
            "in what did lower:",
            "",
        ]
        lines += [
            f"- {r['class']}: {error_cell(r.get('variants', {}).get(XNNFOLD, {})) or 'none found'}"
            for r in unread
        ]
    waiting = sorted(n for n, r in seen.items() if r["status"] == CANDIDATE)
    if waiting:
        lines += [
            "",
            "## Candidates not lowered yet",
            "",
            "A GEMM-like op of the exported program reads a tensor computed from "
            "constants; the run ended before these were lowered (a rerun without "
            f"`--screen-only` lowers them): {', '.join(waiting)}.",
        ]
    lines += larger_lines(list(seen.values()))
    lines += _out_of_reach(library.nouns, [r for r in seen.values() if r["status"] == SKIPPED])
    return "\n".join(lines) + "\n"


def _other_stacks(nouns: str, seen: dict[str, dict[str, Any]], versions: str) -> list[str]:
    """A bullet per stack other than the report's (``versions``) that some class's latest
    line was swept under, naming the classes; a line without a ``stack`` is read as the
    report's own."""
    by_stack: dict[str, list[str]] = collections.defaultdict(list)
    for name, result in sorted(seen.items()):
        if result.get("stack", versions) != versions:
            by_stack[result["stack"]].append(name)
    return [
        f"- {nouns} swept under {stack}, not the stack above: {len(names)} ({', '.join(names)})"
        for stack, names in sorted(by_stack.items())
    ]


def _more_memory(nouns: str, seen: dict[str, dict[str, Any]]) -> list[str]:
    """A bullet naming the classes swept in workers of more than the default address
    space (``--worker-memory``), with it."""
    named = [
        f"{name} ({result['worker_memory_gib']:g} GiB)"
        for name, result in sorted(seen.items())
        if "worker_memory_gib" in result
    ]
    if not named:
        return []
    return [
        f"- {nouns} swept in workers of more than {WORKER_MEMORY // 2**30} GiB "
        f"(`--worker-memory`): {', '.join(named)}"
    ]


def _out_of_reach(nouns: str, skipped: list[dict[str, Any]]) -> list[str]:
    reasons: collections.Counter[str] = collections.Counter()
    for r in skipped:
        reason = re.sub(r"[\d,]+", "N", r.get("reason", ""))
        reason = reason.replace("RuntimeError: ", "", 1) if reason.count(":") > 1 else reason
        reasons[f"{r.get('stage')}: {reason[:80].replace('|', '/')}"] += 1
    lines = ["", f"## {nouns.capitalize()} out of reach (build, inputs, export, timeout)", ""]
    lines += [f"| stage: error | {nouns} |", "|---|---|"]
    common = reasons.most_common(_REASON_ROWS)
    lines += [f"| {reason} | {count} |" for reason, count in common]
    rest = sum(reasons.values()) - sum(count for _, count in common)
    if rest:
        lines.append(f"| other reasons (in the JSONL) | {rest} |")
    return lines
