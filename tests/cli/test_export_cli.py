"""``xnnfold export MODULE:CALLABLE -o model.pte [--check]`` on a user's module file.

Every written `.pte` is run through ``executorch.runtime`` against the eager model that the
same callable builds.
"""

from __future__ import annotations

import importlib.util
import itertools
import logging
import subprocess
import sys
import textwrap
from pathlib import Path
from types import ModuleType
from typing import Iterator

import pytest
import torch

import xnnfold
from xnnfold.cli import main

# The full tier: the fast tier covers each rule in tests/passes/analysis and end to end once.
pytestmark = [pytest.mark.runtime, pytest.mark.slow]

MODELS = textwrap.dedent(
    """
    import torch
    import torch.nn.functional as F
    from torch import nn
    from torch.export import Dim
    from torch.nn.utils.parametrizations import weight_norm


    class WeightNormConv(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = weight_norm(nn.Conv1d(8, 16, 3, padding=1))

        def forward(self, x):
            return self.conv(x)


    class PerSampleWeightConv(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv1d(8, 16, 3, padding=1)

        def forward(self, x):
            return F.conv1d(x, self.conv.weight * x.abs().mean(), self.conv.bias, padding=1)


    class TiedHead(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(256, 16)

        def forward(self, ids):
            return F.linear(torch.tanh(self.emb(ids)), self.emb.weight)


    def good():
        torch.manual_seed(0)
        return WeightNormConv().eval(), (torch.randn(1, 8, 32),)


    def tied():
        torch.manual_seed(0)
        return TiedHead().eval(), (torch.randint(0, 256, (5,)),)


    def tied_two():
        torch.manual_seed(1)
        return TiedHead().eval(), (torch.randint(0, 256, (7,)),)


    def dynamic():
        model, inputs = good()
        return model, inputs, ({2: Dim("length", min=4, max=128)},)


    def undelegated():
        torch.manual_seed(0)
        return PerSampleWeightConv().eval(), (torch.randn(1, 8, 32),)


    def training_mode():
        model, inputs = good()
        return model.train(), inputs


    def returns_module():
        return WeightNormConv()


    def returns_tensor_inputs():
        return WeightNormConv(), torch.randn(1, 8, 32)


    def returns_four():
        return WeightNormConv(), (torch.randn(1, 8, 32),), None, None


    def returns_no_module():
        return "model", (torch.randn(1, 8, 32),)


    def needs_arguments(size):
        return good()


    def raises():
        raise ValueError("checkpoint not found")


    NOT_CALLABLE = 3
    """
)

_counter = itertools.count()


@pytest.fixture
def models(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A fresh uniquely named module file in a temporary working directory."""
    name = f"xnnfold_user_models_{next(_counter)}"
    (tmp_path / f"{name}.py").write_text(MODELS)
    monkeypatch.chdir(tmp_path)
    yield name
    sys.modules.pop(name, None)


def _load(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"_reference_{path.stem}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _assert_pte_matches_eager(pte: Path, models_file: Path, factory: str, length: int) -> None:
    model, (x,), *_ = getattr(_load(models_file), factory)()
    x = torch.randn(1, 8, length)
    (out,) = xnnfold.run_pte(pte.read_bytes(), (x,))
    with torch.no_grad():
        torch.testing.assert_close(out, model(x), atol=1e-5, rtol=1e-5)


def test_writes_a_pte_that_matches_eager(
    models: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pte = tmp_path / "model.pte"
    assert main(["export", f"{models}:good", "-o", str(pte)]) == 0

    _assert_pte_matches_eager(pte, tmp_path / f"{models}.py", "good", 32)
    model, inputs = _load(tmp_path / f"{models}.py").good()
    table = xnnfold.explain(xnnfold.lower(model, inputs)).table()
    out = capsys.readouterr().out
    assert table in out
    assert f"{pte.stat().st_size:,} bytes" in out
    assert "GEMMs delegated: 1 of 1 (1 with computed weights folded)" in out


def _assert_tied_runs_like_eager(pte: Path, models_file: Path, data: Path | None) -> None:
    model, (ids,) = _load(models_file).tied()
    (logits,) = xnnfold.run_pte(pte.read_bytes(), (ids,), data_path=data)
    with torch.no_grad():
        torch.testing.assert_close(logits, model(ids), atol=1e-5, rtol=1e-5)


def test_a_tied_table_is_written_once_beside_the_pte(
    models: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    pte = tmp_path / "tied.pte"
    with caplog.at_level(logging.WARNING, logger="xnnfold"):
        assert main(["export", f"{models}:tied", "-o", str(pte)]) == 0

    ptd = tmp_path / "tied.ptd"
    captured = capsys.readouterr()
    assert (
        f"wrote {ptd}: {ptd.stat().st_size:,} bytes, the external data tied.pte loads with"
    ) in captured.out
    assert "tied table emb.weight (forward): stored once" in captured.out
    # The command says where the table went: the partitioner's advice is left out.
    assert not [r for r in caplog.records if "tied table" in r.getMessage()]
    assert pte.stat().st_size < 256 * 16 * 4 < ptd.stat().st_size
    _assert_tied_runs_like_eager(pte, tmp_path / f"{models}.py", ptd)


def test_no_tie_tables_writes_one_pte_and_names_the_saving(
    models: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pte = tmp_path / "tied.pte"
    assert main(["export", f"{models}:tied", "-o", str(pte), "--no-tie-tables"]) == 0

    assert sorted(p.name for p in tmp_path.iterdir() if p.suffix in (".pte", ".ptd")) == [
        "tied.pte"
    ]
    out = capsys.readouterr().out
    assert (
        f"stored twice, for the program and for a delegate; tie_tables=True stores it once, saving {256 * 16 * 4:,} bytes"
        in out
    )
    _assert_tied_runs_like_eager(pte, tmp_path / f"{models}.py", None)


def test_two_tied_models_exported_to_one_folder_both_load(models: str, tmp_path: Path) -> None:
    """Each .pte gets its own data file: the second export never replaces the first's."""
    first, second = tmp_path / "first.pte", tmp_path / "second.pte"
    assert main(["export", f"{models}:tied", "-o", str(first)]) == 0
    assert main(["export", f"{models}:tied_two", "-o", str(second)]) == 0

    models_file = tmp_path / f"{models}.py"
    _assert_tied_runs_like_eager(first, models_file, tmp_path / "first.ptd")
    model, (ids,) = _load(models_file).tied_two()
    (logits,) = xnnfold.run_pte(second.read_bytes(), (ids,), data_path=tmp_path / "second.ptd")
    with torch.no_grad():
        torch.testing.assert_close(logits, model(ids), atol=1e-5, rtol=1e-5)


def test_puts_a_training_mode_model_in_eval_mode(
    models: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pte = tmp_path / "model.pte"
    assert main(["export", f"{models}:training_mode", "-o", str(pte)]) == 0

    assert "the model was in training mode; calling .eval()" in capsys.readouterr().err
    _assert_pte_matches_eager(pte, tmp_path / f"{models}.py", "good", 32)


def test_leaves_sys_path_as_it_was(models: str, tmp_path: Path) -> None:
    before = list(sys.path)
    assert main(["export", f"{models}:returns_module", "-o", str(tmp_path / "m.pte")]) == 2
    assert sys.path == before


def test_subprocess_file_path_with_dynamic_shapes_and_check(models: str, tmp_path: Path) -> None:
    pte = tmp_path / "out" / "dynamic.pte"
    pte.parent.mkdir()
    models_file = tmp_path / f"{models}.py"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "xnnfold",
            "export",
            f"{models_file}:dynamic",
            "-o",
            str(pte),
            "--check",
        ],
        cwd=pte.parent,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    assert "1 GEMMs: 1 delegated (1 with folded weights), 0 on portable" in result.stdout
    for length in (7, 32, 100):
        _assert_pte_matches_eager(pte, models_file, "dynamic", length)


@pytest.mark.parametrize("check", [True, False], ids=["check", "no_check"])
def test_gemm_outside_a_delegate(
    models: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], check: bool
) -> None:
    pte = tmp_path / "model.pte"
    flags = ["--check"] if check else []
    code = main(["export", f"{models}:undelegated", "-o", str(pte), *flags])

    err = capsys.readouterr().err
    assert "1 GEMM(s) left outside a delegate" in err
    if check:
        assert code == 1
        assert "--check failed" in err
        assert "aten_convolution_default (convolution) in module '<root>'" in err
        assert not pte.exists()
    else:
        assert code == 0
        assert "--check makes this an error" in err
        _assert_pte_matches_eager(pte, tmp_path / f"{models}.py", "undelegated", 32)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("{m}", "expected MODULE:CALLABLE"),
        ("{m}:", "expected MODULE:CALLABLE"),
        ("no_such_module_xyz:good", "cannot import module 'no_such_module_xyz'"),
        ("missing_dir/models.py:good", "no such file"),
        (
            "{m}:nope",
            "has no attribute 'nope'; callables it defines: PerSampleWeightConv",
        ),
        ("{m}:NOT_CALLABLE", "'NOT_CALLABLE' is a int, not a callable"),
        ("{m}:needs_arguments", "takes required arguments (size)"),
        ("{m}:returns_module", "must return (model, example_inputs) or"),
        ("{m}:returns_four", "got a tuple of 4"),
        ("{m}:returns_no_module", "returned a str as the model"),
        ("{m}:returns_tensor_inputs", "for one tensor x return (model, (x,))"),
        ("./{m}.py:returns_module", "must return (model, example_inputs) or"),
    ],
)
def test_bad_spec_exits_2_without_traceback(
    models: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    spec: str,
    message: str,
) -> None:
    code = main(["export", spec.format(m=models), "-o", str(tmp_path / "m.pte")])

    err = capsys.readouterr().err
    assert code == 2
    assert message in err
    assert err.startswith("xnnfold export: error: ")
    assert "Traceback" not in err
    assert not (tmp_path / "m.pte").exists()


def test_missing_output_directory_exits_2(
    models: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["export", f"{models}:good", "-o", str(tmp_path / "nowhere" / "m.pte")])
    assert code == 2
    assert "does not exist" in capsys.readouterr().err


def test_user_error_shows_the_users_traceback(
    models: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["export", f"{models}:raises", "-o", str(tmp_path / "m.pte")])

    err = capsys.readouterr().err
    assert code == 2
    first_frame = err.split("Traceback (most recent call last):\n", 1)[1].splitlines()[0]
    assert f"{models}.py" in first_frame
    assert err.rstrip().endswith(
        f"calling '{models}:raises' raised ValueError: checkpoint not found"
    )
