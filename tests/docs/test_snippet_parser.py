"""How python blocks and their markers are read from Markdown (`tests/docs/_snippets.py`).

Standard library only, no lowering: these check the collector that the snippet tests rely
on, so a block can never drop out of the run unnoticed.
"""

from __future__ import annotations

import textwrap

import pytest

from tests.docs._snippets import parse, ROOT

DOC = ROOT / "docs" / "example.md"


def _parse(text: str) -> tuple[list, list[str]]:
    return parse(DOC, textwrap.dedent(text).lstrip("\n"))


def test_a_python_block_is_collected_with_its_fence_line() -> None:
    snippets, problems = _parse(
        """
        # Title

        ```python
        x = 1
        ```
        """
    )
    assert problems == []
    assert [(s.name, s.code) for s in snippets] == [("docs/example.md:3", "x = 1\n")]


def test_other_languages_are_not_collected() -> None:
    snippets, _ = _parse(
        """
        ```bash
        echo hi
        ```
        ```yaml
        a: 1
        ```
        """
    )
    assert snippets == []


def test_an_indented_block_in_a_list_item_is_dedented() -> None:
    snippets, _ = _parse(
        """
        - item:

          ```python
          if True:
              y = 2
          ```
        """
    )
    assert [s.code for s in snippets] == ["if True:\n    y = 2\n"]


def test_a_traceback_names_the_markdown_line() -> None:
    (snippet,), _ = _parse(
        """
        text

        ```python
        a = 1
        raise ValueError("boom")
        ```
        """
    )
    with pytest.raises(ValueError) as info:
        exec(snippet.compiled(), {})
    frame = info.traceback[-1]
    assert (str(frame.path), frame.lineno + 1) == (str(DOC), 5)


def test_a_skip_marker_opts_the_next_block_out_with_its_reason() -> None:
    (snippet,), problems = _parse(
        """
        <!-- snippet: skip needs a GPU -->
        ```python
        import cuda_thing
        ```
        """
    )
    assert problems == []
    assert (snippet.skip, snippet.requires) == ("needs a GPU", None)


def test_a_requires_marker_names_the_module() -> None:
    (snippet,), _ = _parse(
        """
        <!-- snippet: requires transformers -->

        ```python
        import transformers
        ```
        """
    )
    assert (snippet.skip, snippet.requires) == (None, "transformers")


def test_a_marker_applies_to_the_next_block_only() -> None:
    snippets, _ = _parse(
        """
        <!-- snippet: skip slow -->
        ```python
        a = 1
        ```
        ```python
        b = 2
        ```
        """
    )
    assert [s.skip for s in snippets] == ["slow", None]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("<!-- snippet: skipp typo -->\n```python\nx = 1\n```\n", "unknown snippet directive"),
        ("<!-- snippet: skip -->\n```python\nx = 1\n```\n", "needs a reason"),
        ("<!-- snippet: requires -->\n```python\nx = 1\n```\n", "needs a module name"),
        ("<!-- snippet: skip why -->\nsome prose\n```python\nx = 1\n```\n", "not followed"),
        ("<!-- snippet: skip why -->\n```bash\nls\n```\n", "precedes a ```bash block"),
        ("<!-- snippet: skip why -->\n", "not followed"),
        ("```python\nx = 1\n", "never closed"),
    ],
    ids=[
        "unknown-directive",
        "skip-without-reason",
        "requires-without-module",
        "prose-between",
        "other-language",
        "end-of-file",
        "unclosed-fence",
    ],
)
def test_a_malformed_marker_or_fence_is_a_problem(text: str, expected: str) -> None:
    _, problems = parse(DOC, text)
    assert len(problems) == 1 and expected in problems[0], problems


def test_a_marker_before_prose_does_not_reach_a_later_block() -> None:
    snippets, _ = parse(DOC, "<!-- snippet: skip why -->\nprose\n```python\nx = 1\n```\n")
    assert [s.skip for s in snippets] == [None]
