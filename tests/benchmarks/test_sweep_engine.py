"""The sweep engine (benchmarks/sweeps/engine) end to end on a toy library
(`tests.support.toy_sweep`): worker processes screen and lower each class both ways, the
results resume from their JSONL, the report prints its summary lines; in the full tier,
`--retime` times the two programs in a fresh process (two more processes, a second
lowering)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from benchmarks.sweeps.engine.driver import run
from benchmarks.sweeps.engine.remeasure import retime
from benchmarks.sweeps.engine.report import report
from benchmarks.sweeps.engine.results import COMPUTED, NO_CANDIDATE, read_results, SKIPPED
from benchmarks.sweeps.engine.retime import (
    CALLS,
    calls_for,
    MAX_CALLS,
    timing_timeout,
    TIMING_TIMEOUT_S,
    WARM_UP,
)
from benchmarks.sweeps.engine.summary import attribution, summary_lines
from benchmarks.sweeps.engine.worker import SCREEN, sweep_class

from tests.support.toy_sweep import GROUP, RESULTS_ENV, SIDE, Toy

pytestmark = pytest.mark.runtime


@pytest.fixture(scope="module")
def swept(tmp_path_factory: pytest.TempPathFactory) -> tuple[Toy, dict[str, dict[str, Any]]]:
    folder = tmp_path_factory.mktemp("toy-sweep")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(RESULTS_ENV, str(folder))
        library = Toy()
        run(
            library,
            library.discover(),
            timeout=120,
            lowering_timeout=240,
            jobs=1,
            compare_all=True,
            screen_only=False,
        )
    return library, read_results(library.results)


def test_each_class_gets_its_status(swept: tuple[Toy, dict[str, dict[str, Any]]]) -> None:
    _, results = swept
    assert {name: r["status"] for name, r in results.items()} == {
        "Plain": NO_CANDIDATE,
        "WeightNormed": COMPUTED,
        "Unbuildable": SKIPPED,
    }


def test_the_weight_normed_class_is_folded_and_matches_eager(
    swept: tuple[Toy, dict[str, dict[str, Any]]],
) -> None:
    _, results = swept
    ours, stock = (results["WeightNormed"]["variants"][k] for k in ("xnnfold", "stock"))
    assert ours["folded"] == 1 and stock["outside"]
    assert "error" not in ours and "error" not in stock, (ours.get("error"), stock.get("error"))
    assert ours["diff"] < 1e-4 and stock["diff"] < 1e-4


def test_each_lowering_records_its_peak_rss_and_file_hashes(
    swept: tuple[Toy, dict[str, dict[str, Any]]],
) -> None:
    _, results = swept
    for entry in results["WeightNormed"]["variants"].values():
        assert entry["lower_peak_rss_mib"] > 0
        assert [len(digest) for digest in entry["sha256"]] == [64]


def test_a_rerun_resumes_from_the_jsonl(swept: tuple[Toy, dict[str, dict[str, Any]]]) -> None:
    library, _ = swept
    lines = library.results.read_text().count("\n")
    run(
        library,
        library.discover(),
        timeout=60,
        lowering_timeout=60,
        jobs=1,
        compare_all=True,
        screen_only=False,
    )
    assert library.results.read_text().count("\n") == lines


def test_the_report_prints_the_four_summary_lines(
    swept: tuple[Toy, dict[str, dict[str, Any]]],
) -> None:
    library, results = swept
    text = report(library, results, library.discover())
    for start in (
        "- latency xnnfold/stock (retimed): ",
        "- lowering time xnnfold/stock: median ",
        "- lowering memory xnnfold/stock: median ",
        "- larger than stock: ",
    ):
        assert any(line.startswith(start) for line in text.splitlines()), start


@pytest.mark.slow
def test_retime_times_the_two_programs_in_a_fresh_process(
    swept: tuple[Toy, dict[str, dict[str, Any]]],
) -> None:
    library, _ = swept
    retime(library, ["WeightNormed"], timeout=120, lowering_timeout=240, memory=8 * 2**30)
    found = read_results(library.results)["WeightNormed"]["retime"]
    assert "error" not in found, found
    assert found["calls"] >= 31 and len(found["loadavg"]) == 6
    assert found["ratio"] == pytest.approx(found["ms"]["xnnfold"] / found["ms"]["stock"], rel=1e-3)
    assert json.dumps(found)


def test_a_worker_builds_the_model_a_line_records() -> None:
    """A retime hands the worker the line's build facts (`Library.build_facts`), so it
    lowers the model the sweep lowered, whatever the library would try first today."""
    request = {"module": GROUP, "class": "WeightNormed", "mode": SCREEN}
    assert sweep_class(Toy(), request)["inputs"] == {"x": [1, 3, 8, 8]}
    recorded = sweep_class(Toy(), {**request, "facts": {SIDE: 6}})
    assert recorded["inputs"] == {"x": [1, 3, 6, 6]} and recorded[SIDE] == 6


def test_a_row_slower_for_exact_tanh_gelus_says_so() -> None:
    """A retimed row over 1.03x names what its program computes that stock's does not."""
    entry = {"bytes": 10, "ms": 1.0}
    row = {"class": "Gelus", "variants": {"xnnfold": entry, "stock": entry}}
    slow = {**row, "retime": {"ratio": 1.2, "exact_gelus": 3}}
    unexplained = {**row, "class": "Other", "retime": {"ratio": 1.1}}
    (line,) = [x for x in summary_lines([slow, unexplained]) if "slower than" in x]
    assert line.endswith("Gelus (1.20x; 3 tanh GELUs computed exactly, as eager), Other (1.10x)")


def test_a_fast_program_is_retimed_over_more_calls() -> None:
    """Noise must not decide a retime: a 7 ms pair of calls gets hundreds, an odd count;
    a slow one at least 31, and never more than the cap."""
    assert calls_for(0.014) == 215
    assert calls_for(2.0) == CALLS == 31
    assert calls_for(1e-6) == MAX_CALLS


def test_a_larger_program_with_exact_tanh_gelus_is_attributed_to_them() -> None:
    ours = {"bytes": 1_300, "exact_gelus": 2, "tied": 0}
    row = {"class": "Gelus", "variants": {"xnnfold": ours, "stock": {"bytes": 1_000}}}
    assert attribution(row) == "+300 B: 2 tanh GELU(s) computed exactly"
    assert (
        attribution({**row, "variants": {**row["variants"], "xnnfold": {**ours, "exact_gelus": 0}}})
        is None
    )


def test_a_slow_program_gets_the_time_its_calls_take() -> None:
    """The timing process's limit covers its rounds at the first call's pace: two 10 s
    programs (maxvit_large_tf_512's) timed over 34 rounds need 680 s, over the base
    limit once loaded; a fast pair's many calls add seconds, not minutes."""
    slow = timing_timeout([10_000.0, 10_000.0])
    assert slow >= TIMING_TIMEOUT_S + 2 * (WARM_UP + CALLS) * 20.0
    assert timing_timeout([5.0, 5.0]) < TIMING_TIMEOUT_S + 15.0


def test_the_memory_bound_is_read_over_the_models_above_100m_parameters() -> None:
    """The lowering-memory bound holds over the models above 100M parameters (stock's
    program over 400 MB): a small model's worse peak is in the line over every row, not
    in the one over the large models."""

    def row(name: str, stock_bytes: int, ours_peak: float) -> dict[str, Any]:
        return {
            "class": name,
            "variants": {
                "xnnfold": {"bytes": stock_bytes, "lower_peak_rss_mib": ours_peak},
                "stock": {"bytes": stock_bytes, "lower_peak_rss_mib": 100.0},
            },
        }

    rows = [row("Small", 32_000_000, 120.0), row("Large", 800_000_000, 102.0)]
    (line,) = [x for x in summary_lines(rows) if "above 100M parameters" in x]
    assert line.startswith("  - over the models above 100M parameters")
    assert "worst 1.02 (Large), over 1 rows" in line
