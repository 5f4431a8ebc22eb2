"""Compacting a sweep's results file (`engine.results.compact`, the driver's
``--compact``): only the latest line of each class is read (`read_results`), so the file
keeps those, read as before, and compacting again changes nothing."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest

from benchmarks.sweeps.engine.results import compact, read_results

from tests.support.toy_sweep import RESULTS_ENV, Toy

# A file as sweeps leave it: a class swept again, a row retimed (its line appended again
# with a "retime" entry), the lines of different classes interleaved.
_LINES = [
    {"class": "A", "module": "m", "status": "candidate, not lowered yet"},
    {"class": "B", "module": "m", "status": "no computed GEMM argument"},
    {"class": "A", "module": "m", "status": "computed GEMM", "seconds": 1.5},
    {"class": "C", "module": "n", "status": "skipped", "reason": "ValueError: é"},
    {"class": "A", "module": "m", "status": "computed GEMM", "retime": {"ratio": 1.01}},
    {"class": "B", "module": "m", "status": "no computed GEMM argument", "seconds": 0.2},
]


@pytest.fixture
def results(tmp_path: Path) -> Path:
    path = tmp_path / "results.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in _LINES))
    path.chmod(0o664)
    return path


def test_a_compacted_file_reads_as_before(results: Path) -> None:
    """The same lines, in the same order: the report lists ties in it."""
    before = list(read_results(results).items())
    compact(results)
    assert list(read_results(results).items()) == before


def test_a_compacted_file_has_one_line_per_class(results: Path) -> None:
    compact(results)
    classes = [json.loads(line)["class"] for line in results.read_text().splitlines()]
    assert sorted(classes) == ["A", "B", "C"]


def test_compacting_again_changes_no_byte(results: Path) -> None:
    compact(results)
    once = results.read_bytes()
    compact(results)
    assert results.read_bytes() == once


def test_a_compacted_file_keeps_its_mode(results: Path) -> None:
    compact(results)
    assert stat.S_IMODE(results.stat().st_mode) == 0o664


def test_compact_on_the_command_line_compacts_the_librarys_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from benchmarks.sweeps.engine import main

    monkeypatch.setenv(RESULTS_ENV, str(tmp_path))
    library = Toy()
    library.results.write_text("".join(json.dumps(line) + "\n" for line in _LINES))
    assert main(library, argv=["--compact"]) == 0
    assert library.results.read_text().count("\n") == 3
