"""``xnnfold export`` writes its ``.pte`` and ``.ptd`` with the modes ``open(path, "wb")`` gives.

The command writes through `xnnfold.save`; these tests hold the command to it: a new file
gets ``0o666`` less the umask, as the file ``et.write_to_file`` writes into an
``open(..., "wb")`` in the same folder, and a file replaced keeps its mode.
"""

from __future__ import annotations

import os
import stat
import textwrap
from pathlib import Path
from typing import Iterator

import pytest

from xnnfold.cli import main

# The full tier, like the command's other tests; tests/lowering covers the writer in the fast one.
pytestmark = [pytest.mark.runtime, pytest.mark.slow]

MODELS = textwrap.dedent(
    """
    import torch

    from xnnfold.fixtures import TIED_LM


    def tied():
        torch.manual_seed(0)
        return TIED_LM.model().eval(), TIED_LM.inputs()
    """
)


@pytest.fixture
def models(tmp_path: Path) -> str:
    path = tmp_path / "file_mode_models.py"
    path.write_text(MODELS)
    return f"{path}:tied"


@pytest.fixture(params=[0o022, 0o077], ids=["umask022", "umask077"])
def umask(request: pytest.FixtureRequest) -> Iterator[int]:
    previous = os.umask(request.param)
    try:
        yield request.param
    finally:
        os.umask(previous)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_new_files_get_the_mode_open_gives(models: str, umask: int, tmp_path: Path) -> None:
    pte, ptd = tmp_path / "model.pte", tmp_path / "model.ptd"
    assert main(["export", models, "-o", str(pte)]) == 0

    with open(tmp_path / "reference", "wb"):
        pass
    assert _mode(pte) == _mode(ptd) == _mode(tmp_path / "reference") == 0o666 & ~umask


def test_replaced_files_keep_their_modes(models: str, tmp_path: Path) -> None:
    pte, ptd = tmp_path / "model.pte", tmp_path / "model.ptd"
    for path, mode in ((pte, 0o640), (ptd, 0o604)):
        path.write_bytes(b"old")
        path.chmod(mode)

    assert main(["export", models, "-o", str(pte)]) == 0

    assert (_mode(pte), _mode(ptd)) == (0o640, 0o604)
    assert pte.read_bytes() != b"old" and ptd.read_bytes() != b"old"
