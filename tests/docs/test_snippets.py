"""Every ```python block of README.md and docs/*.md runs, and a broken one fails the suite.

One test per block, named by its file and the line of its opening fence
(``test_snippet_runs[README.md:42]``). Each block runs in a fresh namespace, in a fresh
temporary directory (a block may write a ``.pte``), in this process: the blocks build the
small seeded models of `xnnfold.fixtures` or their own, never download anything, and
sharing the process keeps torch and executorch imported once. A traceback names the
Markdown file and line. Markers (``<!-- snippet: skip REASON -->``,
``<!-- snippet: requires MODULE -->``) are described in `tests/docs/_snippets.py`.
"""

from __future__ import annotations

import importlib.util

import pytest

from tests.docs._snippets import collect, Snippet

SNIPPETS, PROBLEMS = collect()
# Opting a block out hides a broken example; the few there are must be deliberate.
MAX_OPTED_OUT = 2


def test_the_documents_hold_python_blocks() -> None:
    assert len(SNIPPETS) >= 5, f"only {len(SNIPPETS)} python blocks found in the documents"


def test_every_snippet_marker_is_well_formed() -> None:
    assert not PROBLEMS, "\n".join(PROBLEMS)


def test_opted_out_blocks_stay_few() -> None:
    opted_out = [f"{s.name}: {s.skip}" for s in SNIPPETS if s.skip is not None]
    assert len(opted_out) <= MAX_OPTED_OUT, (
        f"{len(opted_out)} python blocks opted out of running (at most {MAX_OPTED_OUT}):\n"
        + "\n".join(opted_out)
    )


@pytest.mark.parametrize("snippet", SNIPPETS, ids=[s.name for s in SNIPPETS])
def test_snippet_runs(
    snippet: Snippet, tmp_path: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    if snippet.skip is not None:
        pytest.skip(f"opted out in {snippet.name}: {snippet.skip}")
    if snippet.requires is not None and importlib.util.find_spec(snippet.requires) is None:
        pytest.skip(f"{snippet.name} needs {snippet.requires}, which is not installed here")
    monkeypatch.chdir(tmp_path)
    namespace = {"__name__": "__main__", "__file__": str(snippet.path)}
    exec(snippet.compiled(), namespace)
