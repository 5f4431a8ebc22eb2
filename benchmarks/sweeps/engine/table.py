"""The table of a sweep report: one row per class, stock's and xnnfold's cells side by
side (`row`), under `table_head`. The library's extra path (transformers' exporter)
writes its table with these too."""

from __future__ import annotations

from typing import Any

from benchmarks.sweeps.engine.lowering import NOT_LOADED_AGAIN, STOCK, XNNFOLD
from benchmarks.sweeps.engine.relower import CPU_SECONDS, OWN_PEAK, PEAK, relowered_pair
from benchmarks.sweeps.engine.summary import NONE, sweep_lowering_ratio


def _cell(entry: dict[str, Any], key: str, fmt: str) -> str:
    if "error" in entry and key not in entry:
        return "timeout" if entry.get("timeout") else "error"
    value = entry.get(key)
    if value is None:
        return "-"
    if isinstance(value, list):
        return str(len(value))
    return format(value, fmt)


def _ms_cell(entry: dict[str, Any]) -> str:
    # "(alone)": the two did not fit in a worker's memory together; "untimed": it did not
    # load or run a second time for the timing.
    timed = entry.get("timed", "")
    if timed.startswith(NOT_LOADED_AGAIN):
        return "untimed"
    return _cell(entry, "ms", ".2f") + (" (alone)" if timed == "alone" else "")


def error_cell(entry: dict[str, Any]) -> str:
    error = entry.get("error")
    return "" if not error else error.replace("|", "/").replace("\n", " ")[:90]


def table_head(noun: str) -> list[str]:
    """The head and rule of a table of `row`s."""
    return [_HEAD.format(noun=noun), _RULE]


_HEAD = (
    "| {noun} | GEMMs | outside stock / xnnfold | diff stock / xnnfold | bytes stock / "
    "xnnfold | ms stock / xnnfold | retimed xnnfold/stock | lowering s stock / xnnfold "
    "(ratio) | lowering peak RSS MiB stock / xnnfold | problems |"
)
_RULE = "|---|---|---|---|---|---|---|---|---|---|"


def _retime_cell(retime: dict[str, Any] | None) -> str:
    if not retime:
        return NONE
    if retime.get("identical"):
        return "identical"
    if "ratio" in retime:
        load = retime.get("loadavg", [None])[0]
        return f"{retime['ratio']:.2f}x" + (f" (load {load:.1f})" if load is not None else "")
    return "error"


def _rss_cell(entry: dict[str, Any]) -> str:
    value = entry.get("lower_peak_rss_mib")
    return NONE if value is None else f"{value:,.0f}"


def _lowering_cells(path: dict[str, Any], relowered: dict[str, Any] | None) -> str:
    """The lowering time and peak RSS cells: ``relowered``'s medians (a line's
    ``"relowered"``, with the lowering's own peak) where it has both partitioners', else
    the sweep's figures in ``path``."""
    stock, ours = path.get(STOCK, {}), path.get(XNNFOLD, {})
    seconds = relowered_pair(relowered or {}, CPU_SECONDS)
    if seconds is None:
        ratio = sweep_lowering_ratio(path)
        time_cell = (
            f"{_cell(stock, 'lower_cpu_s', '.1f')} / {_cell(ours, 'lower_cpu_s', '.1f')}"
            f"{f' ({ratio:.2f}x)' if ratio is not None else ''}"
        )
    else:
        time_cell = (
            f"{seconds[1]:.1f} / {seconds[0]:.1f} ({seconds[0] / seconds[1]:.2f}x, relowered)"
        )
    peak = relowered_pair(relowered or {}, PEAK)
    if peak is None:
        return f"{time_cell} | {_rss_cell(stock)} / {_rss_cell(ours)}"
    own = relowered_pair(relowered or {}, OWN_PEAK)
    added = f"; own +{own[1]:,.0f} / +{own[0]:,.0f}" if own is not None else ""
    return f"{time_cell} | {peak[1]:,.0f} / {peak[0]:,.0f} (relowered{added})"


def row(
    name: str,
    path: dict[str, Any],
    flagged: list[str],
    *,
    retime: dict[str, Any] | None = None,
    relowered: dict[str, Any] | None = None,
) -> str:
    """One table row: stock's and xnnfold's cells side by side, the retimed ratio, and the
    lowering's figures (``relowered``'s where the line has them)."""
    stock, ours = path.get(STOCK, {}), path.get(XNNFOLD, {})
    if "error" in stock and "error" in ours and not flagged and not ours.get("timeout"):
        return f"| {name} | both stop (below) | - | - | - | - | - | - | - | none |"
    scale = ours.get("scale", stock.get("scale"))
    return (
        f"| {name} | {_cell(ours, 'computed', 'd')} / {_cell(ours, 'folded', 'd')} "
        f"| {_cell(stock, 'outside', '')} / {_cell(ours, 'outside', '')} "
        f"| {_cell(stock, 'diff', '.1e')} / {_cell(ours, 'diff', '.1e')}"
        f"{f' ({scale:.1e})' if scale is not None else ''} "
        f"| {_cell(stock, 'bytes', ',d')} / {_cell(ours, 'bytes', ',d')} "
        f"| {_ms_cell(stock)} / {_ms_cell(ours)} "
        f"| {_retime_cell(retime)} "
        f"| {_lowering_cells(path, relowered)} "
        f"| {', '.join(flagged) or 'none'} |"
    )
