"""Every reason carries a stable code (XNF5xx): in `explain`, in the WARNING, in the docs."""

from __future__ import annotations

import logging
import re
from pathlib import Path

import pytest
import torch
from torch import nn
from torch.nn.utils.parametrizations import weight_norm

import xnnfold
from xnnfold.passes._reason_codes import CODES

DOCS = Path(__file__).resolve().parents[2] / "docs" / "reasons.md"


def test_codes_are_well_formed_and_named_once() -> None:
    assert all(re.fullmatch(r"XNF5\d\d", code) and c.code == code for code, c in CODES.items())
    names = [c.name for c in CODES.values()]
    assert len(set(names)) == len(names)


def test_no_code_is_also_a_codemod_code() -> None:
    """A code names one thing: grepping a log for it must not also find codemod findings."""
    from xnnfold.rewriter.codemod._finding_codes import CODES as CODEMOD_CODES

    root = Path(__file__).resolve().parents[2]
    codemod = set(CODEMOD_CODES)
    codemod |= set(re.findall(r"XNF\d{3}", (root / "docs/codemod.md").read_text()))
    assert codemod and not codemod & set(CODES)


def test_both_families_are_the_one_registry() -> None:
    """The reason codes and the codemod's codes are the registry's own objects, and
    together every code it holds."""
    from xnnfold import _code_registry as registry
    from xnnfold.rewriter.codemod._finding_codes import CODES as CODEMOD_CODES

    families = {**CODES, **CODEMOD_CODES}
    assert families.keys() == registry.CODES.keys()
    assert all(registry.CODES[code] is c for code, c in families.items())


def test_the_registry_refuses_a_code_or_a_name_used_before() -> None:
    from xnnfold._code_registry import register

    with pytest.raises(ValueError, match="XNF501"):
        register("XNF501", "renumbered", "a code registered twice")
    with pytest.raises(ValueError, match="run-time"):
        register("XNF599", "run-time", "a name registered twice")


def test_a_problem_keeps_its_code_through_copy_and_pickle() -> None:
    import copy
    import pickle

    from xnnfold.passes._reason_codes import Problem, RUN_TIME

    problem = Problem(RUN_TIME, "the weight is computed at run time")
    for clone in (copy.deepcopy(problem), pickle.loads(pickle.dumps(problem))):
        assert clone == problem and clone.code is RUN_TIME


def test_every_code_is_documented() -> None:
    text = DOCS.read_text()
    missing = [code for code, c in CODES.items() if f"| {code} | `{c.name}` |" not in text]
    assert missing == []


class _SharedSource(nn.Module):
    """The weight_norm direction is also read outside the weight computation (XNF504)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = weight_norm(nn.Conv1d(4, 4, 3, padding=1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x) + self.conv.parametrizations.weight.original1.sum()


class _CodebookDistance(nn.Module):
    """A codebook's distance to each input, as Xcodec's quantizer computes it, and a lookup
    in the codebook: the lookup keeps the transposed table from folding (XNF504), the sum
    beside the mm computes it in another delegate, which passes it to the mm's."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("codebook", torch.randn(16, 8))

    def forward(self, x: torch.Tensor, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        table = self.codebook.t()
        distance = x.pow(2).sum(1, keepdim=True) - 2 * x @ table + table.pow(2).sum(0)
        return distance, nn.functional.embedding(ids, self.codebook)


class _Modulated(nn.Module):
    """A weight scaled per call by an input: computed, not from constants (XNF501)."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(8, 8))

    def forward(self, x: torch.Tensor, style: torch.Tensor) -> torch.Tensor:
        return nn.functional.linear(x, self.weight * style)


@pytest.mark.runtime
def test_a_declined_fold_carries_its_code_in_explain_and_the_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    torch.manual_seed(0)
    with caplog.at_level(logging.WARNING, logger="xnnfold"):
        edge = xnnfold.lower(_SharedSource().eval(), (torch.randn(1, 4, 9),))
    (row,) = xnnfold.explain(edge).outside
    assert row.code == "XNF504" and "also used by" in (row.reason or "")
    assert "XNF504: " in xnnfold.explain(edge).table()
    warnings = [r.getMessage() for r in caplog.records if r.name.startswith("xnnfold")]
    assert any(m.endswith("[XNF504]") for m in warnings), warnings


@pytest.mark.runtime
def test_a_weight_another_delegate_computes_is_explained_as_computed() -> None:
    torch.manual_seed(0)
    edge = xnnfold.lower(_CodebookDistance().eval(), (torch.randn(4, 8), torch.tensor([1, 2])))
    (row,) = xnnfold.explain(edge).rows
    assert row.delegated and row.code == "XNF504"
    assert row.computed and not row.folded


@pytest.mark.runtime
def test_a_weight_computed_at_run_time_carries_xnf201() -> None:
    torch.manual_seed(0)
    edge = xnnfold.lower(_Modulated().eval(), (torch.randn(2, 8), torch.randn(8, 8)))
    (row,) = xnnfold.explain(edge).rows
    assert row.code == "XNF501" and "run time" in (row.reason or "")


@pytest.mark.runtime
def test_a_stock_reason_is_passed_on_as_xnf290() -> None:
    model = nn.Linear(4, 4).double().eval()
    edge = xnnfold.lower(model, (torch.randn(2, 4, dtype=torch.float64),))
    (row,) = xnnfold.explain(edge).outside
    assert row.code == "XNF590" and "dtype" in (row.reason or "")
