"""The codemod's per-file rules, one fixture file at a time.

Each ``tests/rewriter/codemod/golden/<rule>/<name>.in.py`` is run through `transform_source`;
``<name>.out.py`` is the expected rewrite (absent: the file must come back unchanged) and
``<name>.report.txt`` holds one expected finding per line as ``line:col: CODE message``
prefixes, ``CODE*`` marking a rewritten site. A ``# codemod-options: key=true|false`` line
in the input sets `CodemodOptions` fields. Every rule directory has a case that applies, a
no-change case and a ``negative`` case (unrelated things with the same names).
"""

from __future__ import annotations

import argparse
import functools
import inspect
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

import libcst as cst
import pytest
from libcst.codemod import CodemodContext

import xnnfold
import xnnfold.rewriter.codemod as codemod_module
from xnnfold.rewriter import CodemodOptions, FileOutcome, transform_source
from xnnfold.rewriter.codemod._api import UnparseableSource
from xnnfold.rewriter.codemod._names import (
    FOLDING_PARTITIONER_OPTIONS,
    FOLDING_PARTITIONER_POSITIONAL,
)

if TYPE_CHECKING:
    import torch

GOLDEN = Path(__file__).parent / "golden"
INPUTS = sorted(GOLDEN.glob("*/*.in.py"))
RULES = sorted(p.name for p in GOLDEN.iterdir() if p.is_dir() and not p.name.startswith("_"))
_OPTIONS_RE = re.compile(r"^# codemod-options: (.*)$", re.M)


def _id(path: Path) -> str:
    return f"{path.parent.name}/{path.name.removesuffix('.in.py')}"


def _sibling(path: Path, suffix: str) -> Path:
    return path.with_name(path.name.removesuffix(".in.py") + suffix)


def _options(source: bytes) -> CodemodOptions:
    match = _OPTIONS_RE.search(source.decode())
    if match is None:
        return CodemodOptions()
    flags = dict(pair.split("=") for pair in match.group(1).split())
    return CodemodOptions(**{key: value == "true" for key, value in flags.items()})


@functools.cache
def _run(path: Path) -> FileOutcome:
    source = path.read_bytes()
    return transform_source(source, options=_options(source))


def _report(outcome: FileOutcome) -> list[str]:
    return [
        f"{f.line}:{f.col}: {f.code}{'*' if f.rewritten else ''} {f.message}"
        for f in outcome.findings
    ]


@pytest.mark.parametrize("path", INPUTS, ids=_id)
def test_report(path: Path) -> None:
    expected = _sibling(path, ".report.txt").read_text().splitlines()
    actual = _report(_run(path))
    assert len(actual) == len(expected), "\n".join(actual)
    for line, prefix in zip(actual, expected):
        assert line.startswith(prefix), f"{line!r} does not start with {prefix!r}"


@pytest.mark.parametrize("path", INPUTS, ids=_id)
def test_rewrite(path: Path) -> None:
    expected = _sibling(path, ".out.py")
    outcome = _run(path)
    if expected.exists():
        assert outcome.new_code == expected.read_bytes()
    else:
        assert outcome.new_code is None


@pytest.mark.parametrize("path", INPUTS, ids=_id)
def test_idempotent(path: Path) -> None:
    """A second run over the rewritten file changes nothing."""
    out = _sibling(path, ".out.py")
    target = out if out.exists() else path
    assert (
        transform_source(target.read_bytes(), options=_options(path.read_bytes())).new_code is None
    )


@pytest.mark.parametrize("path", [p for p in INPUTS if _sibling(p, ".out.py").exists()], ids=_id)
def test_only_sites_and_imports_change(path: Path) -> None:
    """Every input line that holds no finding and no import is still in the output."""
    outcome = _run(path)
    assert outcome.new_code is not None
    site_lines = {f.line for f in outcome.findings if f.rewritten}
    out_lines = outcome.new_code.decode().splitlines()
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if number in site_lines or line.lstrip().startswith(("import ", "from ")):
            continue
        assert line in out_lines, f"line {number} changed: {line!r}"


# The codes each rule directory exercises.
RULE_CODES = {
    "legacy_weight_norm": ("XNF101", "XNF102"),
    "legacy_spectral_norm": ("XNF103", "XNF104"),
    "parametrizations": ("XNF201", "XNF202", "XNF203", "XNF204"),
    "forward": ("XNF210", "XNF211", "XNF212"),
    "export": ("XNF301", "XNF302", "XNF303"),
    "legacy_keys": ("XNF401", "XNF402", "XNF403"),
}


def test_rule_directories_are_known() -> None:
    assert sorted(RULE_CODES) == RULES


@pytest.mark.parametrize("rule", sorted(RULE_CODES))
def test_every_rule_has_its_cases(rule: str) -> None:
    codes = RULE_CODES[rule]
    outcomes = {p.name: _run(p) for p in INPUTS if p.parent.name == rule}
    reported = {f.code for o in outcomes.values() for f in o.findings}
    assert set(codes) <= reported, f"codes never reported: {set(codes) - reported}"
    assert any(
        o.new_code is None and any(f.code in codes for f in o.findings) for o in outcomes.values()
    ), "no case that reports but leaves the file unchanged"
    negative = outcomes["negative.in.py"]
    assert not [f for f in negative.findings if f.code in codes], _report(negative)


def test_unrelated_file_is_unchanged_and_silent() -> None:
    outcome = transform_source(
        b"import os\n\n\ndef f(x):\n    return os.path.join(x)\n", options=CodemodOptions()
    )
    assert outcome == FileOutcome(findings=(), new_code=None)


def test_weight_norm_migration_off_reports_only() -> None:
    source = (GOLDEN / "legacy_weight_norm" / "removals.in.py").read_bytes()
    outcome = transform_source(source, options=CodemodOptions(migrate_weight_norm=False))
    assert outcome.new_code is None
    assert {f.code for f in outcome.findings} == {"XNF101", "XNF102"}
    assert all("not migrated" in f.message and not f.rewritten for f in outcome.findings)


def test_encoding_cookie_crlf_and_tabs_round_trip() -> None:
    source = (
        "# -*- coding: latin-1 -*-\r\n"
        "from torch.nn.utils import weight_norm\r\n"
        "NAME = 'caf\xe9'\r\n"
        "def f(m):\r\n"
        "\tif m:\r\n"
        "\t\treturn weight_norm(m)\r\n"
    ).encode("latin-1")
    outcome = transform_source(source, options=CodemodOptions())
    assert outcome.new_code == (
        "# -*- coding: latin-1 -*-\r\n"
        "from torch.nn.utils.parametrizations import weight_norm\r\n"
        "\r\n"
        "NAME = 'caf\xe9'\r\n"
        "def f(m):\r\n"
        "\tif m:\r\n"
        "\t\treturn weight_norm(m)\r\n"
    ).encode("latin-1")


def test_relative_imports_do_not_stop_the_rewrite() -> None:
    source = b"from . import layers\nfrom torch.nn.utils import weight_norm\n\nconv = weight_norm(layers.conv())\n"
    outcome = transform_source(source, options=CodemodOptions())
    assert outcome.new_code == (
        b"from . import layers\nfrom torch.nn.utils.parametrizations import weight_norm\n\n"
        b"conv = weight_norm(layers.conv())\n"
    )


@pytest.mark.parametrize(
    "source",
    [
        b"def f(:\n    pass\n",
        b"print 'python 2'\n",
        b"x = '\xff\xfe'\n",
        b"# -*- coding: no-such-codec -*-\nx = 1\n",
    ],
    ids=["syntax-error", "python2", "undecodable", "unknown-codec"],
)
def test_unparseable_source_raises(source: bytes) -> None:
    with pytest.raises(UnparseableSource) as info:
        transform_source(source, options=CodemodOptions())
    assert info.value.reason


def test_removal_with_starred_arguments_blocks_the_file() -> None:
    source = (
        b"from torch.nn.utils import remove_weight_norm, weight_norm\n"
        b"m = weight_norm(make())\nremove_weight_norm(*args)\n"
    )
    outcome = transform_source(source, options=CodemodOptions())
    assert outcome.new_code is None
    assert [f.code for f in outcome.findings] == ["XNF101", "XNF102"]
    assert all("cannot map" in f.message for f in outcome.findings)


# ---------------------------------------------------------------------------------------
# The migrated code still works: builds, loads a legacy checkpoint, same outputs.


def _exec(path: Path) -> ModuleType:
    module = ModuleType(f"codemod_fixture_{path.name.replace('.', '_')}")
    exec(compile(path.read_text(), str(path), "exec"), module.__dict__)
    return module


@pytest.mark.needs_torch
def test_migrated_model_loads_legacy_checkpoint_with_same_outputs(tmp_path: Path) -> None:
    import torch

    legacy = _exec(GOLDEN / "legacy_weight_norm" / "hifigan.in.py")
    migrated = _exec(GOLDEN / "legacy_weight_norm" / "hifigan.out.py")
    torch.manual_seed(0)
    old = legacy.build_model().eval()
    assert any(k.endswith("weight_g") for k in old.state_dict())
    torch.save(old.state_dict(), tmp_path / "legacy.pt")
    torch.manual_seed(1)  # different initial weights: only the checkpoint can make them match
    new = migrated.build_model().eval()
    assert not any(k.endswith("weight_g") for k in new.state_dict())
    new.load_state_dict(torch.load(tmp_path / "legacy.pt"))
    x = legacy.example_input()
    with torch.no_grad():
        assert torch.equal(new(x), old(x))
        # The removal path: HiFi-GAN's inference-time remove_weight_norm().
        old.remove_weight_norm()
        new.remove_weight_norm()
        assert not any("parametrizations" in k for k in new.state_dict())
        torch.testing.assert_close(new(x), old(x), rtol=0, atol=0)


@pytest.mark.needs_torch
@pytest.mark.parametrize("name", ["hifigan.in.py", "hifigan.out.py"])
def test_removal_inside_except_value_error_works_before_and_after(name: str) -> None:
    """remove_parametrizations raises ValueError when absent, as remove_weight_norm did."""
    module = _exec(GOLDEN / "legacy_weight_norm" / name)
    model = module.build_model()
    assert module.strip_post(model) is True
    assert module.strip_post(model) is False


@pytest.mark.needs_torch
def test_removal_passed_as_a_value_blocks_the_migration() -> None:
    """``conv.apply(remove_weight_norm)`` cannot be migrated: apply would also visit the
    parametrization's own submodules, where remove_parametrizations raises."""
    import torch

    legacy = _exec(GOLDEN / "legacy_weight_norm" / "removal_callback.in.py")
    legacy.strip(legacy.build())  # fine with the legacy hook
    conv = torch.nn.utils.parametrizations.weight_norm(torch.nn.Conv1d(4, 4, 3))
    with pytest.raises(ValueError):
        conv.apply(lambda m: torch.nn.utils.parametrize.remove_parametrizations(m, "weight"))
    outcome = _run(GOLDEN / "legacy_weight_norm" / "removal_callback.in.py")
    assert outcome.new_code is None
    assert all("passes the removal as a value" in f.message for f in outcome.findings)


@pytest.mark.needs_torch
def test_folding_partitioner_parameters_match_its_signature() -> None:
    """The rewrite leaves a call alone only when it names one of the folding partitioner's
    own options; every other keyword reaches the configs with either partitioner."""
    parameters = inspect.signature(xnnfold.XnnpackFoldingPartitioner.__init__).parameters
    by_kind = {
        kind: tuple(name for name, p in parameters.items() if p.kind is kind and name != "self")
        for kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    }
    assert by_kind[inspect.Parameter.POSITIONAL_OR_KEYWORD] == FOLDING_PARTITIONER_POSITIONAL
    assert by_kind[inspect.Parameter.KEYWORD_ONLY] == FOLDING_PARTITIONER_OPTIONS
    assert any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values())


def _weight_normed_linear() -> torch.nn.Module:
    import torch

    torch.manual_seed(0)
    return torch.nn.utils.parametrizations.weight_norm(torch.nn.Linear(8, 4)).eval()


@pytest.mark.runtime
@pytest.mark.needs_torch
def test_wired_export_lowers_like_xnnfold_and_matches_eager() -> None:
    """The rewritten export code emits xnnfold's program, not the stock one, and it runs."""
    import torch

    inputs = (torch.randn(3, 8),)
    stock = _exec(GOLDEN / "export" / "wire.in.py").lower(_weight_normed_linear(), inputs)
    wired = _exec(GOLDEN / "export" / "wire.out.py").lower(_weight_normed_linear(), inputs)
    assert wired == xnnfold.to_executorch(_weight_normed_linear(), inputs).buffer
    assert wired != stock
    model = _weight_normed_linear()
    torch.testing.assert_close(xnnfold.run_pte(wired, inputs)[0], model(*inputs))


# ---------------------------------------------------------------------------------------
# The libcst command.


def test_codemod_module_exports() -> None:
    assert set(codemod_module.__all__) >= {
        "XnnfoldCodemod",
        "transform_source",
        "CodemodOptions",
        "Finding",
        "FileOutcome",
    }


@pytest.mark.parametrize(
    ("flags", "changed"),
    [([], True), (["--no-migrate-weight-norm", "--no-wire-export"], False)],
    ids=["defaults", "report-only"],
)
def test_command_flags_reach_the_rules(flags: list[str], changed: bool) -> None:
    parser = argparse.ArgumentParser()
    codemod_module.XnnfoldCodemod.add_args(parser)
    command = codemod_module.XnnfoldCodemod(CodemodContext(), **vars(parser.parse_args(flags)))
    source = (GOLDEN / "legacy_weight_norm" / "removals.in.py").read_text()
    updated = command.transform_module(cst.parse_module(source))
    assert (updated.code != source) is changed
    assert len(command.context.warnings) == 5
    assert all(re.match(r"\d+:\d+: XNF10[12] ", w) for w in command.context.warnings)


def test_libcst_tool_runs_the_command(tmp_path: Path) -> None:
    shutil.copy(GOLDEN / "legacy_weight_norm" / "hifigan.in.py", tmp_path / "model.py")
    shutil.copy(GOLDEN / "legacy_keys" / "strings.in.py", tmp_path / "keys.py")
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "libcst.tool",
            "codemod",
            "-x",
            "xnnfold.rewriter.codemod.XnnfoldCodemod",
            "--no-format",
            "--hide-progress",
            "-j",
            "1",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[3])},
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    expected = (GOLDEN / "legacy_weight_norm" / "hifigan.out.py").read_bytes()
    assert (tmp_path / "model.py").read_bytes() == expected
    assert (tmp_path / "keys.py").read_bytes() == (
        GOLDEN / "legacy_keys" / "strings.in.py"
    ).read_bytes()
    assert "XNF101 legacy torch.nn.utils.weight_norm: migrated" in result.stderr
    assert "XNF402 attribute .weight_g" in result.stderr


_REAPPLY = b'''import torch
import torch.nn as nn
from torch.nn.utils import remove_weight_norm, weight_norm


def cycle(conv: nn.Conv1d) -> nn.Conv1d:
    """Remove weight norm, then put it back (as fine-tuning scripts do)."""
    remove_weight_norm(conv)
    return weight_norm(conv)
'''


@pytest.mark.needs_torch
def test_remove_then_reapply_keeps_working_after_migration() -> None:
    import torch

    outcome = transform_source(_REAPPLY, options=CodemodOptions())
    assert outcome.new_code is not None and b"parametrizations" in outcome.new_code
    namespaces: list[dict[str, object]] = [{}, {}]
    exec(compile(_REAPPLY, "legacy", "exec"), namespaces[0])
    exec(compile(outcome.new_code, "migrated", "exec"), namespaces[1])
    x = torch.randn(1, 4, 9)
    outputs = []
    for namespace, apply in zip(
        namespaces,
        (torch.nn.utils.weight_norm, torch.nn.utils.parametrizations.weight_norm),
    ):
        torch.manual_seed(0)
        conv = apply(torch.nn.Conv1d(4, 4, 3))
        conv = namespace["cycle"](conv)  # type: ignore[operator]
        outputs.append(conv(x))
    # The migrated cycle leaves a parametrized module again, computing the same output.
    assert torch.nn.utils.parametrize.is_parametrized(conv)
    torch.testing.assert_close(outputs[1], outputs[0], rtol=1e-6, atol=1e-6)
