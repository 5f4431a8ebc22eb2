"""The ```python blocks of the user documentation, and the markers that govern them.

README.md and every docs/*.md are read; each ```python block (a fence at any indent, so
blocks inside list items count) becomes one `Snippet`, named by its file and the line of its
opening fence. An HTML comment on the line just before a block changes how it runs:

- ``<!-- snippet: skip REASON -->``: the block is not run (a deliberate, visible opt-out;
  the tests count and list every one);
- ``<!-- snippet: requires MODULE -->``: the block runs only where ``MODULE`` is importable
  (an optional extra such as transformers); elsewhere its test is reported as skipped.

A marker that is not directly followed by a python block, an unknown directive, a missing
reason and an unclosed fence are `problems`, which a test turns into a failure, so a typo
never silently stops a block from running.

Standard library only: nothing here imports torch.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

__all__ = ["DOCUMENTS", "ROOT", "Snippet", "collect", "parse", "summary_lines"]

ROOT = Path(__file__).resolve().parents[2]

SKIP = "skip"
REQUIRES = "requires"
DIRECTIVES = (SKIP, REQUIRES)

_MARKER = re.compile(r"^\s*<!--\s*snippet:\s*(?P<directive>\S+)\s*(?P<argument>.*?)\s*-->\s*$")
_FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,})(?P<info>[^`]*)$")


def documents() -> tuple[Path, ...]:
    """README.md and docs/*.md, in a stable order."""
    return (ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")))


DOCUMENTS = documents()


@dataclass(frozen=True)
class Snippet:
    """One ```python block.

    Attributes:
        path: the Markdown file.
        line: 1-based line of the opening fence.
        code: the block's source, dedented to the fence's indent.
        skip: the reason of a ``skip`` marker, or None.
        requires: the module of a ``requires`` marker, or None.
    """

    path: Path
    line: int
    code: str
    skip: Optional[str] = None
    requires: Optional[str] = None

    @property
    def name(self) -> str:
        """``README.md:42``: the file (relative to the repository) and the fence's line."""
        return f"{self.path.relative_to(ROOT).as_posix()}:{self.line}"

    def compiled(self) -> object:
        """The code compiled so that a traceback names the Markdown file and its line."""
        # Blank lines up to the fence: line N of the traceback is line N of the file.
        return compile("\n" * self.line + self.code, str(self.path), "exec")


def _dedent(lines: list[str], indent: str) -> str:
    out = []
    for text in lines:
        out.append(text[len(indent) :] if text.startswith(indent) else text.lstrip())
    return "\n".join(out) + "\n"


def parse(path: Path, text: str) -> tuple[list[Snippet], list[str]]:
    """The python blocks of one Markdown text, and what is wrong with its markers."""
    snippets: list[Snippet] = []
    problems: list[str] = []
    lines = text.splitlines()
    where = path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else str(path)
    pending: Optional[tuple[int, str, str]] = None  # (line, directive, argument)
    index = 0
    while index < len(lines):
        number = index + 1
        marker = _MARKER.match(lines[index])
        if marker:
            if pending is not None:
                problems.append(
                    f"{where}:{pending[0]}: snippet marker not followed by a ```python block"
                )
            directive, argument = marker["directive"], marker["argument"]
            if directive not in DIRECTIVES:
                problems.append(
                    f"{where}:{number}: unknown snippet directive {directive!r} "
                    f"(expected one of {', '.join(DIRECTIVES)})"
                )
            elif not argument:
                what = "a reason" if directive == SKIP else "a module name"
                problems.append(f"{where}:{number}: 'snippet: {directive}' needs {what}")
            pending = (number, directive, argument)
            index += 1
            continue
        fence = _FENCE.match(lines[index])
        if not fence:
            if pending is not None and lines[index].strip():
                problems.append(
                    f"{where}:{pending[0]}: snippet marker not followed by a ```python block"
                )
                pending = None
            index += 1
            continue
        # An opening fence: find its closing fence (same or longer run of backticks).
        indent, ticks = fence["indent"], fence["fence"]
        language = fence["info"].strip().split(" ", 1)[0].lower()
        end = index + 1
        while end < len(lines):
            close = _FENCE.match(lines[end])
            if close and close["fence"].startswith(ticks) and not close["info"].strip():
                break
            end += 1
        if end == len(lines):
            problems.append(f"{where}:{number}: code fence never closed")
            break
        if language == "python":
            skip = requires = None
            if pending is not None:
                _, directive, argument = pending
                skip = argument if directive == SKIP else None
                requires = argument if directive == REQUIRES else None
            code = _dedent(lines[index + 1 : end], indent)
            snippets.append(Snippet(path, number, code, skip=skip, requires=requires))
        elif pending is not None:
            problems.append(
                f"{where}:{pending[0]}: snippet marker precedes a ```{language} block, "
                "not a ```python one"
            )
        pending = None
        index = end + 1
    if pending is not None:
        problems.append(f"{where}:{pending[0]}: snippet marker not followed by a ```python block")
    return snippets, problems


def collect(paths: tuple[Path, ...] = DOCUMENTS) -> tuple[list[Snippet], list[str]]:
    """Every python block of ``paths``, and every marker problem."""
    snippets: list[Snippet] = []
    problems: list[str] = []
    for path in paths:
        found, wrong = parse(path, path.read_text(encoding="utf-8"))
        snippets += found
        problems += wrong
    return snippets, problems


def summary_lines(snippets: list[Snippet]) -> list[str]:
    """What a run says at its end: how many blocks, and each one opted out or conditional."""
    opted_out = [s for s in snippets if s.skip is not None]
    needing = [s for s in snippets if s.requires is not None]
    lines = [
        f"{len(snippets)} python blocks: {len(opted_out)} opted out, "
        f"{len(needing)} run only where an optional module is installed"
    ]
    lines += [f"  opted out: {s.name}: {s.skip}" for s in opted_out]
    lines += [f"  requires {s.requires}: {s.name}" for s in needing]
    return lines
