"""Collection order for two workers: the test files that take minutes go first.

CI runs ``-n 2 --dist loadfile --no-loadscope-reorder``: each file stays whole on one
worker (its module-level lowerings are shared by its tests), and files are handed out in
collection order. xdist's default order (most tests first) is not longest first: the
three longest files landed on one worker, which ran minutes after the other had
finished; longest first, the short files fill in around them and both workers finish
together.

Standard library only: the codemod's tests run where torch is not installed.
"""

from __future__ import annotations

import pytest

# Longest first, as measured by `pytest --junitxml` on the default stack (minutes of one
# worker's time; the rest of the files take under 2.5 each).
LONGEST_FIRST = (
    "tests/end_to_end/test_differential.py",  # ~14
    "tests/partition/test_decompositions.py",  # ~8
    "tests/partition/test_long_computations.py",  # ~4
    "tests/end_to_end/test_generated_models.py",  # ~3.5
    "tests/end_to_end/test_architectures.py",  # ~3
    "tests/partition/test_shared.py",  # ~2.5
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    rank = {path: index for index, path in enumerate(LONGEST_FIRST)}
    # Stable: every file keeps its tests' order, and the other files keep theirs.
    items.sort(key=lambda item: rank.get(item.nodeid.split("::", 1)[0], len(rank)))
