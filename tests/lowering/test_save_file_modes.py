"""`xnnfold.save` gives each file the mode ``open(path, "wb")`` would, and replaces it whole.

A ``.pte`` or ``.ptd`` copied into an app bundle, served, or read by another user or a CI
step must be as readable as the one ``et.write_to_file`` writes: a new file gets ``0o666``
less the umask, a file replaced keeps its mode. The reference in each test is what
``open(..., "wb")`` and executorch's own writers give in the same folder under the same
umask.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any, Iterator

import pytest
import torch

import xnnfold
from xnnfold.fixtures import TIED_LM

pytestmark = pytest.mark.runtime


@pytest.fixture(scope="module")
def tied() -> Any:
    """A program with a tied table stored once: a ``.pte`` and a ``.ptd``."""
    torch.manual_seed(0)
    return xnnfold.to_executorch(TIED_LM.model().eval(), TIED_LM.inputs(), tie_tables=True)


@pytest.fixture(params=[0o022, 0o077], ids=["umask022", "umask077"])
def umask(request: pytest.FixtureRequest) -> Iterator[int]:
    previous = os.umask(request.param)
    try:
        yield request.param
    finally:
        os.umask(previous)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def _executorch_modes(program: Any, folder: Path) -> tuple[int, int]:
    """The modes of the ``.pte`` ``et.write_to_file`` writes into an ``open(..., "wb")``
    file and of the ``.ptd`` ``write_tensor_data_to_file`` writes, in ``folder``."""
    folder.mkdir()
    with open(folder / "reference.pte", "wb") as file:
        program.write_to_file(file)
    program.write_tensor_data_to_file(str(folder))
    (ptd,) = folder.glob("*.ptd")
    return _mode(folder / "reference.pte"), _mode(ptd)


def test_new_files_get_the_mode_open_gives(tied: Any, umask: int, tmp_path: Path) -> None:
    pte, ptd = xnnfold.save(tied, tmp_path / "model.pte")

    expected = 0o666 & ~umask
    assert (_mode(pte), _mode(ptd)) == (expected, expected)
    assert (_mode(pte), _mode(ptd)) == _executorch_modes(tied, tmp_path / "reference")


def test_replaced_files_keep_their_modes(tied: Any, tmp_path: Path) -> None:
    pte, ptd = tmp_path / "model.pte", tmp_path / "model.ptd"
    for path, mode in ((pte, 0o640), (ptd, 0o604)):
        path.write_bytes(b"old")
        path.chmod(mode)

    assert xnnfold.save(tied, pte) == (pte, ptd)

    assert (_mode(pte), _mode(ptd)) == (0o640, 0o604)
    assert pte.read_bytes() == tied.buffer
    assert ptd.stat().st_size > len(b"old")


def test_a_failed_write_leaves_the_previous_file_and_no_temporary(
    tied: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pte = tmp_path / "model.pte"
    pte.write_bytes(b"previous program")

    def fail_half_way(file: Any) -> None:
        file.write(b"partial")
        raise OSError("disk full")

    monkeypatch.setattr(tied, "write_to_file", fail_half_way)
    with pytest.raises(OSError, match="disk full"):
        xnnfold.save(tied, pte)

    assert pte.read_bytes() == b"previous program"
    assert sorted(p.name for p in tmp_path.iterdir() if p.suffix == ".tmp") == []


def test_a_linked_pte_and_ptd_are_written_through_their_links(tied: Any, tmp_path: Path) -> None:
    """As ``open(link, "wb")`` writes: the files the links name get the bytes (one in
    another folder), and the links stay links."""
    elsewhere = tmp_path / "store"
    elsewhere.mkdir()
    pte, ptd = tmp_path / "model.pte", tmp_path / "model.ptd"
    for link, target in ((pte, tmp_path / "real.pte"), (ptd, elsewhere / "real.ptd")):
        target.write_bytes(b"old")
        link.symlink_to(target)

    xnnfold.save(tied, pte)

    assert pte.is_symlink() and ptd.is_symlink()
    assert (tmp_path / "real.pte").read_bytes() == tied.buffer
    assert (elsewhere / "real.ptd").stat().st_size > len(b"old")
    assert sorted(p.name for p in elsewhere.iterdir()) == ["real.ptd"]
    (logits,) = xnnfold.run_pte(pte.read_bytes(), list(TIED_LM.inputs()), data_path=ptd)
    assert torch.isfinite(logits).all()
