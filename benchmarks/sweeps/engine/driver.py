"""The driver: worker processes with a timeout per phase, resumable JSON-lines results,
and the command line every sweep script shares."""

from __future__ import annotations

import argparse
import json
import os
import queue
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from benchmarks.sweeps.engine.library import Library
from benchmarks.sweeps.engine.lowering import LOAD_FAILED, METHOD_NOT_LOADED, STOCK, XNNFOLD
from benchmarks.sweeps.engine.report import report
from benchmarks.sweeps.engine.results import (
    append,
    CANDIDATE,
    compact,
    COMPUTED,
    out_of_memory,
    read_results,
    SKIPPED,
    TIMED_OUT,
)
from benchmarks.sweeps.engine.retime import to_retime
from benchmarks.sweeps.engine.worker import LOWER, RETIME, SCREEN, serve, WORKER_MEMORY

# Timeouts, in CPU seconds of the worker (`_Worker.ask`).
DEFAULT_TIMEOUT = 150.0
DEFAULT_LOWERING_TIMEOUT = 480.0
# A phase also stops after this many times its timeout in wall seconds.
WALL_FACTOR = 6.0
# How often the driver looks at a worker's CPU time.
_POLL_S = 2.0
# What a timed-out or dead phase records in its partitioner's entry.
_TIMEOUT_ERROR = "timeout: lowering over {:.0f} CPU s"
_DIED_ERROR = "worker died lowering (a native crash, or out of memory)"
# The repository's root: workers run ``python -m`` from it.
ROOT = Path(__file__).resolve().parents[3]


@dataclass
class _Outcome:
    """What one worker said about one request: its result, or the phase it stopped in
    (timed out, or the worker died), with the partitioners' entries it finished."""

    result: Optional[dict[str, Any]] = None
    phase: str = "screen"
    died: bool = False
    partials: dict[str, Any] = field(default_factory=dict)


class _Worker:
    """A worker process running the library's command (``python -m``) with ``--worker``,
    from the repository's root, where ``benchmarks`` imports."""

    def __init__(self, command: str, memory: int) -> None:
        path = os.pathsep.join(filter(None, (str(ROOT), os.environ.get("PYTHONPATH"))))
        env = dict(os.environ, PYTHONUNBUFFERED="1", PYTHONPATH=path)
        self.process = subprocess.Popen(
            [sys.executable, "-m", command, "--worker", "--worker-memory", str(memory / 2**30)],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env=env,
        )
        self.lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.put(line)
        self.lines.put("")

    def cpu_seconds(self) -> float:
        """The CPU seconds the worker has used (user and system, from /proc)."""
        fields = Path(f"/proc/{self.process.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def ask(self, request: dict[str, Any], timeout: float, lowering_timeout: float) -> _Outcome:
        """Send ``request`` and wait: ``timeout`` CPU seconds of the worker to build,
        export and screen, ``lowering_timeout`` for each later phase; a phase also stops
        after `WALL_FACTOR` times that in wall seconds (a worker that waits, or gets no
        CPU). CPU time makes a timeout mean the same on a loaded machine as on an idle one."""
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps(request) + "\n")
        self.process.stdin.flush()
        outcome = _Outcome()
        limit, since, cpu_since = timeout, time.monotonic(), self.cpu_seconds()
        while True:
            try:
                line = self.lines.get(timeout=_POLL_S)
            except queue.Empty:
                line = None
            if line == "":
                outcome.died = True
                return outcome
            if line is not None:
                kind, _, text = line.rstrip("\n").partition(" ")
                if kind == "PHASE":
                    outcome.phase = text
                    limit, since, cpu_since = lowering_timeout, time.monotonic(), self.cpu_seconds()
                elif kind == "PARTIAL":
                    outcome.partials.update(json.loads(text))
                elif kind == "RESULT":
                    outcome.result = json.loads(text)
                    return outcome
            wall = time.monotonic() - since
            if self.cpu_seconds() - cpu_since > limit or wall > WALL_FACTOR * limit:
                return outcome

    def stop(self) -> None:
        self.process.kill()
        self.process.wait()


class _Pool:
    """One worker thread's worker process, replaced after one times out or dies."""

    def __init__(self, command: str, timeout: float, lowering_timeout: float, memory: int) -> None:
        self.command = command
        self.memory = memory
        self.timeout = timeout
        self.lowering_timeout = lowering_timeout
        self.current: Optional[_Worker] = None

    def ask(self, request: dict[str, Any]) -> _Outcome:
        if self.current is None:
            self.current = _Worker(self.command, self.memory)
        outcome = self.current.ask(request, self.timeout, self.lowering_timeout)
        if outcome.result is None:
            self.close()
        return outcome

    def close(self) -> None:
        if self.current is not None:
            self.current.stop()
            self.current = None

    def sweep(self, request: dict[str, Any]) -> dict[str, Any]:
        """``request``'s result line; a class skipped, or a partitioner's entry failed, for
        want of memory, or a program that lowered but did not load (the runtime's sign of
        an address space too full for the delegate's init), is retried once in a fresh
        worker: an earlier class may have filled the worker's address space. The retry's
        line records the errors that caused it; what the retry finds stands, as the
        report reads it (a program that does not load again is unloadable)."""
        result = self._sweep(request)
        errors = [result.get("reason", "")] if result["status"] == SKIPPED else []
        errors += [entry.get("error", "") for entry in result.get("variants", {}).values()]
        causes = [error for error in errors if out_of_memory(error) or _not_loaded(error)]
        if causes:
            self.close()
            result = {**self._sweep(request), "retried": "in a fresh worker", "after": causes}
        return result

    def _sweep(self, request: dict[str, Any]) -> dict[str, Any]:
        """``request``'s result line. A partitioner whose lowering times out or kills the
        worker gets that as its entry, and a fresh worker lowers the class with the
        others: a timeout applies to each partitioner alike, and is recorded for each."""
        stopped: dict[str, Any] = {}
        finished: dict[str, Any] = {}
        started = time.perf_counter()
        while True:
            outcome = self.ask({**request, "skip": sorted(stopped)})
            finished.update(outcome.partials)
            if outcome.result is not None:
                result = outcome.result
                break
            label = outcome.phase.removeprefix("lower ")
            if outcome.phase == "screen":
                reason = "worker died (a native crash, or out of memory)"
                if not outcome.died:
                    reason = f"over {self.timeout:.0f} CPU s, building or exporting"
                stage = "worker died" if outcome.died else "timeout"
                return {**_head(request), "status": SKIPPED, "stage": stage, "reason": reason}
            if label in (XNNFOLD, STOCK):
                error = (
                    _DIED_ERROR if outcome.died else _TIMEOUT_ERROR.format(self.lowering_timeout)
                )
                stopped[label] = {"error": error, "timeout": not outcome.died}
                if {XNNFOLD, STOCK} <= set(stopped) | set(finished):
                    result = {**_head(request), "status": COMPUTED, "compared": True}
                    break
                continue
            # Timing or the library's extra path stopped: what was lowered stands.
            result = {**_head(request), "status": COMPUTED, "stopped": outcome.phase}
            break
        variants = {**finished, **result.get("variants", {}), **stopped}
        if variants:
            result["variants"] = variants
        if any(entry.get("timeout") for entry in variants.values()):
            result["status"] = TIMED_OUT
        result["seconds"] = round(time.perf_counter() - started, 1)
        return result


def _not_loaded(error: str) -> bool:
    """Whether ``error`` is a program that lowered and failed to load (not one that loaded
    and failed to run: that fails again in a fresh worker)."""
    return error.startswith(LOAD_FAILED) and METHOD_NOT_LOADED in error


def _head(request: dict[str, Any]) -> dict[str, Any]:
    return {"class": request["class"], "module": request["module"]}


def run(
    library: Library,
    classes: list[tuple[str, str]],
    *,
    timeout: float,
    lowering_timeout: float,
    jobs: int,
    compare_all: bool,
    screen_only: bool,
    extra: bool = True,
    again: frozenset[str] | set[str] = frozenset(),
    memory: int = WORKER_MEMORY,
) -> None:
    """Sweep ``classes`` in ``jobs`` workers, appending to the library's results; a class
    already there is skipped, unless only screened (`CANDIDATE`) and this run lowers, or
    named in ``again``. Each line records the stack it was swept under
    (`Library.versions`, here as in the workers: they run this interpreter), and the
    workers' address space (``memory`` bytes) where it is not `WORKER_MEMORY`.

    Stock's partitioner (and, where ``extra``, the library's extra path) run for every
    class where ``compare_all`` or `Library.stock_for_every_class`, else for the first
    class of each group found with a computed-weight GEMM. A group one of whose classes
    timed out lowering with both partitioners has its other classes screened only.
    """
    results = read_results(library.results)
    compared = {r["module"] for r in results.values() if r.get("compared")}
    done = {
        n
        for n, r in results.items()
        if n not in again and (screen_only or r["status"] != CANDIDATE)
    }
    pending = [(m, n) for m, n in classes if n not in done]
    slow = {r["module"]: n for n, r in results.items() if n not in again and _both_stopped(r)}
    if not screen_only:
        # Round-robin over groups: each group's first pending class, then each group's
        # second, ...: a run stopped early has lowered as many architectures as it could.
        turn: dict[str, int] = {}
        ranked = []
        for index, (group, name) in enumerate(pending):
            turn[group] = turn.get(group, -1) + 1
            ranked.append(((turn[group], index), (group, name)))
        pending = [item for _, item in sorted(ranked)]
    print(f"{len(classes)} classes, {len(classes) - len(pending)} already done", flush=True)
    stack = library.versions()
    recorded_memory = {} if memory == WORKER_MEMORY else {"worker_memory_gib": memory / 2**30}
    work: queue.Queue[tuple[int, str, str]] = queue.Queue()
    for index, (group, name) in enumerate(pending, 1):
        work.put((index, group, name))
    lock = threading.Lock()
    every = compare_all or library.stock_for_every_class

    def serve_queue() -> None:
        pool = _Pool(library.command, timeout, lowering_timeout, memory)
        while True:
            try:
                index, group, name = work.get_nowait()
            except queue.Empty:
                break
            mode = SCREEN if screen_only or group in slow else LOWER
            request = {"module": group, "class": name, "mode": mode}
            request["compare"] = every or group not in compared
            request["always_stock"] = compare_all
            request["extra"] = extra
            result = pool.sweep(request)
            if group in slow and result["status"] == CANDIDATE:
                result["reason"] = f"not lowered: {slow[group]}, of its group, timed out both ways"
            with lock:
                if result.get("compared") and result["status"] == COMPUTED:
                    compared.add(group)
                if _both_stopped(result):
                    slow.setdefault(group, name)
                append(library.results, {**result, "stack": stack, **recorded_memory})
                print(
                    f"[{index}/{len(pending)}] {name}: {result['status']}"
                    f" {result.get('reason', '')[:100]} ({result.get('seconds', '-')} s)",
                    flush=True,
                )
        pool.close()

    threads = [threading.Thread(target=serve_queue) for _ in range(jobs)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def retime(
    library: Library,
    names: list[str],
    *,
    lowering_timeout: float,
    timeout: float,
    memory: int,
) -> None:
    """Retime each class of ``names`` (`engine.retime`): a fresh worker lowers its
    programs again and times them in a process of their own; its result line is appended
    again with a ``"retime"`` entry (and the stack it was retimed under)."""
    results = read_results(library.results)
    stack = library.versions()
    print(f"{len(names)} rows to retime", flush=True)
    for index, name in enumerate(names, 1):
        old = results[name]
        pool = _Pool(library.command, timeout, lowering_timeout, memory)
        facts = {key: old[key] for key in library.build_facts if key in old}
        outcome = pool.ask({"module": old["module"], "class": name, "mode": RETIME, "facts": facts})
        pool.close()
        found = (outcome.result or {}).get("retime")
        if found is None:
            reason = (outcome.result or {}).get("reason") or (
                "worker died" if outcome.died else f"stopped in {outcome.phase}"
            )
            found = {"error": reason[:200]}
        found["stack"] = stack
        append(library.results, {**old, "retime": found})
        said = "identical" if found.get("identical") else found.get("ratio", found.get("error"))
        print(f"[{index}/{len(names)}] {name}: {said} load {found.get('loadavg')}", flush=True)


def _both_stopped(result: dict[str, Any]) -> bool:
    variants = result.get("variants", {})
    return all(variants.get(label, {}).get("timeout") for label in (XNNFOLD, STOCK))


def main(library: Library, *, description: str = "", argv: Optional[list[str]] = None) -> int:
    """The command line of a sweep over ``library`` (``argv``, else the process's),
    ``description`` its help text."""
    parser = argparse.ArgumentParser(description=description.strip())
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("--only", nargs="*", help="names to sweep")
    parser.add_argument("--limit", type=int, help="at most this many")
    parser.add_argument(
        "--timeout", type=float, default=DEFAULT_TIMEOUT, help="CPU seconds to build and export"
    )
    parser.add_argument(
        "--lowering-timeout",
        type=float,
        default=DEFAULT_LOWERING_TIMEOUT,
        help="CPU seconds for each later phase: each partitioner's lowering, the timing, ...",
    )
    parser.add_argument("--jobs", type=int, default=1, help="worker processes")
    parser.add_argument(
        "--compare-all",
        action="store_true",
        help="stock's partitioner (and the library's exporter) for every candidate, even "
        "one whose lowering has no computed-weight GEMM (lowering times side by side)",
    )
    parser.add_argument(
        "--no-extra",
        action="store_true",
        help="leave out the library's second lowering path (transformers' exporter)",
    )
    parser.add_argument(
        "--screen-only",
        action="store_true",
        help="build, export and screen; leave the lowerings to a later run",
    )
    parser.add_argument(
        "--redo", nargs="*", default=[], help="redo the results at these stages or statuses"
    )
    parser.add_argument("--fresh", action="store_true", help="redo the names given")
    parser.add_argument("--report", action="store_true", help="write the markdown only")
    parser.add_argument(
        "--compact",
        action="store_true",
        help="rewrite the results file keeping only the latest line of each class (what "
        "the report and a rerun read); not while a sweep of this library runs: what it "
        "appends meanwhile would be lost. Git keeps the lines dropped",
    )
    parser.add_argument(
        "--retime",
        action="store_true",
        help="retime the rows where xnnfold ran over 1.03x stock, each in fresh processes "
        "(with --fresh, those retimed already too; with --only, those named)",
    )
    parser.add_argument(
        "--worker-memory",
        type=float,
        default=WORKER_MEMORY / 2**30,
        help="GiB of address space per worker (recorded on each line where not the default)",
    )
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    memory = int(args.worker_memory * 2**30)
    if args.worker:
        return serve(library, memory=memory)
    if args.compact:
        size = library.results.stat().st_size if library.results.exists() else 0
        before, after = compact(library.results)
        now = library.results.stat().st_size if library.results.exists() else 0
        print(f"{library.results}: {before} lines, {size:,} B -> {after} lines, {now:,} B")
        return 0
    classes = library.discover()
    if args.report:
        library.table.write_text(report(library, read_results(library.results), classes))
        return 0
    if args.retime:
        names = to_retime(read_results(library.results), again=args.fresh)
        if args.only:
            names = [name for name in names if name in set(args.only)]
        retime(
            library,
            names[: args.limit] if args.limit else names,
            timeout=args.timeout,
            lowering_timeout=args.lowering_timeout,
            memory=memory,
        )
        return 0
    classes = library.order(classes)
    if args.only:
        wanted = set(args.only)
        classes = [c for c in classes if c[1] in wanted]
    if args.limit:
        classes = classes[: args.limit]
    # Classes to sweep again: their new line supersedes the old (`read_results`), and a
    # sweep never rewrites the file, so a run beside another on the same file loses no
    # line (`--compact` does rewrite it, and runs alone).
    again: set[str] = set()
    if args.redo:
        stages = set(args.redo)
        results = read_results(library.results)
        again = {n for n, r in results.items() if {r.get("stage"), r["status"]} & stages}
    if args.fresh:
        again |= {n for _, n in classes}
    run(
        library,
        classes,
        again=again,
        timeout=args.timeout,
        lowering_timeout=args.lowering_timeout,
        jobs=args.jobs,
        compare_all=args.compare_all,
        screen_only=args.screen_only,
        extra=not args.no_extra,
        memory=memory,
    )
    return 0
