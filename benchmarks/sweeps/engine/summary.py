"""The summary lines of a sweep report: xnnfold over stock in latency (on the retimed
figure), lowering time, lowering memory and bytes, over every row measured both ways.

Each line reads ``<axis> xnnfold/stock: median M, worst W (class)`` and counts the rows
left out for want of a measurement (shown "—" in the tables). Lowering time and memory
are ``--relower``'s medians where a line has them (`engine.relower`), the sweep's own
figures elsewhere, and their lines say how many rows are relowered: ``lowering time
xnnfold/stock (relowered N of M)``. Bytes: ``larger than stock: N rows, A attributed, Z
with nothing folded or tied``, each larger row attributed to what xnnfold's program holds
that stock's does not (`attribution`). Under the latency line, the rows whose xnnfold
program changed since the sweep timed it (`relower.changed_since_swept`): their latency,
diff and bytes are an earlier xnnfold's until swept again.
"""

from __future__ import annotations

import statistics
from typing import Any, Callable, Optional

from benchmarks.sweeps.engine.lowering_cost import STOCK, XNNFOLD
from benchmarks.sweeps.engine.relower import (
    changed_since_swept,
    CPU_SECONDS,
    lowered_both_ways,
    OWN_PEAK,
    PEAK,
    RELOWERED,
    relowered_pair,
)
from benchmarks.sweeps.engine.retime import latency_ratio, SLOWER_ABOVE

# What a row without a measurement shows.
NONE = "—"
# The rows the lowering-memory bound is read over: models above 100M parameters, told by
# stock's program, whose fp32 weights take 4 bytes each (the sweeps build in fp32).
LARGE_PROGRAM_BYTES = 400_000_000


def retimed_ratio(result: dict[str, Any]) -> Optional[float]:
    """xnnfold's latency over stock's on the figure that decides: the retimed one (1 for
    byte-identical programs), else the sweep's own where it is at most `SLOWER_ABOVE`
    (nothing to retime); None where a row above it is not retimed yet, or not timed."""
    retime = result.get("retime", {})
    if "ratio" in retime:
        return float(retime["ratio"])
    ratio = latency_ratio(result.get("variants", {}))
    return ratio if ratio is not None and ratio <= SLOWER_ABOVE else None


def lowering_time_ratio(result: dict[str, Any]) -> Optional[float]:
    """xnnfold's lowering CPU seconds over stock's: the relowered medians where the line
    has both, else the sweep's, where both partitioners' programs were written."""
    relowered = relowered_pair(result.get(RELOWERED, {}), CPU_SECONDS)
    if relowered is not None:
        return relowered[0] / relowered[1]
    return sweep_lowering_ratio(result.get("variants", {}))


def sweep_lowering_ratio(variants: dict[str, Any]) -> Optional[float]:
    """xnnfold's lowering CPU seconds over stock's as the sweep measured them, where both
    partitioners' programs were written (a lowering that failed records its time too,
    not counted here)."""
    ours, stock = variants.get(XNNFOLD, {}), variants.get(STOCK, {})
    if (
        "bytes" in ours
        and "bytes" in stock
        and ours.get("lower_cpu_s")
        and stock.get("lower_cpu_s")
    ):
        return float(ours["lower_cpu_s"]) / float(stock["lower_cpu_s"])
    return None


def lowering_memory_ratio(result: dict[str, Any]) -> Optional[float]:
    """xnnfold's resident set at its peak during the lowering over stock's (what the
    process held included): the relowered medians where the line has both, else the
    sweep's."""
    relowered = relowered_pair(result.get(RELOWERED, {}), PEAK)
    if relowered is not None:
        return relowered[0] / relowered[1]
    ours, stock = _pair(result)
    if ours.get("lower_peak_rss_mib") and stock.get("lower_peak_rss_mib"):
        return float(ours["lower_peak_rss_mib"]) / float(stock["lower_peak_rss_mib"])
    return None


def own_memory_ratio(result: dict[str, Any]) -> Optional[float]:
    """What xnnfold's lowering added to the resident set at its peak over what its export
    left, over stock's: relowered lines only (the sweep's worker holds both exports)."""
    relowered = relowered_pair(result.get(RELOWERED, {}), OWN_PEAK)
    return None if relowered is None else relowered[0] / relowered[1]


def large(result: dict[str, Any]) -> bool:
    """Whether stock's program is over `LARGE_PROGRAM_BYTES`: a model above 100M
    parameters."""
    return _pair(result)[1].get("bytes", 0) > LARGE_PROGRAM_BYTES


def _relowered(key: str) -> Callable[[dict[str, Any]], bool]:
    """Whether a row's ``key`` is relowered (both partitioners' medians), for `_line`."""
    return lambda result: relowered_pair(result.get(RELOWERED, {}), key) is not None


def _pair(result: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    variants = result.get("variants", {})
    return variants.get(XNNFOLD, {}), variants.get(STOCK, {})


def larger(result: dict[str, Any]) -> bool:
    """Whether xnnfold's program (and its data) is larger than stock's."""
    ours, stock = _pair(result)
    return "bytes" in ours and "bytes" in stock and ours["bytes"] > stock["bytes"]


def attribution(result: dict[str, Any]) -> Optional[str]:
    """What xnnfold's program holds that stock's does not, where it is larger: its folded
    GEMMs (`explain`'s growth budget: a folded weight is stored in the delegate's layout,
    and a folded GEMM may keep a source another op reads), its tied tables' `.ptd` (its
    header), the tanh GELUs it computes exactly (six nodes for stock's one), or None where
    none of these is there.

    A row recorded before the tables were counted (no ``tied`` in its entry) with a `.ptd`
    and nothing folded is attributed to that `.ptd`: a one-method program's decomposed
    copy was once counted as a second method, which tagged every linear weight for the
    `.ptd`; swept again, such a row writes stock's bytes."""
    if not larger(result):
        return None
    ours, stock = _pair(result)
    extra = ours["bytes"] - stock["bytes"]
    parts = []
    if ours.get("folded"):
        parts.append(f"{ours['folded']} folded GEMM(s) (`explain`)")
    if ours.get("tied"):
        parts.append(f"{ours['tied']} tied table(s) in a .ptd")
    elif ours.get("data_files") and "tied" not in ours:
        parts.append("a .ptd with nothing folded (recorded before the one-method tying fix)")
    if ours.get("exact_gelus"):
        parts.append(f"{ours['exact_gelus']} tanh GELU(s) computed exactly")
    return f"+{extra:,} B: {', '.join(parts)}" if parts else None


def _line(
    label: str,
    rows: list[dict[str, Any]],
    ratio: Callable[[dict[str, Any]], Optional[float]],
    unmeasured: str,
    *,
    relowered: Optional[Callable[[dict[str, Any]], bool]] = None,
    bullet: str = "- ",
) -> str:
    """``label``'s median and worst ``ratio`` over ``rows``; where ``relowered`` says some
    of the rows measured are relowered, the label says how many."""
    measured = [(r, row) for row in rows for r in [ratio(row)] if r is not None]
    found = sorted((r, row["class"]) for r, row in measured)
    left = len(rows) - len(found)
    again = sum(1 for _, row in measured if relowered is not None and relowered(row))
    if again:
        label = f"{label} (relowered {again} of {len(found)})"
    if not found:
        return f"{bullet}{label}: {NONE} (no row measured both ways; {left} {unmeasured})"
    worst, name = found[-1]
    return (
        f"{bullet}{label}: median {statistics.median(r for r, _ in found):.2f}, "
        f"worst {worst:.2f} ({name}), over {len(found)} rows; {left} {unmeasured} ({NONE})"
    )


def _slower_cause(result: dict[str, Any]) -> str:
    """What the retimed row's xnnfold program computes that stock's does not, where that
    is known: the tanh GELUs it computes exactly (stock's compute exact GELU)."""
    gelus = result.get("retime", {}).get("exact_gelus")
    return f"; {gelus} tanh GELUs computed exactly, as eager" if gelus else ""


def summary_lines(results: list[dict[str, Any]]) -> list[str]:
    """The four summary lines over the rows lowered both ways, the rows timed on an
    earlier xnnfold program under the first, the models above 100M parameters and the
    lowering's own memory (where some rows are relowered) under the third, and the rows
    slower than `SLOWER_ABOVE` stock on the retimed figure."""
    both = [r for r in results if lowered_both_ways(r)]
    slow = sorted(
        (r["class"], ratio, _slower_cause(r))
        for r in both
        for ratio in [retimed_ratio(r)]
        if ratio and ratio > SLOWER_ABOVE
    )
    larger_rows = [r for r in both if larger(r)]
    attributed = [r for r in larger_rows if attribution(r)]
    lines = [
        _line(
            "latency xnnfold/stock (retimed)",
            both,
            retimed_ratio,
            f"not timed both ways, or above {SLOWER_ABOVE}x and not retimed yet (`--retime`)",
        ),
    ]
    changed = sorted(
        (r["class"], delta) for r in both for delta in [changed_since_swept(r)] if delta
    )
    if changed:
        lines.append(
            f"  - timed on an earlier xnnfold program (relowered today: stock's bytes the "
            f"sweep's, xnnfold's not; `--fresh` sweeps a row again): {len(changed)} rows: "
            + ", ".join(f"{name} ({delta:+,} B)" for name, delta in changed)
        )
    lines += [
        _line(
            "lowering time xnnfold/stock",
            both,
            lowering_time_ratio,
            "without both CPU times",
            relowered=_relowered(CPU_SECONDS),
        ),
        _line(
            "lowering memory xnnfold/stock",
            both,
            lowering_memory_ratio,
            "without both peaks (recorded before the peak was)",
            relowered=_relowered(PEAK),
        ),
        _line(
            "over the models above 100M parameters "
            f"(stock's program over {LARGE_PROGRAM_BYTES // 1_000_000} MB)",
            [r for r in both if large(r)],
            lowering_memory_ratio,
            "without both peaks",
            bullet="  - ",
        ),
    ]
    if any(own_memory_ratio(r) is not None for r in both):
        lines.append(
            _line(
                "the lowering's own memory xnnfold/stock, over what the export left",
                both,
                own_memory_ratio,
                "not relowered",
                bullet="  - ",
            )
        )
    lines += [
        f"- larger than stock: {len(larger_rows)} rows, {len(attributed)} attributed, "
        f"{len(larger_rows) - len(attributed)} with nothing folded or tied",
    ]
    if slow:
        lines.append(
            f"  - slower than {SLOWER_ABOVE}x stock on the retimed figure: "
            + ", ".join(f"{name} ({ratio:.2f}x{cause})" for name, ratio, cause in slow)
        )
    return lines


def larger_lines(results: list[dict[str, Any]]) -> list[str]:
    """A section listing each larger-than-stock row with its attribution."""
    rows = sorted((r for r in results if larger(r)), key=lambda r: r["class"])
    if not rows:
        return []
    lines = [
        "",
        "## Larger than stock",
        "",
        "xnnfold's program and data over stock's, and what it holds that stock's does not:",
        "",
    ]
    return lines + [f"- {r['class']}: {attribution(r) or 'nothing folded or tied'}" for r in rows]
