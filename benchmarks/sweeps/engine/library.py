"""What a sweep asks of the library it sweeps: its classes, and each one built and fed."""

from __future__ import annotations

import importlib.util
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Sequence

# Source text that computes a GEMM weight (strong), or may (weak): a group whose module
# has it is swept earlier. Only the order depends on it; what counts is `explain`'s answer.
STRONG = re.compile(
    r"weight_norm|spectral_norm|parametriz|standardiz|StdConv"
    r"|weight\.t\(\)|weight\.T\b|weight\.transpose"
)
WEAK = re.compile(r"functional\.conv[123]d\(|F\.conv[123]d\(|functional\.linear\(|F\.linear\(")


class OutOfReach(Exception):
    """A class the library could not build, feed or export: out of the sweep's reach.

    ``stage`` is where it stopped ("build", "inputs", "export", "import"); the message is
    the model's own error, recorded as the reason; ``tried`` what else failed (each
    config level's error, say).
    """

    def __init__(self, stage: str, reason: str, *, tried: Sequence[str] = ()) -> None:
        super().__init__(reason)
        self.stage = stage
        self.reason = reason
        #: What else was tried and why it failed, recorded beside the reason.
        self.tried = tuple(tried)


@dataclass(frozen=True)
class Built:
    """A model in eval mode with keyword inputs it runs on eagerly.

    Attributes:
        model: the module to export; called as ``model(**inputs)``.
        inputs: the keyword inputs, tensors only.
        expected: the tensors of its eager output on them (`engine.screen.leaves`), or
            None where the library did not run it (the worker runs it for a candidate:
            export alone traces a model with fake tensors, which costs no arithmetic).
        facts: what the result line records about how it was built (config level,
            input size, ...), JSON-serializable.
    """

    model: Any
    inputs: dict[str, Any]
    expected: Optional[list[Any]]
    facts: dict[str, Any] = field(default_factory=dict)


class Library:
    """One library's classes for the sweep; subclasses fill in the abstract parts.

    A class is named by ``(group, name)``: the group is the unit of architecture (a
    transformers modeling file, a timm model module) whose classes share code, so a
    partial run covers every group first and stock is compared once per group unless
    `stock_for_every_class`.
    """

    #: What the report calls the library and its classes.
    title: str = ""
    noun: str = "class"
    nouns: str = "classes"
    #: The JSONL results and the markdown table, in the library's subpackage.
    results: Path
    table: Path
    #: The module a worker runs with ``python -m`` (it calls `main` on this library).
    command: str = ""
    #: Lower every candidate with the stock partitioner too, not only each group's first
    #: with a computed-weight GEMM.
    stock_for_every_class: bool = False
    #: Sweep each group's first class before any group's second (a partial run covers
    #: every group); else every class of the likely groups first.
    group_heads_first: bool = True
    #: The keys of a result line (of `Built.facts`) that say which model was built: a
    #: retime hands them to `build` to lower that model again.
    build_facts: tuple[str, ...] = ()

    def discover(self) -> list[tuple[str, str]]:
        """Every ``(group, name)`` to sweep, in a stable order."""
        raise NotImplementedError

    def order(self, classes: list[tuple[str, str]]) -> list[tuple[str, str]]:
        """The groups whose module's source computes a GEMM weight first, then those whose
        source may (`STRONG`, `WEAK`), the rest last; where `group_heads_first`, each
        group's first class before any group's others (a partial run covers every
        architecture, the likely ones first). A group is a module name here; only the
        order depends on it."""
        rank: dict[str, int] = {}
        for group, _ in classes:
            if group not in rank:
                spec = importlib.util.find_spec(group)
                origin = spec.origin if spec is not None else None
                text = Path(origin).read_text() if origin else ""
                rank[group] = 0 if STRONG.search(text) else 1 if WEAK.search(text) else 2
        seen: set[str] = set()
        ranked = []
        for group, name in classes:
            head = group in seen
            seen.add(group)
            key = (head, rank[group]) if self.group_heads_first else (rank[group], head)
            ranked.append((key, (group, name)))
        return [item for _, item in sorted(ranked, key=lambda pair: pair[0])]

    def build(self, group: str, name: str, *, facts: Optional[dict[str, Any]] = None) -> Built:
        """``name`` built with random weights and fed: raises `OutOfReach` with the model's
        own error where no config or input the library tries runs eagerly. ``facts``, an
        earlier result line's (`Built.facts`), asks for the model that line records (a
        retime lowers what the sweep lowered, whatever the library tries first today);
        a library whose builds have one form ignores it."""
        raise NotImplementedError

    def versions(self) -> str:
        """The library's, torch's and executorch's versions (and those of any package its
        classes need), for the report's header and each result line's ``stack``: the
        report names the classes swept under a stack other than its own."""
        raise NotImplementedError

    def method(self) -> str:
        """How the classes are found, built and fed, for the report's header."""
        return ""

    def extra_path(self, built: Built, expected: list[Any]) -> Optional[dict[str, Any]]:
        """A second way the library lowers a model (transformers' exporter): the result
        of each partitioner under ``"stock"`` and ``"xnnfold"``, or None where it has none.
        Called for the classes compared with stock."""
        return None

    def extra_report(self, found: list[dict[str, Any]]) -> list[str]:
        """Markdown lines for `extra_path`'s results."""
        return []
