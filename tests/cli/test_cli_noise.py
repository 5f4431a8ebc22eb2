"""The ``xnnfold`` command keeps known-harmless upstream import noise out of its output.

Only the records in `xnnfold.cli._noise.KNOWN_HARMLESS` are dropped, only while a command runs,
and ``--verbose`` shows them; anything else torchao or torch logs still reaches stderr.
"""

from __future__ import annotations

import logging
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from xnnfold.cli._noise import quiet_upstream_noise

TORCHAO_NOISE = (
    "Failed to load /venv/lib/python3.11/site-packages/torchao/_C_mxfp8.cpython-310-"
    "x86_64-linux-gnu.so: Could not load this library"
)
PYTREE_NOISE = (
    "<enum 'KernelPreference'> is an Enum subclass and is now natively supported by "
    "torch.compile as an opaque value type."
)


@pytest.fixture
def records() -> list[logging.LogRecord]:
    seen: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen.append(record)

    handler = Keep()
    for name in ("torchao", "torch.utils._pytree"):
        logging.getLogger(name).addHandler(handler)
    yield seen
    for name in ("torchao", "torch.utils._pytree"):
        logging.getLogger(name).removeHandler(handler)


def test_known_harmless_records_are_dropped(records: list[logging.LogRecord]) -> None:
    with quiet_upstream_noise():
        logging.getLogger("torchao").warning(TORCHAO_NOISE)
        logging.getLogger("torch.utils._pytree").warning(PYTREE_NOISE)
    assert records == []


def test_other_records_of_the_same_loggers_pass(records: list[logging.LogRecord]) -> None:
    with quiet_upstream_noise():
        logging.getLogger("torchao").warning("Failed to load /my/own/extension.so: boom")
        logging.getLogger("torchao").warning(
            "Failed to load /venv/site-packages/torchao/_C.abi3.so: undefined symbol"
        )
        logging.getLogger("torchao").error("quantization failed")
        logging.getLogger("torch.utils._pytree").warning("something else")
    assert [r.getMessage() for r in records] == [
        "Failed to load /my/own/extension.so: boom",
        "Failed to load /venv/site-packages/torchao/_C.abi3.so: undefined symbol",
        "quantization failed",
        "something else",
    ]


def test_the_filter_is_removed_when_the_command_ends(records: list[logging.LogRecord]) -> None:
    with quiet_upstream_noise():
        pass
    logging.getLogger("torchao").warning(TORCHAO_NOISE)
    assert [r.getMessage() for r in records] == [TORCHAO_NOISE]


MODEL = textwrap.dedent(
    """
    import torch
    from torch import nn
    from torch.nn.utils.parametrizations import weight_norm

    def tiny():
        torch.manual_seed(0)
        return weight_norm(nn.Linear(4, 3)).eval(), (torch.randn(2, 4),)
    """
)


def _export(tmp_path: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "tiny_model.py").write_text(MODEL)
    return subprocess.run(
        [sys.executable, "-m", "xnnfold", "export", *flags, "tiny_model.py:tiny", "-o", "m.pte"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.runtime
def test_export_prints_no_upstream_import_noise(tmp_path: Path) -> None:
    quiet = _export(tmp_path)
    assert quiet.returncode == 0, quiet.stderr
    assert "torchao/_C" not in quiet.stderr and "Enum subclass" not in quiet.stderr
    assert "FutureWarning" not in quiet.stderr and "DeprecationWarning" not in quiet.stderr
    assert "1 delegated" in quiet.stdout


@pytest.mark.runtime
@pytest.mark.slow
def test_verbose_shows_what_the_default_hides(tmp_path: Path) -> None:
    verbose = _export(tmp_path, "--verbose")
    assert verbose.returncode == 0, verbose.stderr
    # On this stack torchao's CUDA-only extensions fail to load at import; if a release
    # stops logging it there is nothing to hide, and the default-run test still holds.
    probe = subprocess.run(
        [sys.executable, "-c", "import torchao"], capture_output=True, text=True, timeout=300
    )
    if "Failed to load" in probe.stderr:
        assert "Failed to load" in verbose.stderr
    assert "1 delegated" in verbose.stdout
