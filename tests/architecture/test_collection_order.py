"""Test tiers and collection order (tests/conftest.py): a tier runs the tests of the tiers
below it and deselects the rest; the longest files are collected first, so two workers
finish together; a renamed file must not silently drop out of that order."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast, Optional

import pytest

from tests.conftest import LONGEST_FIRST, longest_first, split_by_tier, TIERS

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class _Item:
    nodeid: str
    markers: tuple[str, ...] = field(default=())

    def get_closest_marker(self, name: str) -> Optional[str]:
        return name if name in self.markers else None


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
    ordered = longest_first(cast(Any, [_Item(nodeid) for nodeid in ids]))
    assert [item.nodeid for item in ordered] == [ids[3], ids[4], ids[1], ids[0], ids[2], ids[5]]


_ITEMS = [
    _Item("t::plain"),
    _Item("t::slow", ("slow",)),
    _Item("t::campaign", ("campaign", "slow")),
]


@pytest.mark.parametrize(
    ("tier", "expected"),
    [
        ("fast", ["t::plain"]),
        ("full", ["t::plain", "t::slow"]),
        ("campaign", ["t::plain", "t::slow", "t::campaign"]),
    ],
)
def test_a_tier_runs_its_tests_and_those_of_the_tiers_below(tier: str, expected: list[str]) -> None:
    kept, left_out = split_by_tier(cast(Any, _ITEMS), tier)
    assert [item.nodeid for item in kept] == expected
    assert len(kept) + len(left_out) == len(_ITEMS)


def test_the_tiers_are_ordered_fast_full_campaign() -> None:
    assert TIERS == ("fast", "full", "campaign")
