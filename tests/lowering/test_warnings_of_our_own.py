"""A user's script that imports and calls xnnfold prints nothing a stock script does not.

Importing executorch prints upstream noise (torchao's CUDA-only extensions, torch's pytree
notice, torch's LeafSpec deprecation, executorch's cpuinfo lines: docs/limits.md lists
each one with its source). These tests run two scripts in fresh interpreters, the way a
user runs one: the stock flow (export, lower with `XnnpackPartitioner`, write, run) and the
same model through xnnfold (the drop-in, `explain`, `save`, the one-call API,
`run_pte`). Every line the xnnfold script prints to stderr must also be printed by the
stock one: a warning or log line xnnfold causes fails here. ``-W default`` shows the
deprecation warnings Python hides outside ``__main__`` too.
"""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.runtime

ROOT = Path(__file__).resolve().parents[2]

MODEL = """
import torch
from torch import nn
from torch.nn.utils.parametrizations import weight_norm

torch.manual_seed(0)
model = nn.Sequential(
    weight_norm(nn.Conv1d(8, 16, 3, padding=1)), nn.ReLU(), weight_norm(nn.Linear(32, 4))
).eval()
inputs = (torch.randn(1, 8, 32),)
"""

STOCK = (
    MODEL
    + """
from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
from executorch.exir import to_edge_transform_and_lower
from executorch.runtime import Runtime

edge = to_edge_transform_and_lower(
    torch.export.export(model, inputs), partitioner=[XnnpackPartitioner()]
)
with open("stock.pte", "wb") as file:
    edge.to_executorch().write_to_file(file)
program = Runtime.get().load_program("stock.pte")
program.load_method("forward").execute(list(inputs))
"""
)

XNNFOLD = (
    MODEL
    + """
from executorch.exir import to_edge_transform_and_lower
from executorch.runtime import Runtime

import xnnfold
from xnnfold import prepare_for_xnnpack, XnnpackFoldingPartitioner

edge = to_edge_transform_and_lower(
    torch.export.export(prepare_for_xnnpack(model), inputs),
    partitioner=[XnnpackFoldingPartitioner()],
)
print(xnnfold.explain(edge))
xnnfold.save(edge.to_executorch(), "model.pte")
program = Runtime.get().load_program("model.pte")
program.load_method("forward").execute(list(inputs))
et = xnnfold.to_executorch(model, inputs)
xnnfold.run_pte(et.buffer, inputs)
"""
)

# What differs between two runs of one line: torch's log prefix (date, time, thread id)
# and where a warning was raised (the script's own lines differ).
_LOG_PREFIX = re.compile(r"^[IWEF]\d{4} [\d:.]+ \d+ ")
_WARNING_AT = re.compile(r"^\S+:\d+: (?=\w+Warning: )")


def _stderr_lines(script: str, folder: Path) -> set[str]:
    """The lines ``script`` prints to stderr run as a user runs it, the source echo of
    each warning left out and the parts that differ from run to run removed."""
    folder.mkdir()
    (folder / "script.py").write_text(textwrap.dedent(script))
    run = subprocess.run(
        [sys.executable, "-W", "default", "script.py"],
        cwd=folder,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr
    return {
        _WARNING_AT.sub("", _LOG_PREFIX.sub("", line))
        for line in run.stderr.splitlines()
        if line.strip() and not line.startswith("  ")
    }


def test_importing_xnnfold_prints_nothing() -> None:
    run = subprocess.run(
        [sys.executable, "-W", "error", "-c", "import xnnfold"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert (run.returncode, run.stderr) == (0, "")


# Two fresh interpreters, each importing executorch and lowering: the full tier.
@pytest.mark.slow
def test_a_script_through_xnnfold_prints_only_what_stock_prints(tmp_path: Path) -> None:
    stock = _stderr_lines(STOCK, tmp_path / "stock")
    ours = _stderr_lines(XNNFOLD, tmp_path / "xnnfold")

    assert sorted(ours - stock) == []
