"""No two modules of `xnnfold/` share a base name (``__init__.py`` and ``__main__.py``
aside): jump-to-file and a grep for a file name then land on the one module meant, and a
module's tests, laid out under the same path below `tests/`, are named after it alone."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Final

ROOT: Final = Path(__file__).resolve().parents[2]
PACKAGE: Final = ROOT / "xnnfold"
SHARED_NAMES: Final = frozenset({"__init__.py", "__main__.py"})


def shared_base_names(modules: list[Path]) -> dict[str, list[str]]:
    """Each base name more than one of ``modules`` carries, with their paths."""
    by_name: dict[str, list[str]] = defaultdict(list)
    for path in modules:
        if path.name not in SHARED_NAMES:
            by_name[path.name].append(path.as_posix())
    return {name: sorted(paths) for name, paths in by_name.items() if len(paths) > 1}


def test_no_two_modules_share_a_base_name() -> None:
    modules = [path.relative_to(ROOT) for path in PACKAGE.rglob("*.py")]
    shared = shared_base_names(modules)
    assert not shared, f"rename each module by what it holds: {shared}"


def test_a_shared_base_name_is_found() -> None:
    modules = [
        Path("xnnfold/a/_tied.py"),
        Path("xnnfold/b/_tied.py"),
        Path("xnnfold/a/__init__.py"),
        Path("xnnfold/b/__init__.py"),
    ]
    assert shared_base_names(modules) == {"_tied.py": ["xnnfold/a/_tied.py", "xnnfold/b/_tied.py"]}
