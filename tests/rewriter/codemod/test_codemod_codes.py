"""The codemod's finding codes are registered, emitted and documented, one code each.

A user greps a report for a code and looks it up in docs/codemod.md, so the three must
agree: every code the rules emit is one of ``xnnfold/rewriter/codemod/_finding_codes.py``'s
constants (no string literal elsewhere), every registered code is emitted by some rule
fixture (``tests/rewriter/codemod/golden``), and every registered code has a row in the doc's
table. Runs without torch (the codemod-only install).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from xnnfold._code_registry import ReasonCode
from xnnfold.rewriter import transform_source
from xnnfold.rewriter.codemod import _finding_codes
from xnnfold.rewriter.codemod._finding_codes import CODES

# The rule fixtures and their per-file options, as the rule tests read them.
from tests.rewriter.codemod.test_codemod_rules import _options, INPUTS

ROOT = Path(__file__).resolve().parents[3]
CODEMOD_PACKAGE = ROOT / "xnnfold" / "rewriter" / "codemod"
_CODE_RE = re.compile(r"XNF\d{3}")


def _emitted_by_the_fixtures() -> set[str]:
    codes: set[str] = set()
    for path in INPUTS:
        source = path.read_bytes()
        codes |= {f.code for f in transform_source(source, options=_options(source)).findings}
    return codes


def test_codes_are_well_formed_and_named_once() -> None:
    assert CODES
    assert all(re.fullmatch(r"XNF[1-4]\d\d", code) and c.code == code for code, c in CODES.items())
    names = [c.name for c in CODES.values()]
    assert len(set(names)) == len(names)


def test_every_registered_code_is_emitted_by_a_fixture() -> None:
    assert set(CODES) - _emitted_by_the_fixtures() == set()


def test_every_emitted_code_is_registered() -> None:
    assert _emitted_by_the_fixtures() - set(CODES) == set()


def test_no_module_but_the_registry_spells_a_code() -> None:
    """A code written as a string literal elsewhere would bypass the registry."""
    offenders = [
        f"{path.name}:{node.lineno} {node.value!r}"
        for path in sorted(CODEMOD_PACKAGE.glob("*.py"))
        if path.name != "_finding_codes.py"
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and _CODE_RE.fullmatch(node.value)
    ]
    assert offenders == []


def test_every_registered_code_is_documented() -> None:
    documented = set(
        re.findall(r"^\| (XNF\d{3}) \|", (ROOT / "docs" / "codemod.md").read_text(), re.M)
    )
    assert documented == set(CODES)


def test_each_code_is_a_module_constant() -> None:
    constants = {
        value.code for value in vars(_finding_codes).values() if isinstance(value, ReasonCode)
    }
    assert constants == set(CODES)
