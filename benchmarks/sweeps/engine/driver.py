"""The driver: worker processes with a timeout per phase (`Pool`), and the sweep (`run`)
that appends each class's line to the resumable JSON-lines results. The command line is
`engine.command_line`; ``--retime`` and ``--relower`` are `engine.remeasure`."""

from __future__ import annotations

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
from benchmarks.sweeps.engine.results import (
    append,
    CANDIDATE,
    COMPUTED,
    out_of_memory,
    read_results,
    SKIPPED,
    TIMED_OUT,
)
from benchmarks.sweeps.engine.worker import LOWER, SCREEN, WORKER_MEMORY

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
class Outcome:
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

    def ask(self, request: dict[str, Any], timeout: float, lowering_timeout: float) -> Outcome:
        """Send ``request`` and wait: ``timeout`` CPU seconds of the worker to build,
        export and screen, ``lowering_timeout`` for each later phase; a phase also stops
        after `WALL_FACTOR` times that in wall seconds (a worker that waits, or gets no
        CPU). CPU time makes a timeout mean the same on a loaded machine as on an idle one."""
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps(request) + "\n")
        self.process.stdin.flush()
        outcome = Outcome()
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


class Pool:
    """One worker thread's worker process, replaced after one times out or dies."""

    def __init__(self, command: str, timeout: float, lowering_timeout: float, memory: int) -> None:
        self.command = command
        self.memory = memory
        self.timeout = timeout
        self.lowering_timeout = lowering_timeout
        self.current: Optional[_Worker] = None

    def ask(self, request: dict[str, Any]) -> Outcome:
        """What the worker says to ``request`` (a fresh one where there is none)."""
        if self.current is None:
            self.current = _Worker(self.command, self.memory)
        outcome = self.current.ask(request, self.timeout, self.lowering_timeout)
        if outcome.result is None:
            self.close()
        return outcome

    def close(self) -> None:
        """Stop the worker: the next request starts a fresh one."""
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
        pool = Pool(library.command, timeout, lowering_timeout, memory)
        while True:
            try:
                index, group, name = work.get_nowait()
            except queue.Empty:
                break
            mode = SCREEN if screen_only or group in slow else LOWER
            request: dict[str, Any] = {"module": group, "class": name, "mode": mode}
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


def _both_stopped(result: dict[str, Any]) -> bool:
    variants = result.get("variants", {})
    return all(variants.get(label, {}).get("timeout") for label in (XNNFOLD, STOCK))
