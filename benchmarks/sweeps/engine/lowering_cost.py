"""What one lowering costs: the wall and CPU seconds of ``to_edge_transform_and_lower``
through `xnnfold.save`, and the resident set at its peak.

The peak is ``VmHWM`` of ``/proc/self/status``, reset to the resident set as the lowering
starts (``/proc/self/clear_refs``, Linux 4.0+): read after the lowering, it is the
process's resident set at its peak during the lowering, what the process held already
(the model, its exported program) included, whatever the process's peak was before
(building the model, an earlier lowering). Over the resident set just before the reset,
it is what the lowering itself added at its peak. The reset clears the process's peak
for ``getrusage`` too (``ru_maxrss`` reads the same high-water mark), so the process's
peak since it started is the larger of ``VmHWM`` read before the reset and after the
lowering. The CPU seconds are this process's
(`time.process_time`): with one thread (the caller's ``torch.set_num_threads``) they do
not depend on how busy the machine is, as wall seconds do.

The sweep's lowering (`engine.lowering`), ``--relower`` (`engine.remeasure`: each
lowering alone in a fresh worker) and benchmarks/timing/lowering_memory.py measure here,
so that their figures mean the same.
"""

from __future__ import annotations

import contextlib
import gc
import os
import time
from pathlib import Path
from typing import Any, ContextManager

XNNFOLD, STOCK = "xnnfold", "stock"
# xnnfold's partitioner stores a tied table once, in a `.ptd` (not its default: a program
# then loads with its data file): every line of the results lowered this way, and it
# exercises the `.ptd` path `xnnfold.save` and the loading take.
TIE_TABLES = True


def status_mib(key: str) -> float | None:
    """A figure of ``/proc/self/status`` (``VmRSS``, ``VmHWM``) in MiB, or None where
    there is no procfs or no such figure."""
    try:
        lines = Path("/proc/self/status").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        name, _, value = line.partition(":")
        if name == key:
            return round(int(value.split()[0]) / 1024, 1)
    return None


def reset_peak_rss() -> bool:
    """Reset this process's peak resident set (``VmHWM``) to its resident set now, through
    ``/proc/self/clear_refs`` (Linux): the peak read after a lowering is then the
    lowering's, whatever the process held at its peak before. False where unsupported."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        return False
    return True


def peak_rss_mib() -> float | None:
    """This process's peak resident set since its last reset (``VmHWM``, MiB)."""
    return status_mib("VmHWM")


def partitioner(label: str) -> Any:
    """``label``'s partitioner, as the sweep lowers with it: xnnfold's with its tables
    tied (`TIE_TABLES`) and facts shared across methods, or stock's."""
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner

    import xnnfold

    if label == XNNFOLD:
        return xnnfold.XnnpackFoldingPartitioner(
            tie_tables=TIE_TABLES, facts=xnnfold.CrossMethodFacts()
        )
    return XnnpackPartitioner()


def exported(label: str, module: Any, args: tuple[Any, ...]) -> Any:
    """The program ``label``'s partitioner takes, exported as the sweep exports it
    (``strict=False``): xnnfold's through `xnnfold.prepare_for_xnnpack`, whose module is
    released before the lowering."""
    import torch

    import xnnfold

    prepared = xnnfold.prepare_for_xnnpack(module) if label == XNNFOLD else module
    program = torch.export.export(prepared, args, strict=False)
    del prepared
    gc.collect()
    return program


def lowered(program: Any, chosen: Any, directory: Path) -> tuple[Any, tuple[Path, ...]]:
    """The edge program ``chosen`` (a partitioner) lowers ``program`` to, and the files
    `xnnfold.save` writes to ``directory``: the `.pte`, then the `.ptd` a program with a
    tied table needs (docs/tied-tables.md)."""
    from executorch.exir import to_edge_transform_and_lower

    import xnnfold

    edge = to_edge_transform_and_lower(program, partitioner=[chosen])
    return edge, xnnfold.save(edge.to_executorch(), directory / "model.pte")


def measured_lowering(
    program: Any, label: str, directory: Path, *, around: ContextManager[Any] | None = None
) -> dict[str, Any]:
    """``program`` lowered with ``label``'s partitioner into ``directory``, and what it
    cost: ``lower_s`` and ``lower_cpu_s`` (wall and CPU seconds, a failed lowering's
    too), ``peak_mib`` (the resident set at its peak during the lowering, what the
    process held included), ``lower_peak_mib`` (that over the resident set just before:
    the lowering's own), ``process_peak_mib`` (the process's peak since it started,
    building and exporting included), ``loadavg`` (the machine's, before and after) and
    ``bytes`` (the files written); ``error`` where the lowering failed. ``around`` (a
    profiler, say) is entered for the lowering alone."""
    chosen = partitioner(label)
    found: dict[str, Any] = {}
    gc.collect()
    before, earlier_peak = status_mib("VmRSS"), peak_rss_mib()
    reset = reset_peak_rss()
    load = os.getloadavg()
    wall, cpu = time.perf_counter(), time.process_time()
    try:
        with around if around is not None else contextlib.nullcontext():
            edge, files = lowered(program, chosen, directory)
        found["bytes"] = sum(path.stat().st_size for path in files)
    except Exception as error:
        found["error"] = f"{type(error).__name__}: {str(error).strip()[:200]}"
    found["lower_s"] = round(time.perf_counter() - wall, 2)
    found["lower_cpu_s"] = round(time.process_time() - cpu, 2)
    found["loadavg"] = [round(value, 2) for value in (*load, *os.getloadavg())]
    peak = peak_rss_mib()
    found["peak_mib"] = peak
    if reset and peak is not None and before is not None:
        found["lower_peak_mib"] = round(peak - before, 1)
    if peak is not None and earlier_peak is not None:
        found["process_peak_mib"] = max(peak, earlier_peak)
    return found
