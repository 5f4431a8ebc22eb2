"""A tied table (an embedding a delegated linear also takes as its weight) stored once.

Each case lowers with the stock partitioner and with xnnfold, writes every file the
program needs (`xnnfold.save`), runs it through executorch.runtime against eager, and
checks that xnnfold's files take at most the stock program's bytes minus 90% of the table.
"""

from __future__ import annotations

import gc
import tempfile
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
from executorch.exir import ExecutorchBackendConfig, to_edge_transform_and_lower
from torch import nn

import xnnfold

from tests.support.tied_lm import Embed, Logits

pytestmark = pytest.mark.runtime

VOCAB, DIM = 1024, 64
TABLE_BYTES = VOCAB * DIM * 4
PTD = "_default_external_constant.ptd"


class TiedHead(nn.Module):
    """``emb(ids)`` beside ``F.linear(x, emb.weight)`` in one method."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(VOCAB, DIM)

    def forward(self, ids: torch.Tensor, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.emb(ids), F.linear(x, self.emb.weight)


class TiedLM(nn.Module):
    """Embed, one linear, the tied head: the shape of a language model's ends."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(VOCAB, DIM)
        self.mix = nn.Linear(DIM, DIM)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return F.linear(torch.tanh(self.mix(self.emb(ids))), self.emb.weight)


def _inputs(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, VOCAB, (8,), generator=g), torch.randn(4, DIM, generator=g)


def _model(cls: type[nn.Module] = TiedHead) -> nn.Module:
    torch.manual_seed(0)
    return cls().eval()


def _written(paths: tuple[Path, ...]) -> int:
    return sum(p.stat().st_size for p in paths)


def _stock_bytes(
    programs: Any, directory: Path, config: ExecutorchBackendConfig | None = None
) -> int:
    """Bytes of every file the stock partitioner's program needs."""
    et = to_edge_transform_and_lower(programs, partitioner=[XnnpackPartitioner()]).to_executorch(
        config
    )
    directory.mkdir()
    return _written(xnnfold.save(et, directory / "stock.pte"))


def _run(paths: tuple[Path, ...], inputs: Any, method: str = "forward") -> list[Any]:
    data = [p for p in paths if p.suffix == ".ptd"]
    assert len(data) <= 1
    return xnnfold.run_pte(
        paths[0].read_bytes(), list(inputs), method, data_path=data[0] if data else None
    )


def _assert_close(outputs: list[Any], expected: Any) -> None:
    expected = expected if isinstance(expected, tuple) else (expected,)
    assert len(outputs) == len(expected)
    for out, ref in zip(outputs, expected):
        torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)


def test_one_method_stores_the_table_once(tmp_path: Path) -> None:
    model, inputs = _model(), _inputs()
    stock = _stock_bytes(torch.export.export(model, inputs), tmp_path / "stock")
    et = xnnfold.to_executorch(model, inputs)
    paths = xnnfold.save(et, tmp_path / "tied.pte")
    assert [p.name for p in paths] == ["tied.pte", PTD]
    assert _written(paths) <= stock - 0.9 * TABLE_BYTES
    _assert_close(_run(paths, inputs), model(*inputs))


def test_explain_names_the_shared_table_and_the_bytes_saved() -> None:
    model, inputs = _model(), _inputs()
    report = xnnfold.explain(xnnfold.lower(model, inputs))
    assert [(t.method, t.fqn, t.nbytes) for t in report.shared] == [
        ("forward", "emb.weight", TABLE_BYTES)
    ]
    assert report.bytes_saved == TABLE_BYTES
    assert f"tied table emb.weight (forward): stored once in {PTD}" in str(report)


def test_turned_off_the_program_is_the_stock_one() -> None:
    model, inputs = _model(), _inputs()
    ep = torch.export.export(model, inputs)
    stock = to_edge_transform_and_lower(ep, partitioner=[XnnpackPartitioner()]).to_executorch()
    off = xnnfold.to_executorch(
        model, inputs, partitioner=xnnfold.XnnpackFoldingPartitioner(tie_tables=False)
    )
    assert xnnfold.data_files(off) == ()
    assert off.buffer == stock.buffer
    assert xnnfold.explain(off).shared == ()


@pytest.mark.slow
def test_with_every_constant_external_the_table_is_stored_once(tmp_path: Path) -> None:
    model, inputs = _model(), _inputs()
    config = ExecutorchBackendConfig(external_constants=True)
    stock = _stock_bytes(torch.export.export(model, inputs), tmp_path / "stock", config)
    et = xnnfold.lower(model, inputs).to_executorch(config)
    paths = xnnfold.save(et, tmp_path / "tied.pte")
    assert _written(paths) <= stock - 0.9 * TABLE_BYTES
    _assert_close(_run(paths, inputs), model(*inputs))


def test_two_methods_share_the_table(tmp_path: Path) -> None:
    torch.manual_seed(0)
    emb = nn.Embedding(VOCAB, DIM)
    ids, x = _inputs()

    def programs() -> dict[str, Any]:
        return {
            "embed": torch.export.export(Embed(emb).eval(), (ids,)),
            "logits": torch.export.export(Logits(emb).eval(), (x,)),
        }

    stock = _stock_bytes(programs(), tmp_path / "stock")
    exported = programs()
    assert xnnfold.tie_tables(exported) == {
        "embed": ("p_emb_weight",),
        "logits": ("p_emb_weight",),
    }
    edge = to_edge_transform_and_lower(exported, partitioner=[xnnfold.XnnpackFoldingPartitioner()])
    assert {(t.method, t.fqn) for t in xnnfold.explain(edge).shared} == {("embed", "emb.weight")}
    paths = xnnfold.save(edge.to_executorch(), tmp_path / "two.pte")
    assert _written(paths) <= stock - 0.9 * TABLE_BYTES
    _assert_close(_run(paths, (ids,), "embed"), emb(ids))
    _assert_close(_run(paths, (x,), "logits"), F.linear(x, emb.weight))


def test_tie_tables_leaves_methods_without_a_shared_table_alone() -> None:
    torch.manual_seed(0)
    ids, x = _inputs()
    exported = {
        "embed": torch.export.export(Embed(nn.Embedding(VOCAB, DIM)).eval(), (ids,)),
        "logits": torch.export.export(Logits(nn.Embedding(VOCAB, DIM)).eval(), (x,)),
    }
    assert xnnfold.tie_tables(exported) == {}


@pytest.mark.slow
def test_dynamic_sequence_length(tmp_path: Path) -> None:
    model = _model(TiedLM)
    ids = torch.randint(0, VOCAB, (12,), generator=torch.Generator().manual_seed(3))
    dynamic = ({0: torch.export.Dim("seq", min=2, max=64)},)
    stock = _stock_bytes(
        torch.export.export(model, (ids,), dynamic_shapes=dynamic), tmp_path / "stock"
    )
    et = xnnfold.to_executorch(model, (ids,), dynamic_shapes=dynamic)
    paths = xnnfold.save(et, tmp_path / "lm.pte")
    assert _written(paths) <= stock - 0.9 * TABLE_BYTES
    for length in (3, 12, 64):
        seq = torch.randint(0, VOCAB, (length,), generator=torch.Generator().manual_seed(length))
        _assert_close(_run(paths, (seq,)), model(seq))


@pytest.mark.slow
def test_a_half_precision_table_is_stored_once(tmp_path: Path) -> None:
    model = _model().half()
    ids, x = _inputs()
    inputs = (ids, x.half())
    stock = _stock_bytes(torch.export.export(model, inputs), tmp_path / "stock")
    paths = xnnfold.save(xnnfold.to_executorch(model, inputs), tmp_path / "half.pte")
    assert _written(paths) <= stock - 0.9 * TABLE_BYTES // 2
    embedded, logits = _run(paths, inputs)
    torch.testing.assert_close(embedded, model.emb(ids))
    torch.testing.assert_close(logits, model(*inputs)[1], rtol=1e-2, atol=1e-2)


class AlsoScaled(TiedHead):
    """The table is also a delegated multiply's operand."""

    def forward(self, ids: torch.Tensor, x: torch.Tensor, h: torch.Tensor) -> Any:  # type: ignore[override]
        return self.emb(ids), F.linear(x, self.emb.weight), h * self.emb.weight


def test_a_table_the_delegate_also_reads_otherwise_keeps_both_copies() -> None:
    model = _model(AlsoScaled)
    ids, x = _inputs()
    inputs = (ids, x, torch.randn(VOCAB, DIM))
    et = xnnfold.to_executorch(model, inputs)
    assert xnnfold.data_files(et) == ()
    report = xnnfold.explain(et)
    assert [(r.op, r.code) for r in report.rows] == [("linear", "XNF517")]
    assert report.shared == ()
    _assert_close(xnnfold.run_pte(et.buffer, list(inputs)), model(*inputs))


def test_the_pte_alone_does_not_load() -> None:
    """The table is only in the .ptd: loading without it fails rather than computing
    with missing data."""
    model, inputs = _model(), _inputs()
    et = xnnfold.to_executorch(model, inputs)
    with pytest.raises(RuntimeError):
        xnnfold.run_pte(et.buffer, list(inputs))


def test_loaded_program_of_loads_the_table_from_its_ptd() -> None:
    """`LoadedProgram.of` runs the program the manager holds with the data it needs."""
    model, inputs = _model(), _inputs()
    et = xnnfold.to_executorch(model, inputs)
    assert xnnfold.data_files(et) == (PTD,)
    _assert_close(xnnfold.LoadedProgram.of(et)(list(inputs)), model(*inputs))


def test_loaded_program_of_a_program_without_data_loads_its_buffer() -> None:
    model, inputs = _model(), _inputs()
    et = xnnfold.to_executorch(
        model, inputs, partitioner=xnnfold.XnnpackFoldingPartitioner(tie_tables=False)
    )
    assert xnnfold.data_files(et) == ()
    _assert_close(xnnfold.LoadedProgram.of(et)(list(inputs)), model(*inputs))


def test_loaded_program_of_removes_the_ptd_with_the_program(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    made: list[str] = []
    mkdtemp = tempfile.mkdtemp

    def recorded(*args: Any, **kwargs: Any) -> str:
        made.append(mkdtemp(*args, **kwargs))
        return made[-1]

    model, inputs = _model(), _inputs()
    et = xnnfold.to_executorch(model, inputs)
    monkeypatch.setattr(tempfile, "mkdtemp", recorded)
    loaded = xnnfold.LoadedProgram.of(et)
    # executorch 1.4.1 also writes the .pte to a directory of its own.
    (directory,) = [d for d in made if (Path(d) / PTD).is_file()]
    del loaded
    gc.collect()
    assert not Path(directory).exists()
