"""`xnnfold.integrations.transformers.export`: transformers' ExecuTorch exporter, folding.

transformers' own audio model classes, at tiny configs with random weights (nothing is
downloaded), go through the stock exporter and through `export`: every computed-weight
GEMM the stock exporter leaves on portable is delegated, the result runs equal to eager
on the exporter's runner and through executorch.runtime, and a model with nothing to fold
gives the stock exporter's bytes. The stock exporter is left exactly as it was, after a
successful export and after a raising one. Each model is exported once per way and
shared by the tests that read it.
"""

from __future__ import annotations

import functools
import importlib
import sys
import threading
from pathlib import Path
from typing import Any, Callable

import pytest
import torch

import xnnfold
from xnnfold._releases import UnsupportedRelease

from tests.support.audio_encoders import tiny_encoder
from tests.support.tied_lm import tiny_tied_llama

_SEED = 0
_ENCODER = tiny_encoder(layers=1)
# Models whose positional convolution is under weight_norm, and one with nothing to fold.
_FOLDING = ("wav2vec2", "hubert", "wav2vec2_ctc")
_NOTHING_TO_FOLD = "data2vec_audio"


def _transformers() -> Any:
    return pytest.importorskip("transformers")


def _models() -> dict[str, Callable[[], Any]]:
    t = _transformers()
    return {
        "wav2vec2": lambda: t.Wav2Vec2Model(t.Wav2Vec2Config(**_ENCODER)),
        "hubert": lambda: t.HubertModel(t.HubertConfig(**_ENCODER)),
        "wav2vec2_ctc": lambda: t.Wav2Vec2ForCTC(t.Wav2Vec2Config(**_ENCODER, vocab_size=12)),
        "data2vec_audio": lambda: t.Data2VecAudioModel(t.Data2VecAudioConfig(**_ENCODER)),
    }


def _model(name: str) -> Any:
    torch.manual_seed(_SEED)
    return _models()[name]().eval()


def _inputs() -> dict[str, torch.Tensor]:
    return {"input_values": torch.randn(1, 800, generator=torch.Generator().manual_seed(1))}


def _stock_exporter_state() -> dict[str, Any]:
    """What `export` swaps and must put back: the backend-preparation table's entries."""
    from xnnfold import _upstream

    return dict(_upstream.transformers_backend_prepare)


@functools.cache
def _stock(name: str) -> Any:
    from transformers.exporters import ExecutorchConfig
    from transformers.exporters.exporter_executorch import ExecutorchExporter

    return ExecutorchExporter().export(_model(name), _inputs(), ExecutorchConfig())


@functools.cache
def _folding(name: str) -> tuple[Any, Any]:
    """(the model after the export, the export)."""
    from xnnfold.integrations.transformers import export

    model = _model(name)
    return model, export(model, _inputs())


# --- fast tier: refusals and the restore after a raising export (no lowering) ---


@pytest.mark.parametrize("config", ["object", "dict"])
def test_a_config_for_another_backend_is_refused(config: str) -> None:
    _transformers()
    from transformers.exporters import ExecutorchConfig

    from xnnfold.integrations.transformers import export

    given = ExecutorchConfig(backend="cuda") if config == "object" else {"backend": "cuda"}
    with pytest.raises(ValueError, match=r"config\.backend is 'cuda'.*expected backend='xnnpack'"):
        export(_model("wav2vec2"), _inputs(), given)


def test_without_transformers_the_import_error_names_the_extra(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in [n for n in sys.modules if n == "transformers" or n.startswith("transformers.")]:
        monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.setitem(sys.modules, "transformers", None)  # also where it was never imported
    for name in ("xnnfold.integrations.transformers", "xnnfold.integrations._transformers"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    with pytest.raises(ImportError, match=r'pip install "xnnfold\[transformers\]"'):
        importlib.import_module("xnnfold.integrations.transformers")


def test_the_stock_exporter_is_restored_after_a_raising_export() -> None:
    _transformers()
    from xnnfold.integrations.transformers import export

    before = _stock_exporter_state()
    model = _model("wav2vec2")
    # Raised by the exporter after the backend preparation ran, inside the swap.
    with pytest.raises(ValueError, match="labels"):
        export(model, {**_inputs(), "labels": torch.zeros(1, 3, dtype=torch.long)})
    assert _stock_exporter_state() == before
    assert not xnnfold.is_prepared(model)


def test_the_swapped_preparation_acts_only_on_the_exporting_thread() -> None:
    _transformers()
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from transformers.exporters.exporter_executorch import prepare_for_xnnpack

    from xnnfold.integrations._transformers import _FoldingPreparation

    preparation = _FoldingPreparation(
        prepare_for_xnnpack, XnnpackPartitioner, thread=threading.get_ident(), tie_tables=False
    )
    elsewhere: list[Any] = []
    other = threading.Thread(
        target=lambda: elsewhere.extend(preparation(_model("wav2vec2"), _inputs())[2])
    )
    other.start()
    other.join()
    here = preparation(_model("wav2vec2"), _inputs())[2]
    assert [type(p) for p in elsewhere] == [XnnpackPartitioner]
    assert [type(p) for p in here] == [xnnfold.XnnpackFoldingPartitioner]


class _ExporterCallingNoPreparation:
    """A transformers exporter that lowers without looking its backend preparation up."""

    def export(self, model: Any, sample_inputs: Any, config: Any) -> str:
        return "a program lowered by another partitioner"


class _ExporterPreparingOnAnotherThread:
    """A transformers exporter that calls its XNNPACK preparation on a thread of its own."""

    def export(self, model: Any, sample_inputs: Any, config: Any) -> list[Any]:
        from xnnfold import _upstream

        entry = _upstream.transformers_backend_prepare["xnnpack"]
        found: list[Any] = []
        worker = threading.Thread(target=lambda: found.extend(entry(model, sample_inputs)[2]))
        worker.start()
        worker.join()
        return found


@pytest.mark.parametrize(
    "exporter",
    [_ExporterCallingNoPreparation, _ExporterPreparingOnAnotherThread],
    ids=["never-called", "another-thread"],
)
def test_an_export_that_never_ran_the_swapped_preparation_is_refused(
    monkeypatch: pytest.MonkeyPatch, exporter: type
) -> None:
    _transformers()
    from transformers.exporters import exporter_executorch

    from xnnfold.integrations.transformers import export

    monkeypatch.setattr(exporter_executorch, "ExecutorchExporter", exporter)
    before = _stock_exporter_state()
    model = _model("wav2vec2")
    with pytest.raises(
        UnsupportedRelease,
        match=r"never called its 'xnnpack' backend preparation .* on the exporting thread.*"
        r"unlike transformers 5\.24\.0 to 5\.25\.0",
    ):
        export(model, _inputs())
    assert _stock_exporter_state() == before
    assert not xnnfold.is_prepared(model)


def test_an_older_transformers_is_refused_before_exporting(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _transformers()
    from transformers.exporters import exporter_executorch

    from xnnfold import _releases
    from xnnfold.integrations.transformers import export

    real = _releases.version
    monkeypatch.setattr(
        _releases, "version", lambda name: "5.23.0" if name == "transformers" else real(name)
    )
    # Reaching the exporter at all would be a failure of its own.
    monkeypatch.setattr(exporter_executorch, "ExecutorchExporter", None)
    with pytest.raises(
        UnsupportedRelease,
        match=r"transformers 5\.23\.0 is older than the releases xnnfold was tested with "
        r"\(5\.24\.0 to 5\.25\.0",
    ):
        export(_model("wav2vec2"), _inputs())


# --- full tier: through the exporter ---


@pytest.mark.slow
def test_the_stock_exporter_is_restored_after_an_export() -> None:
    _transformers()
    from xnnfold.integrations.transformers import export

    before = _stock_exporter_state()
    model = _model("wav2vec2")
    export(model, _inputs())
    assert _stock_exporter_state() == before
    assert not xnnfold.is_prepared(model)


@pytest.mark.slow
@pytest.mark.parametrize("name", _FOLDING)
def test_what_the_stock_exporter_leaves_on_portable_is_delegated(name: str) -> None:
    _transformers()
    left = {row.module for row in xnnfold.explain(_stock(name).program).outside}
    assert left, "the stock exporter delegates everything: nothing to show here"
    report = xnnfold.explain(_folding(name)[1].program)
    assert report.outside == (), report.table()
    assert {row.module for row in report.folded} == left, report.table()


@pytest.mark.slow
def test_a_folded_weight_is_named_by_its_site() -> None:
    _transformers()
    report = xnnfold.explain(_folding("wav2vec2")[1].program)
    assert [row.site for row in report.folded] == ["encoder.pos_conv_embed.conv.weight"]


@pytest.mark.slow
@pytest.mark.runtime
@pytest.mark.parametrize("name", [*_FOLDING, _NOTHING_TO_FOLD])
def test_the_runner_matches_eager(name: str) -> None:
    _transformers()
    model, exported = _folding(name)
    with torch.no_grad():
        expected = model(**_inputs())[0]
    actual = exported(**_inputs())[0]
    torch.testing.assert_close(actual, expected, atol=1e-5, rtol=1e-4)


@pytest.mark.slow
@pytest.mark.runtime
@pytest.mark.parametrize("name", _FOLDING)
def test_executorch_runtime_matches_eager(name: str) -> None:
    _transformers()
    model, exported = _folding(name)
    with torch.no_grad():
        expected = model(**_inputs())[0]
    outputs = xnnfold.run_pte(exported.program.buffer, (_inputs()["input_values"],))
    torch.testing.assert_close(outputs[0], expected, atol=1e-5, rtol=1e-4)


@pytest.mark.slow
def test_a_model_with_nothing_to_fold_gives_the_stock_bytes() -> None:
    _transformers()
    assert xnnfold.find_sites(_model(_NOTHING_TO_FOLD)) == []
    folding = _folding(_NOTHING_TO_FOLD)[1].program.buffer
    assert folding == _stock(_NOTHING_TO_FOLD).program.buffer


@pytest.mark.slow
@pytest.mark.runtime
def test_the_saved_export_loads_and_matches_eager(tmp_path: Path) -> None:
    _transformers()
    from transformers.exporters import ExportedModel

    model, exported = _folding("wav2vec2")
    exported.save_pretrained(tmp_path)
    assert (tmp_path / "model.pte").read_bytes() == exported.program.buffer
    with torch.no_grad():
        expected = model(**_inputs())[0]
    loaded = ExportedModel.from_pretrained(tmp_path)
    torch.testing.assert_close(loaded(**_inputs())[0], expected, atol=1e-5, rtol=1e-4)


def _tied_llama() -> Any:
    _transformers()
    return tiny_tied_llama(_SEED)


@pytest.mark.slow
@pytest.mark.runtime
def test_tie_tables_stores_a_tied_embedding_once(tmp_path: Path) -> None:
    from xnnfold.integrations.transformers import export

    model = _tied_llama()
    ids = torch.randint(0, 1000, (1, 8), generator=torch.Generator().manual_seed(1))
    table = 1000 * 64 * 4
    default = export(model, {"input_ids": ids}).program
    assert xnnfold.data_files(default) == ()
    tied = export(model, {"input_ids": ids}, tie_tables=True).program
    assert xnnfold.explain(tied).bytes_saved == table
    paths = xnnfold.save(tied, tmp_path / "model.pte")
    assert sum(p.stat().st_size for p in paths) <= len(default.buffer) - 0.9 * table
    logits = xnnfold.run_pte(paths[0].read_bytes(), [ids], data_path=paths[1])[0]
    with torch.no_grad():
        torch.testing.assert_close(logits, model(input_ids=ids).logits, atol=1e-5, rtol=1e-4)
