"""`xnnfold.explain` and the partitioner's warnings: reasons a user can see."""

from __future__ import annotations

import functools
import logging
import threading

import pytest
import torch
import torch.nn.functional as F
from executorch.exir.backend.utils import WhyNoPartition
from torch import nn
from torch.nn.utils.parametrizations import weight_norm

import xnnfold
from xnnfold.passes._ops import STOCK_WHY_LOGGERS
from xnnfold.passes.report._reasons import collect_why_reasons

from tests._lowering import lower_stock

# The full tier: the fast tier covers each rule in tests/passes/analysis and end to end once.
pytestmark = [pytest.mark.runtime, pytest.mark.slow]

PARTITIONER_LOGGER = "xnnfold.passes.partition._partitioner"


class Modulated(nn.Module):
    """A kernel scaled per call by an input: computed, but not from constants, and a
    convolution has no run-time-weight form (a linear would be delegated)."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(8, 8, 1))

    def forward(self, x: torch.Tensor, style: torch.Tensor) -> torch.Tensor:
        return F.conv1d(x, self.weight * style)


class Mixed(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = weight_norm(nn.Conv1d(8, 8, 3, padding=1))
        self.proj = nn.Linear(8, 8)
        self.mod = Modulated()

    def forward(self, x: torch.Tensor, style: torch.Tensor) -> torch.Tensor:
        y = self.proj(self.conv(x).transpose(1, 2))
        z = self.mod(y.transpose(1, 2), style)
        return torch.bmm(z, z.transpose(1, 2))


def _mixed() -> nn.Module:
    torch.manual_seed(0)
    return Mixed().eval()


INPUTS = (torch.randn(1, 8, 16), torch.randn(8, 1, 1))


@functools.cache
def _lowered() -> xnnfold.ExplainReport:
    return xnnfold.explain(xnnfold.lower(_mixed(), INPUTS))


def _row(report: xnnfold.ExplainReport, module: str, op: str) -> xnnfold.GemmRow:
    (row,) = [r for r in report.rows if r.module == module and r.op == op]
    return row


def test_lists_every_gemm_of_the_program() -> None:
    assert sorted((r.module, r.op) for r in _lowered().rows) == [
        ("<root>", "bmm"),
        ("conv", "convolution"),
        ("mod", "convolution"),
        ("proj", "linear"),
    ]


def test_folded_gemm_is_delegated_with_its_site() -> None:
    row = _row(_lowered(), "conv", "convolution")
    assert row.delegated and row.folded == ("weight",)
    assert row.site == "conv.weight"
    assert row.backend == "XnnpackBackend"


def test_static_gemm_is_delegated_and_not_folded() -> None:
    row = _row(_lowered(), "proj", "linear")
    assert row.delegated and not row.folded and not row.computed


def test_gemm_left_outside_carries_the_partitioners_reason() -> None:
    row = _row(_lowered(), "mod", "convolution")
    assert not row.delegated and row.computed
    assert row.reason is not None and "style" in row.reason
    assert _lowered().outside == (row,)


def test_table_names_each_gemm_and_sums_up() -> None:
    text = str(_lowered())
    assert text.splitlines()[0].split()[:4] == ["method", "gemm", "op", "module"]
    assert "portable" in text and "XnnpackBackend" in text
    assert text.splitlines()[-1] == ("4 GEMMs: 3 delegated (1 with folded weights), 1 on portable")


def test_reads_the_program_after_to_executorch() -> None:
    edge = xnnfold.lower(_mixed(), INPUTS)
    before = xnnfold.explain(edge)
    after = xnnfold.explain(edge.to_executorch())
    assert [(r.module, r.op, r.reason) for r in after.outside] == [
        (r.module, r.op, r.reason) for r in before.outside
    ]


def test_warning_names_module_path_and_cause(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger=PARTITIONER_LOGGER):
        xnnfold.lower(_mixed(), INPUTS)
    messages = [r.getMessage() for r in caplog.records if r.name == PARTITIONER_LOGGER]
    assert len(messages) == 1
    assert "module 'mod'" in messages[0] and "'style' is a runtime input" in messages[0]


def test_no_warning_for_activation_by_activation_products(
    caplog: pytest.LogCaptureFixture,
) -> None:
    class Attention(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.qk = nn.Linear(8, 16)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            q, k = self.qk(x).chunk(2, dim=-1)
            return q @ k.transpose(-1, -2)

    with caplog.at_level(logging.WARNING, logger=PARTITIONER_LOGGER):
        xnnfold.lower(Attention().eval(), (torch.randn(4, 8),))
    assert not [r for r in caplog.records if r.name == PARTITIONER_LOGGER]


def test_stock_partitioner_program_has_no_recorded_reason() -> None:
    lowered = lower_stock(Modulated().eval(), (torch.randn(2, 8, 5), torch.randn(8, 1, 1)))
    (row,) = xnnfold.explain(lowered.edge).outside
    assert row.reason == "no reason recorded: lowered without XnnpackFoldingPartitioner"


def test_stock_config_reason_is_collected_for_a_gemm_it_rejects() -> None:
    # A float64 GEMM is declined by the stock dtype check, not by xnnfold.
    model = nn.Linear(4, 4).double().eval()
    report = xnnfold.explain(xnnfold.lower(model, (torch.randn(2, 4, dtype=torch.float64),)))
    (row,) = report.outside
    assert row.reason and "dtype" in row.reason


def test_collecting_reasons_restores_logger_state_and_prints_nothing(
    capsys: pytest.CaptureFixture[str],
) -> None:
    before = [
        (logging.getLogger(n).level, logging.getLogger(n).propagate) for n in STOCK_WHY_LOGGERS
    ]
    with collect_why_reasons() as reasons:
        logging.getLogger(STOCK_WHY_LOGGERS[0]).debug("not a WhyNoPartition")
    after = [
        (logging.getLogger(n).level, logging.getLogger(n).propagate) for n in STOCK_WHY_LOGGERS
    ]
    assert before == after and reasons == {}
    assert capsys.readouterr().err == ""


def test_rejects_what_it_cannot_read() -> None:
    with pytest.raises(TypeError, match="to_edge_transform_and_lower"):
        xnnfold.explain(nn.Linear(2, 2))  # type: ignore[arg-type]


def _logger_state() -> list[tuple[int, bool]]:
    return [(logging.getLogger(n).level, logging.getLogger(n).propagate) for n in STOCK_WHY_LOGGERS]


@pytest.mark.parametrize("first_out", [0, 1])
def test_concurrent_collections_restore_the_loggers_in_any_order(first_out: int) -> None:
    """Two lowerings in two threads, ending in either order, leave the loggers as found,
    and each keeps only the reasons its own thread logged."""
    before = _logger_state()
    started = [threading.Event(), threading.Event()]
    release = [threading.Event(), threading.Event()]
    seen: list[dict[str, str]] = [{}, {}]

    def lowering(index: int) -> None:
        node = torch.fx.Graph().placeholder(f"gemm_{index}")
        with collect_why_reasons() as reasons:
            WhyNoPartition(logging.getLogger(STOCK_WHY_LOGGERS[0]))(node, f"reason {index}")
            started[index].set()
            release[index].wait(10)
        seen[index] = dict(reasons)

    threads = [threading.Thread(target=lowering, args=(i,)) for i in (0, 1)]
    for thread in threads:
        thread.start()
    for event in started:
        assert event.wait(10)
    first, second = first_out, 1 - first_out
    release[first].set()
    threads[first].join(10)
    # The other lowering still collects: its loggers must still reach DEBUG.
    assert all(logging.getLogger(n).isEnabledFor(logging.DEBUG) for n in STOCK_WHY_LOGGERS)
    release[second].set()
    threads[second].join(10)
    assert _logger_state() == before
    assert seen == [{"gemm_0": "reason 0"}, {"gemm_1": "reason 1"}]


def test_collection_without_thread_ids_still_collects(monkeypatch: pytest.MonkeyPatch) -> None:
    """Under `logging.logThreads = False` records carry no thread: none may be dropped."""
    monkeypatch.setattr(logging, "logThreads", False)
    node = torch.fx.Graph().placeholder("gemm")
    with collect_why_reasons() as reasons:
        WhyNoPartition(logging.getLogger(STOCK_WHY_LOGGERS[0]))(node, "a reason")
    assert reasons == {"gemm": "a reason"}


def test_collection_keeps_only_the_nodes_of_the_program_it_partitions() -> None:
    ours = torch.fx.GraphModule(torch.nn.Module(), torch.fx.Graph())
    mine = ours.graph.placeholder("gemm")
    elsewhere = torch.fx.Graph().placeholder("gemm")
    why = WhyNoPartition(logging.getLogger(STOCK_WHY_LOGGERS[0]))
    with collect_why_reasons(ours) as reasons:
        why(elsewhere, "another lowering's reason")
        why(mine, "this lowering's reason")
    assert reasons == {"gemm": "this lowering's reason"}


def test_a_warning_from_another_thread_is_handled_while_reasons_are_collected(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Collection enables DEBUG on the stock loggers; it must not hide what they log at the
    levels the user sees, from this lowering's thread or any other."""
    stock = logging.getLogger(STOCK_WHY_LOGGERS[0])
    with caplog.at_level(logging.WARNING), collect_why_reasons():
        other = threading.Thread(target=lambda: stock.warning("from another thread"))
        other.start()
        other.join(10)
        stock.warning("from this thread")
        stock.debug("a DEBUG record the user did not ask for")
    assert [r.getMessage() for r in caplog.records if r.name == stock.name] == [
        "from another thread",
        "from this thread",
    ]
