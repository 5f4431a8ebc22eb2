"""Which rows ``--relower`` lowers again, and the figures the report takes from it.

The sweep measures each lowering in a worker that has built and exported the model for
both partitioners, and may hold what an earlier lowering left. ``--relower``
(`engine.remeasure`) lowers the model a row's line records again with each partitioner,
each lowering alone in a fresh worker (`engine.worker.relowered`), stock's and xnnfold's
interleaved, ``--runs`` times each, and appends the line again with a ``"relowered"``
entry: each partitioner's list of runs (`engine.lowering_cost.measured_lowering`: CPU
seconds, the resident set at its peak and the lowering's own peak over what the export
left, the load average; or an error), and the stack. Where a line has both partitioners'
figure, the report and its summary take each partitioner's median over its runs in
place of the figure the sweep recorded (`relowered_pair`).
"""

from __future__ import annotations

import statistics
from typing import Any

from benchmarks.sweeps.engine.lowering_cost import STOCK, XNNFOLD

# A result line's entry.
RELOWERED = "relowered"
# The figures that stand for the sweep's lowering time (``lower_cpu_s``) and memory
# (``lower_peak_rss_mib``: the peak during the lowering, what the process held
# included), and the lowering's own peak, which only a relowered line has.
CPU_SECONDS = "lower_cpu_s"
PEAK = "peak_mib"
OWN_PEAK = "lower_peak_mib"


def lowered_both_ways(result: dict[str, Any]) -> bool:
    """Whether both partitioners' programs were written (a lowering to measure again)."""
    variants = result.get("variants", {})
    return all("bytes" in variants.get(label, {}) for label in (XNNFOLD, STOCK))


def to_relower(results: dict[str, dict[str, Any]], *, again: bool = False) -> list[str]:
    """The classes lowered both ways, not relowered yet (all of them where ``again``)."""
    return sorted(
        name
        for name, result in results.items()
        if lowered_both_ways(result) and (again or RELOWERED not in result)
    )


def relowered_median(entry: dict[str, Any], label: str, key: str) -> float | None:
    """The median of ``key`` over ``label``'s runs in ``entry`` (a line's ``"relowered"``)
    that measured it without an error, or None where none did."""
    runs = entry.get(label, [])
    values = [run[key] for run in runs if "error" not in run and run.get(key) is not None]
    return statistics.median(values) if values else None


def relowered_pair(entry: dict[str, Any], key: str) -> tuple[float, float] | None:
    """xnnfold's and stock's medians of ``key`` in ``entry`` (a line's ``"relowered"``),
    where both are above zero (a ratio of them means something), else None."""
    ours, stock = (relowered_median(entry, label, key) for label in (XNNFOLD, STOCK))
    if ours is None or stock is None or ours <= 0 or stock <= 0:
        return None
    return float(ours), float(stock)


def changed_since_swept(result: dict[str, Any]) -> int | None:
    """How many bytes xnnfold's program, lowered again today, differs from the one the
    sweep wrote and timed (relowered minus swept), where the line is relowered, every
    stock program relowered is the size of the sweep's (the same model built) and
    xnnfold's is not: xnnfold changed since the sweep, so the sweep's latency, diff and
    bytes are an earlier xnnfold's. None where that is not shown (not relowered, no
    bytes, stock's size differs too, or xnnfold's is the same)."""
    entry = result.get(RELOWERED, {})
    variants = result.get("variants", {})
    swept = {label: variants.get(label, {}).get("bytes") for label in (XNNFOLD, STOCK)}
    today = {
        label: {run["bytes"] for run in entry.get(label, []) if "bytes" in run}
        for label in (XNNFOLD, STOCK)
    }
    if None in swept.values() or not all(today.values()):
        return None
    if today[STOCK] != {swept[STOCK]} or len(today[XNNFOLD]) != 1:
        return None
    (ours,) = today[XNNFOLD]
    return ours - swept[XNNFOLD] if ours != swept[XNNFOLD] else None
