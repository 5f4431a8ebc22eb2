"""The longest test files are collected first (tests/conftest.py), so two workers finish
together; a renamed file must not silently drop out of that order."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import pytest

from tests.conftest import LONGEST_FIRST, pytest_collection_modifyitems

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class _Item:
    nodeid: str


@pytest.mark.parametrize("path", LONGEST_FIRST)
def test_each_longest_file_exists(path: str) -> None:
    assert (ROOT / path).is_file(), f"tests/conftest.py names {path}, which does not exist"


def test_the_longest_files_go_first_and_every_file_keeps_its_order() -> None:
    ids = [
        "tests/a/test_short.py::test_one",
        f"{LONGEST_FIRST[1]}::test_x",
        "tests/a/test_short.py::test_two",
        f"{LONGEST_FIRST[0]}::test_y[0]",
        f"{LONGEST_FIRST[0]}::test_y[1]",
        "tests/b/test_other.py::test_three",
    ]
    items = [_Item(nodeid) for nodeid in ids]
    pytest_collection_modifyitems(cast(Any, None), cast(Any, items))
    assert [item.nodeid for item in items] == [ids[3], ids[4], ids[1], ids[0], ids[2], ids[5]]
