"""Report and check modes skip building the new bytes; their answers must not change.

The problem: a file with a rewrite cost about four times a file without one, mostly in
libcst's import visitors, though --report and --check never use the new bytes. The fix:
``transform_source(..., rewrite=False)`` stops once the findings are final and says
``pending`` instead, and the driver asks for that in those modes. These tests hold both
paths to the same findings and the same set of changed files over every rule fixture.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from xnnfold.rewriter import transform_source
from xnnfold.rewriter.codemod._driver import run_codemod

# The rule fixtures and their per-file options, as the rule tests read them.
from tests.rewriter.codemod.test_codemod_rules import _options, GOLDEN, INPUTS


def _id(path: Path) -> str:
    return f"{path.parent.name}/{path.name.removesuffix('.in.py')}"


def test_fixtures_include_rewrites_and_non_rewrites() -> None:
    pending = [
        transform_source(p.read_bytes(), options=_options(p.read_bytes())).pending for p in INPUTS
    ]
    assert any(pending) and not all(pending)


@pytest.mark.parametrize("path", INPUTS, ids=_id)
def test_report_only_matches_full_rewrite(path: Path) -> None:
    source = path.read_bytes()
    full = transform_source(source, options=_options(source))
    fast = transform_source(source, options=_options(source), rewrite=False)
    assert fast.findings == full.findings
    assert fast.new_code is None
    assert fast.pending == full.pending == (full.new_code is not None)


@pytest.mark.parametrize("mode", ["report", "check"])
def test_driver_modes_agree_with_diff(mode: str) -> None:
    # Default options over every fixture; diff mode builds the bytes, the others do not.
    diff = run_codemod([str(GOLDEN)], mode="diff", progress=False)
    fast = run_codemod([str(GOLDEN)], mode=mode, progress=False)
    assert diff.changed  # some fixture rewrites under default options
    assert fast.changed == diff.changed
    assert fast.findings == diff.findings
    assert [f.status for f in fast.files] == [f.status for f in diff.files]
