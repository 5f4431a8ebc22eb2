"""A tied table (an embedding a delegated linear also takes as its weight): by default
stored as stock stores it, in one self-contained `.pte`; with ``tie_tables=True`` stored
once, in a `.ptd` beside the `.pte`.

Each case lowers with the stock partitioner and with xnnfold, writes every file the
program needs (`xnnfold.save`, or the user's own ``et.write_to_file``), runs it through
executorch.runtime against eager, and compares the bytes: by default byte for byte
stock's program, with tying at most the stock program's bytes minus 90% of the table.
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
PTD = "_default_external_constant.ptd"  # executorch's name for the data file


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


def _tied(model: nn.Module, inputs: Any, **options: Any) -> Any:
    """``model``'s program with tied tables stored once."""
    return xnnfold.to_executorch(model, inputs, tie_tables=True, **options)


def _stock(programs: Any, config: ExecutorchBackendConfig | None = None) -> Any:
    return to_edge_transform_and_lower(programs, partitioner=[XnnpackPartitioner()]).to_executorch(
        config
    )


def _stock_bytes(
    programs: Any, directory: Path, config: ExecutorchBackendConfig | None = None
) -> int:
    """Bytes of every file the stock partitioner's program needs."""
    directory.mkdir()
    return _written(xnnfold.save(_stock(programs, config), directory / "stock.pte"))


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


# --------------------------------------------------------------------------------------
# By default: the stock layout, a .pte that loads alone, and the saving named.


def test_by_default_the_pte_written_alone_is_stock_s_and_loads(tmp_path: Path) -> None:
    """The drop-in promise: the user's own ``et.write_to_file`` writes a program that
    loads alone, byte for byte the stock partitioner's when nothing folds."""
    model, inputs = _model(), _inputs()
    et = xnnfold.to_executorch(model, inputs)
    assert xnnfold.data_files(et) == ()
    assert et.buffer == _stock(torch.export.export(model, inputs)).buffer
    pte = tmp_path / "model.pte"
    with open(pte, "wb") as file:
        et.write_to_file(file)
    _assert_close(xnnfold.run_pte(pte.read_bytes(), list(inputs)), model(*inputs))


def test_by_default_explain_names_the_bytes_tying_would_save() -> None:
    model, inputs = _model(), _inputs()
    report = xnnfold.explain(xnnfold.lower(model, inputs))
    assert report.shared == ()
    assert [(t.method, t.fqn, t.nbytes) for t in report.stored_twice] == [
        ("forward", "emb.weight", TABLE_BYTES)
    ]
    assert report.bytes_tying_would_save == TABLE_BYTES
    assert (
        f"tied table emb.weight (forward): stored twice, for the program and for a delegate; "
        f"tie_tables=True stores it once, saving {TABLE_BYTES:,} bytes"
    ) in str(report)


def test_a_tied_table_stored_once_is_not_named_as_stored_twice() -> None:
    model, inputs = _model(), _inputs()
    report = xnnfold.explain(_tied(model, inputs))
    assert report.stored_twice == () and report.bytes_tying_would_save == 0


# --------------------------------------------------------------------------------------
# With tie_tables=True: stored once, in a .ptd the .pte loads with.


def test_one_method_stores_the_table_once(tmp_path: Path) -> None:
    model, inputs = _model(), _inputs()
    stock = _stock_bytes(torch.export.export(model, inputs), tmp_path / "stock")
    paths = xnnfold.save(_tied(model, inputs), tmp_path / "tied.pte")
    assert [p.name for p in paths] == ["tied.pte", "tied.ptd"]
    assert _written(paths) <= stock - 0.9 * TABLE_BYTES
    _assert_close(_run(paths, inputs), model(*inputs))


def test_explain_names_the_shared_table_and_the_bytes_saved() -> None:
    model, inputs = _model(), _inputs()
    report = xnnfold.explain(xnnfold.lower(model, inputs, tie_tables=True))
    assert [(t.method, t.fqn, t.nbytes) for t in report.shared] == [
        ("forward", "emb.weight", TABLE_BYTES)
    ]
    assert report.bytes_saved == TABLE_BYTES
    assert f"tied table emb.weight (forward): stored once in {PTD}" in str(report)


@pytest.mark.slow
def test_with_every_constant_external_the_table_is_stored_once(tmp_path: Path) -> None:
    model, inputs = _model(), _inputs()
    config = ExecutorchBackendConfig(external_constants=True)
    stock = _stock_bytes(torch.export.export(model, inputs), tmp_path / "stock", config)
    et = xnnfold.lower(model, inputs, tie_tables=True).to_executorch(config)
    paths = xnnfold.save(et, tmp_path / "tied.pte")
    assert _written(paths) <= stock - 0.9 * TABLE_BYTES
    _assert_close(_run(paths, inputs), model(*inputs))


def _two_methods(emb: nn.Module) -> dict[str, Any]:
    ids, x = _inputs()
    return {
        "embed": torch.export.export(Embed(emb).eval(), (ids,)),
        "logits": torch.export.export(Logits(emb).eval(), (x,)),
    }


def test_two_methods_share_the_table_with_no_call_before_lowering(tmp_path: Path) -> None:
    torch.manual_seed(0)
    emb = nn.Embedding(VOCAB, DIM)
    ids, x = _inputs()
    stock = _stock_bytes(_two_methods(emb), tmp_path / "stock")
    edge = to_edge_transform_and_lower(
        _two_methods(emb), partitioner=[xnnfold.XnnpackFoldingPartitioner(tie_tables=True)]
    )
    assert {(t.method, t.fqn) for t in xnnfold.explain(edge).shared} == {("embed", "emb.weight")}
    paths = xnnfold.save(edge.to_executorch(), tmp_path / "two.pte")
    assert _written(paths) <= stock - 0.9 * TABLE_BYTES
    _assert_close(_run(paths, (ids,), "embed"), emb(ids))
    _assert_close(_run(paths, (x,), "logits"), F.linear(x, emb.weight))


@pytest.mark.slow
def test_two_methods_by_default_keep_the_stock_layout(tmp_path: Path) -> None:
    torch.manual_seed(0)
    emb = nn.Embedding(VOCAB, DIM)
    ids, x = _inputs()
    stock = _stock(_two_methods(emb))
    edge = to_edge_transform_and_lower(
        _two_methods(emb), partitioner=[xnnfold.XnnpackFoldingPartitioner()]
    )
    report = xnnfold.explain(edge)
    assert [(t.method, t.fqn) for t in report.stored_twice] == [("embed", "emb.weight")]
    et = edge.to_executorch()
    assert xnnfold.data_files(et) == () and et.buffer == stock.buffer
    _assert_close(xnnfold.run_pte(et.buffer, [ids], "embed"), emb(ids))
    _assert_close(xnnfold.run_pte(et.buffer, [x], "logits"), F.linear(x, emb.weight))


@pytest.mark.slow
def test_dynamic_sequence_length(tmp_path: Path) -> None:
    model = _model(TiedLM)
    ids = torch.randint(0, VOCAB, (12,), generator=torch.Generator().manual_seed(3))
    dynamic = ({0: torch.export.Dim("seq", min=2, max=64)},)
    stock = _stock_bytes(
        torch.export.export(model, (ids,), dynamic_shapes=dynamic), tmp_path / "stock"
    )
    paths = xnnfold.save(_tied(model, (ids,), dynamic_shapes=dynamic), tmp_path / "lm.pte")
    assert _written(paths) <= stock - 0.9 * TABLE_BYTES
    for length in (3, 12, 64):
        seq = torch.randint(0, VOCAB, (length,), generator=torch.Generator().manual_seed(length))
        _assert_close(_run(paths, (seq,)), model(seq))


@pytest.mark.slow
def test_a_half_precision_table_is_stored_once(tmp_path: Path) -> None:
    """Stored once, the table gives the logits stock's program gives, bit for bit; both
    are fp16 GEMMs, which XNNPACK accumulates in fp16 on a CPU with AVX512-FP16 (up to
    2.2e-2 from eager's fp32-accumulated fp16 linear over these 64 terms, seen there)."""
    model = _model().half()
    ids, x = _inputs()
    inputs = (ids, x.half())
    stock_paths = xnnfold.save(_stock(torch.export.export(model, inputs)), tmp_path / "stock.pte")
    paths = xnnfold.save(_tied(model, inputs), tmp_path / "half.pte")
    assert _written(paths) <= _written(stock_paths) - 0.9 * TABLE_BYTES // 2
    embedded, logits = _run(paths, inputs)
    torch.testing.assert_close(embedded, model.emb(ids))
    assert torch.equal(logits, _run(stock_paths, inputs)[1])
    torch.testing.assert_close(logits, model(*inputs)[1], rtol=1e-2, atol=5e-2)


class AlsoScaled(TiedHead):
    """The table is also a delegated multiply's operand."""

    def forward(self, ids: torch.Tensor, x: torch.Tensor, h: torch.Tensor) -> Any:  # type: ignore[override]
        return self.emb(ids), F.linear(x, self.emb.weight), h * self.emb.weight


def test_a_table_the_delegate_also_reads_otherwise_keeps_both_copies() -> None:
    model = _model(AlsoScaled)
    ids, x = _inputs()
    inputs = (ids, x, torch.randn(VOCAB, DIM))
    et = _tied(model, inputs)
    assert xnnfold.data_files(et) == ()
    report = xnnfold.explain(et)
    assert [(r.op, r.code) for r in report.rows] == [("linear", "XNF517")]
    assert report.shared == () and report.stored_twice == ()
    _assert_close(xnnfold.run_pte(et.buffer, list(inputs)), model(*inputs))


def test_the_pte_alone_does_not_load() -> None:
    """The table is only in the .ptd: loading without it fails rather than computing
    with missing data."""
    model, inputs = _model(), _inputs()
    with pytest.raises(RuntimeError):
        xnnfold.run_pte(_tied(model, inputs).buffer, list(inputs))


# --------------------------------------------------------------------------------------
# Writing and loading the files.


def test_two_tied_programs_written_to_one_folder_both_load(tmp_path: Path) -> None:
    """Each .pte gets a data file of its own: the second never replaces the first's."""
    first, second = _model(), _model(TiedLM)
    ids, x = _inputs()
    first_paths = xnnfold.save(_tied(first, (ids, x)), tmp_path / "first.pte")
    second_paths = xnnfold.save(_tied(second, (ids,)), tmp_path / "second.pte")
    assert [p.name for p in (*first_paths, *second_paths)] == [
        "first.pte",
        "first.ptd",
        "second.pte",
        "second.ptd",
    ]
    _assert_close(_run(first_paths, (ids, x)), first(ids, x))
    _assert_close(_run(second_paths, (ids,)), second(ids))


def test_save_refuses_a_data_file_that_would_overwrite_the_pte(tmp_path: Path) -> None:
    model, inputs = _model(), _inputs()
    with pytest.raises(ValueError, match="would overwrite the .pte"):
        xnnfold.save(_tied(model, inputs), tmp_path / "model.ptd")
    assert list(tmp_path.iterdir()) == []


def test_loaded_program_of_loads_the_table_from_its_ptd() -> None:
    """`LoadedProgram.of` runs the program the manager holds with the data it needs."""
    model, inputs = _model(), _inputs()
    et = _tied(model, inputs)
    assert xnnfold.data_files(et) == (PTD,)
    _assert_close(xnnfold.LoadedProgram.of(et)(list(inputs)), model(*inputs))


def test_loaded_program_of_a_program_without_data_loads_its_buffer() -> None:
    model, inputs = _model(), _inputs()
    et = xnnfold.to_executorch(model, inputs)
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
    et = _tied(model, inputs)
    monkeypatch.setattr(tempfile, "mkdtemp", recorded)
    loaded = xnnfold.LoadedProgram.of(et)
    # executorch 1.4.1 also writes the .pte to a directory of its own.
    (directory,) = [d for d in made if (Path(d) / PTD).is_file()]
    del loaded
    gc.collect()
    assert not Path(directory).exists()
