"""Finding the files a codemod run processes (`collect`): PATH arguments expanded into
files, skipped paths and pruned directories.

Walking (documented in ``xnnfold codemod --help``):
- a PATH that is a file is processed whatever its suffix (``.ipynb`` notebooks excepted);
  a directory is walked for ``*.py`` files in sorted order;
- inside a walk, hidden entries (name starting with ``.``), the directory names in
  `PRUNED_DIR_NAMES`, ``*.egg-info`` and any directory holding a ``pyvenv.cfg``
  (a virtualenv, whatever its name) are pruned; a PATH given explicitly is never pruned;
- symlinks met inside a walk are never followed, and are listed as skipped with the
  reason (target scanned under its own path, outside the scanned paths, a directory,
  dangling). Following them would either edit a file twice or edit files outside the
  tree, and replacing a file through ``os.replace`` would turn the link into a regular
  file. A PATH given explicitly as a symlink is followed (the user named it), and its
  target is rewritten in place, the link left intact;
- two paths reaching the same file (explicit symlink, hard link, overlapping PATHs) are
  processed once, under a path that is not a symlink if there is one, else the first in
  sorted order; the others are skipped. (A rewrite replaces the file, so other hard links
  keep the old content.)"""

from __future__ import annotations

import dataclasses
import os
import stat
from typing import Final, Optional, Sequence

from xnnfold.rewriter.codemod._report import SkippedPath

# Directory names pruned inside a walk (hidden ones, starting with ".", are pruned too):
# caches, build output, vendored environments. Virtualenvs of any name are recognised by
# their pyvenv.cfg instead of being listed here.
PRUNED_DIR_NAMES: Final[frozenset[str]] = frozenset(
    {
        "__pycache__",
        "__pypackages__",
        "_build",
        "build",
        "buck-out",
        "dist",
        "node_modules",
        "site-packages",
        "venv",
    }
)
_VENV_MARKER: Final = "pyvenv.cfg"
_NOTEBOOK_SUFFIX: Final = ".ipynb"
_PY_SUFFIX: Final = ".py"


@dataclasses.dataclass(frozen=True)
class Target:
    """A file to process: the path shown to the user and the path written to."""

    path: str
    write_path: str


class UsageError(Exception):
    pass


# -- walking -------------------------------------------------------------------------------


def _identity(st: os.stat_result) -> tuple[int, int]:
    return (st.st_dev, st.st_ino)


def _is_pruned_dir(entry: os.DirEntry[str]) -> bool:
    name = entry.name
    if name.startswith(".") or name in PRUNED_DIR_NAMES or name.endswith(".egg-info"):
        return True
    return os.path.exists(os.path.join(entry.path, _VENV_MARKER))


def collect(
    paths: Sequence[str],
) -> tuple[list[Target], list[SkippedPath], list[str]]:
    """Expand PATH arguments into files to process, skipped paths and pruned directories."""
    files: dict[str, Target] = {}  # display path -> target
    notebooks: list[str] = []
    links: list[str] = []  # symlinks met inside walks, classified once all files are known
    pruned: list[str] = []
    roots: list[str] = []

    def walk(directory: str) -> None:
        try:
            entries = sorted(os.scandir(directory), key=lambda e: e.name)
        except OSError as error:
            pruned.append(f"{directory} (cannot list: {error.strerror})")
            return
        for entry in entries:
            if entry.is_symlink():
                if not entry.name.startswith("."):
                    links.append(entry.path)
            elif entry.is_dir(follow_symlinks=False):
                if _is_pruned_dir(entry):
                    pruned.append(entry.path)
                else:
                    walk(entry.path)
            elif entry.name.startswith("."):
                continue
            elif entry.name.endswith(_PY_SUFFIX):
                files.setdefault(entry.path, Target(entry.path, entry.path))
            elif entry.name.endswith(_NOTEBOOK_SUFFIX):
                notebooks.append(entry.path)

    for path in paths:
        if not os.path.exists(path):
            raise UsageError(f"{path}: no such file or directory")
        if os.path.isdir(path):
            roots.append(os.path.realpath(path))
            walk(path)
        elif path.endswith(_NOTEBOOK_SUFFIX):
            notebooks.append(path)
        else:
            # An explicit symlink is followed; the replace must hit the target, not the link.
            write_path = os.path.realpath(path) if os.path.islink(path) else path
            files.setdefault(path, Target(path, write_path))

    skipped = [
        SkippedPath(p, "notebook: .ipynb files are not rewritten (convert to .py first)")
        for p in dict.fromkeys(notebooks)
    ]
    # One file reached by two paths is processed once, under its own path rather than a
    # symlink's, else under the first path in sorted order.
    targets: list[Target] = []
    seen: dict[tuple[int, int], str] = {}
    for display in sorted(files, key=lambda p: (files[p].write_path != p, p)):
        target = files[display]
        try:
            ident = _identity(os.stat(target.write_path))
        except OSError as error:
            skipped.append(SkippedPath(display, f"cannot stat: {error.strerror}"))
            continue
        if ident in seen:
            skipped.append(SkippedPath(display, f"same file as {seen[ident]}, processed once"))
            continue
        seen[ident] = display
        targets.append(target)

    for link in dict.fromkeys(links):
        reason = _symlink_reason(link, seen, roots)
        if reason is not None:
            skipped.append(SkippedPath(link, reason))
    skipped.sort(key=lambda s: s.path)
    return targets, skipped, sorted(pruned)


def _symlink_reason(
    link: str, seen: dict[tuple[int, int], str], roots: Sequence[str]
) -> Optional[str]:
    """Why a symlink met in a walk is skipped, or None if it is no Python file or directory."""
    target = os.readlink(link)
    try:
        st = os.stat(link)
    except OSError:
        return f"dangling symlink to {target}" if link.endswith(_PY_SUFFIX) else None
    if stat.S_ISDIR(st.st_mode):
        real = os.path.realpath(link)
        inside = any(real == root or real.startswith(root + os.sep) for root in roots)
        where = "scanned under its own path" if inside else "outside the scanned paths"
        return f"symlink to directory {target} ({where}); symlinks are not followed"
    if not (link.endswith(_PY_SUFFIX) or link.endswith(_NOTEBOOK_SUFFIX)):
        return None
    ident = _identity(st)
    if ident in seen:
        return f"symlink to {target}, scanned as {seen[ident]}; symlinks are not followed"
    return (
        f"symlink to {target} (outside the scanned paths); symlinks are not followed, "
        "pass the target itself to rewrite it"
    )
