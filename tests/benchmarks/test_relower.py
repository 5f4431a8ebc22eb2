"""``--relower`` (benchmarks/sweeps/engine: `remeasure.relower`, `relower`): the rows
lowered both ways are lowered again, each lowering alone in a fresh worker, and the
report's lowering time and memory take the relowered medians in place of the sweep's
figures, saying how many rows are relowered. The last case lowers the toy library's
smallest model for real (two fresh workers)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from benchmarks.sweeps.engine import main
from benchmarks.sweeps.engine.relower import changed_since_swept, relowered_median, to_relower
from benchmarks.sweeps.engine.results import read_results
from benchmarks.sweeps.engine.summary import summary_lines

from tests.support.toy_sweep import GROUP, RESULTS_ENV, Toy


def _swept(name: str, ours: dict[str, Any], stock: dict[str, Any]) -> dict[str, Any]:
    """A result line lowered both ways, with these figures beside the bytes."""
    return {
        "class": name,
        "module": GROUP,
        "status": "no computed GEMM",
        "variants": {"xnnfold": {"bytes": 10, **ours}, "stock": {"bytes": 10, **stock}},
    }


def _summary(rows: list[dict[str, Any]], start: str) -> str:
    (line,) = [line for line in summary_lines(rows) if line.startswith(start)]
    return line


def test_relowered_cpu_seconds_replace_the_sweeps_in_the_lowering_time_line() -> None:
    swept = _swept("Swept", {"lower_cpu_s": 3.0}, {"lower_cpu_s": 2.0})
    relowered = {
        **_swept("Relowered", {"lower_cpu_s": 1.0}, {"lower_cpu_s": 1.0}),
        "relowered": {"xnnfold": [{"lower_cpu_s": 8.0}], "stock": [{"lower_cpu_s": 4.0}]},
    }
    assert _summary([swept, relowered], "- lowering time") == (
        "- lowering time xnnfold/stock (relowered 1 of 2): median 1.75, worst 2.00 "
        "(Relowered), over 2 rows; 0 without both CPU times (—)"
    )


def test_relowered_peaks_replace_the_sweeps_in_the_lowering_memory_line() -> None:
    swept = _swept("Swept", {"lower_peak_rss_mib": 900.0}, {"lower_peak_rss_mib": 1000.0})
    relowered = {
        **_swept("Relowered", {}, {}),
        "relowered": {"xnnfold": [{"peak_mib": 600.0}], "stock": [{"peak_mib": 500.0}]},
    }
    assert _summary([swept, relowered], "- lowering memory") == (
        "- lowering memory xnnfold/stock (relowered 1 of 2): median 1.05, worst 1.20 "
        "(Relowered), over 2 rows; 0 without both peaks (recorded before the peak was) (—)"
    )


def test_a_failed_relowered_run_is_left_out_of_the_median() -> None:
    entry = {"xnnfold": [{"lower_cpu_s": 2.0}, {"error": "timeout", "lower_cpu_s": 480.0}]}
    assert relowered_median(entry, "xnnfold", "lower_cpu_s") == 2.0


def test_only_rows_lowered_both_ways_and_not_relowered_are_relowered() -> None:
    both = _swept("Both", {}, {})
    results = {
        "Both": both,
        "Done": {**both, "class": "Done", "relowered": {}},
        "OursOnly": {**both, "class": "OursOnly", "variants": {"xnnfold": {"bytes": 10}}},
    }
    assert to_relower(results) == ["Both"]
    assert to_relower(results, again=True) == ["Both", "Done"]


def _relowered_bytes(ours: int, stock: int) -> dict[str, Any]:
    """A line swept at 10 bytes each way, relowered today at these sizes."""
    return {
        **_swept("Changed", {}, {}),
        "relowered": {"xnnfold": [{"bytes": ours}], "stock": [{"bytes": stock}]},
    }


def test_an_xnnfold_program_grown_since_the_sweep_is_told_by_its_bytes() -> None:
    assert changed_since_swept(_relowered_bytes(14, 10)) == 4


def test_a_model_built_differently_since_the_sweep_tells_nothing() -> None:
    assert changed_since_swept(_relowered_bytes(14, 12)) is None


def test_the_rows_timed_on_an_earlier_xnnfold_program_are_listed_under_latency() -> None:
    lines = summary_lines([_swept("Same", {}, {}), _relowered_bytes(14, 10)])
    assert lines[1].startswith("  - timed on an earlier xnnfold program")
    assert lines[1].endswith("1 rows: Changed (+4 B)")


@pytest.mark.runtime
def test_relower_appends_both_partitioners_cpu_seconds_and_peaks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(RESULTS_ENV, str(tmp_path))
    library = Toy()
    line = _swept("Plain", {"lower_cpu_s": 1.0}, {"lower_cpu_s": 1.0})
    library.results.write_text(json.dumps(line) + "\n")
    assert main(library, argv=["--relower", "--timeout", "120"]) == 0
    result = read_results(library.results)["Plain"]
    assert result["variants"] == line["variants"]
    for label in ("stock", "xnnfold"):
        (run,) = result["relowered"][label]
        assert "error" not in run, run
        assert run["lower_cpu_s"] > 0 and run["peak_mib"] > 0 and "lower_peak_mib" in run
        assert run["process_peak_mib"] >= run["peak_mib"] and len(run["loadavg"]) == 6
