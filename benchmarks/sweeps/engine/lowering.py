"""Lowering a candidate with each partitioner, running it against eager and timing it.

Each partitioner's entry records the computed-weight GEMMs `xnnfold.explain` finds, those
left outside a delegate, the bytes a device stores (the ``.pte`` and its ``.ptd``), the
SHA-256 of each file, the max abs diff against eager through executorch.runtime, the
lowering time (wall and CPU seconds of ``to_edge_transform_and_lower`` through
`xnnfold.save`), the lowering's peak resident set (`engine.lowering_cost`: the peak of
the worker's resident set during the lowering, what the worker already held included)
and the median latency of calls interleaved with the other partitioner's program; or the
error where one stage failed.

Each program is loaded and run against eager alone, and released before the next
partitioner lowers, so that a program as large as the worker's memory allows is judged
against eager whatever the other partitioner's program weighs. The timing then loads the
programs together; where they do not fit together, it times each alone
(``"timed": "alone"`` on each entry: not interleaved, so noisier), and a program that
does not load or run a second time is left untimed (``"timed"`` starts with
`NOT_LOADED_AGAIN` and the entry has no ``"ms"``): its diff stands.
"""

from __future__ import annotations

import contextlib
import gc
import hashlib
import inspect
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

from benchmarks.sweeps.engine.lowering_cost import (
    lowered,
    partitioner,
    peak_rss_mib,
    reset_peak_rss,
    STOCK,
    XNNFOLD,
)
from benchmarks.sweeps.engine.screen import compare

# A variant is wrong when its max abs diff against eager exceeds this, relative to the
# largest eager output (at least 1).
TOLERANCE = 1e-3
# Interleaved calls of each program: at most `RUNS`, fewer (an odd number, down to one)
# where one round of calls takes more than `TIMING_BUDGET_S` / `RUNS` seconds: a program
# that leaves its GEMMs on portable can take seconds a call.
RUNS = 7
TIMING_BUDGET_S = 30.0
# An entry's ``timed`` where its program, loaded and run against eager once, did not load
# or run again for the timing.
NOT_LOADED_AGAIN = "not loaded again"
# How an entry's error starts where its program lowered but did not load or run.
LOAD_FAILED = "load/run"
# What executorch.runtime says where a program's method does not load (as against one
# that loads and fails to execute).
METHOD_NOT_LOADED = "Failed to load"


def wrong(entry: dict[str, Any]) -> bool:
    """Whether a partitioner's program is off from eager beyond `TOLERANCE`."""
    return "diff" in entry and entry["diff"] > TOLERANCE * max(1.0, entry.get("scale", 0.0))


def gemm_counts(program: Any) -> dict[str, Any]:
    """What `xnnfold.explain` finds in a lowered ``program``: GEMMs with a computed weight
    or bias, those folded, those left outside a delegate (module and reason code), the
    tables stored once (tied), and the tanh GELUs computed exactly where stock's serializer
    writes exact GELU (docs/limits.md: a cost in latency that stock's program does not
    pay, because it computes something else)."""
    import xnnfold

    report = xnnfold.explain(program)
    return {
        "computed": sum(1 for row in report.rows if row.computed),
        "folded": sum(1 for row in report.rows if row.folded),
        "outside": [
            f"{row.module} ({row.code or 'no code'})" for row in report.outside if row.computed
        ],
        "tied": len(report.shared),
        "exact_gelus": len(report.exact_gelus),
    }


def address_space_gib() -> dict[str, float]:
    """This process's address space in use now and at its peak (GiB, from
    ``/proc/self/status``, where there is one) and its limit (a worker's
    ``RLIMIT_AS``, where set)."""
    import resource

    found: dict[str, float] = {}
    limit, _ = resource.getrlimit(resource.RLIMIT_AS)
    if limit != resource.RLIM_INFINITY:
        found["limit"] = round(limit / 2**30, 2)
    try:
        lines = Path("/proc/self/status").read_text().splitlines()
    except (OSError, MemoryError):
        # No procfs, or no memory left to read it with: the limit alone.
        return found
    for line in lines:
        key, _, value = line.partition(":")
        if key in ("VmSize", "VmPeak"):
            found[key.removeprefix("Vm").lower()] = round(int(value.split()[0]) / 2**20, 2)
    return found


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


class FromFile:
    """A written program's ``forward``, loaded through executorch.runtime from its file
    (no copy of it in Python bytes: a program can be as large as a worker's memory
    allows) with its data file. It holds the runtime `Program` as long as the `Method`,
    which borrows from it. ``data_path`` is passed only with a data file: executorch
    1.4's ``load_program`` has no such keyword, and a program with a data file is then
    loaded the way `xnnfold.LoadedProgram` loads it there (from its bytes)."""

    def __init__(self, pte: Path, data: Path | None) -> None:
        from executorch.runtime import Runtime

        import xnnfold

        runtime = Runtime.get()
        self._program: Any
        if data is None:
            self._program = runtime.load_program(pte)
            self._execute = self._program.load_method("forward").execute
        elif "data_path" in inspect.signature(runtime.load_program).parameters:
            self._program = runtime.load_program(pte, data_path=data)
            self._execute = self._program.load_method("forward").execute
        else:
            self._program = xnnfold.LoadedProgram(pte.read_bytes(), data_path=data)
            self._execute = self._program

    def __call__(self, inputs: list[Any]) -> Any:
        return self._execute(inputs)


def lower_one(
    label: str, program: Any, args: tuple[Any, ...], expected: list[Any], directory: Path
) -> tuple[dict[str, Any], Callable[[], Any] | None]:
    """``program`` (an ExportedProgram) lowered with ``label``'s partitioner into
    ``directory``: its entry, and how to load the written program again (None where a
    stage failed). The program loaded here for the diff is released on return."""
    chosen = partitioner(label)
    entry: dict[str, Any] = {}
    gc.collect()
    reset = reset_peak_rss()
    wall, cpu = time.perf_counter(), time.process_time()
    try:
        edge, (pte, *data) = lowered(program, chosen, directory)
    except Exception as error:
        entry["error"] = f"lower: {type(error).__name__}: {str(error)[:300]}"
    # How long the lowering took, or took to fail (a stop both partitioners may share).
    entry["lower_s"] = round(time.perf_counter() - wall, 2)
    entry["lower_cpu_s"] = round(time.process_time() - cpu, 2)
    if reset:
        entry["lower_peak_rss_mib"] = peak_rss_mib()
    if "error" in entry:
        return entry, None
    entry.update(gemm_counts(edge))
    # The lowering's graphs and delegate payloads, freed before the program loads.
    del edge, program
    gc.collect()
    # What a device stores: the `.pte` and its `.ptd`, if any.
    entry["bytes"] = sum(path.stat().st_size for path in (pte, *data))
    # What identical programs share: `--retime` spends no time on them.
    entry["sha256"] = [_sha256(path) for path in (pte, *data)]
    if data:
        entry["data_files"] = [path.name for path in data]

    def load() -> FromFile:
        return FromFile(pte, data[0] if data else None)

    try:
        loaded = load()
        start = time.perf_counter()
        actual = loaded(list(args))
        entry["first_ms"] = round((time.perf_counter() - start) * 1000, 3)
    except Exception as error:
        entry["error"] = f"{LOAD_FAILED}: {type(error).__name__}: {str(error)[:300]}"
        # A runtime that fails to load a method may be out of address space ("error:
        # 0x1" from an allocation inside the delegate's init): what the worker held says.
        entry["address_space_gib"] = address_space_gib()
        return entry, None
    entry["diff"], entry["scale"] = compare(actual, expected)
    return entry, load


def through_partitioners(
    programs: dict[str, Callable[[], Any]],
    args: tuple[Any, ...],
    expected: list[Any],
    *,
    compare_stock: bool,
    always_stock: bool = False,
    announce: Callable[[str], None],
    partial: Callable[[str, dict[str, Any]], None],
) -> dict[str, Any]:
    """Each partitioner's entry, lowering ``programs`` (label -> a function exporting the
    program that partitioner takes) in order, xnnfold's first.

    Stock's lowering runs where xnnfold's is absent (it timed out in an earlier worker),
    failed, is off from eager or left a computed-weight GEMM outside, with or without a
    computed-weight GEMM: what stock does there decides whether it counts against
    xnnfold. Otherwise it runs where ``compare_stock`` and xnnfold's found a
    computed-weight GEMM, or where ``always_stock`` (for the lowering times side by
    side). ``announce`` is told each
    phase before it starts (the driver's timeout is per phase), ``partial`` each entry as
    it is done (kept by the driver if a later phase times out).
    """
    variants: dict[str, Any] = {}
    loaders: dict[str, Callable[[], Any]] = {}
    # The programs' files live until the timings are done.
    with contextlib.ExitStack() as files:
        for label, export in programs.items():
            if label == STOCK and XNNFOLD in variants:
                ours = variants[XNNFOLD]
                decides = "error" in ours or wrong(ours) or bool(ours["outside"])
                if not (decides or (compare_stock and (ours["computed"] or always_stock))):
                    break
            # The last lowering's edge program and buffers, freed before the next.
            gc.collect()
            announce(f"lower {label}")
            directory = Path(files.enter_context(tempfile.TemporaryDirectory(prefix="sweep-")))
            entry, load = lower_one(label, export(), args, expected, directory)
            variants[label] = entry
            partial(label, entry)
            if load is not None:
                loaders[label] = load
        if loaders:
            announce("time")
            for label, ms in _timed(loaders, args, variants).items():
                variants[label]["ms"] = ms
    return variants


def _timed(
    loaders: dict[str, Callable[[], Any]], args: tuple[Any, ...], variants: dict[str, Any]
) -> dict[str, float]:
    """The median ms of each program ``loaders`` load, after one untimed call of each (a
    fresh load is not warm): interleaved where they load together, else each alone (and
    its entry in ``variants`` says so); a program that does not load or run alone either
    is left out, its entry's ``timed`` saying why.

    Each program has loaded and run alone already (`lower_one`), so one that fails to load
    or run beside the other ran out of the worker's memory: the runtime may say so as a
    MemoryError, a method that fails to load or an ``execute()`` that fails (an allocation
    inside XNNPACK). Each entry timed apart records that error as ``together``.
    """
    gc.collect()
    try:
        # Loading and running together both allocate: either may fail for memory.
        return interleaved(_calls({label: load() for label, load in loaders.items()}, args))
    except (MemoryError, RuntimeError) as error:
        # Unbound when the handler ends, the traceback frees the programs it holds.
        together = f"{type(error).__name__}: {error}"
    gc.collect()
    times = {}
    for label, load in loaders.items():
        variants[label]["together"] = together
        try:
            program = load()
            times.update(interleaved(_calls({label: program}, args)))
            variants[label]["timed"] = "alone"
        except (MemoryError, RuntimeError) as error:
            # It loaded and ran once already: what failed is a second load or run, in
            # what the lowerings left of the worker's address space. Its diff stands.
            variants[label]["timed"] = f"{NOT_LOADED_AGAIN}: {type(error).__name__}: {error}"
        program = None
        gc.collect()
    return times


def _calls(programs: dict[str, Any], args: tuple[Any, ...]) -> dict[str, Callable[[], Any]]:
    return {label: lambda run=run: run(list(args)) for label, run in programs.items()}


def interleaved(calls: dict[str, Callable[[], Any]]) -> dict[str, float]:
    """The median ms of each call, timed in turn: the order alternates every round.

    An untimed round first warms each call and measures how long a round takes; then
    `RUNS` rounds, or fewer for slow programs.
    """
    labels = list(calls)
    start = time.perf_counter()
    for label in labels:
        calls[label]()
    first_round_s = time.perf_counter() - start
    runs = max(1, min(RUNS, int(TIMING_BUDGET_S / max(first_round_s, 1e-9))))
    if runs % 2 == 0:
        runs -= 1
    times: dict[str, list[float]] = {label: [] for label in calls}
    for run in range(runs):
        for label in labels if run % 2 == 0 else list(reversed(labels)):
            start = time.perf_counter()
            calls[label]()
            times[label].append((time.perf_counter() - start) * 1000)
    return {label: round(sorted(samples)[len(samples) // 2], 3) for label, samples in times.items()}
