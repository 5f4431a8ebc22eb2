"""The records the analysis keeps: a site (`Site`, one finding and what its rewrite
needs), a ``forward`` being read (`Forward`) and the leaves of a weight expression
(`Leaves`)."""

from __future__ import annotations

import dataclasses
from typing import Optional

import libcst as cst

from xnnfold.rewriter.codemod._names import Legacy


@dataclasses.dataclass
class Site:
    code: str
    line: int
    col: int
    message: str
    node: Optional[cst.CSTNode] = None
    legacy: Optional[Legacy] = None
    # For legacy references: is the node an Attribute on an expression for torch.nn.utils
    # (``nn.utils.weight_norm``), so that ``.parametrizations.`` can be inserted in place?
    on_utils: bool = False
    call: Optional[cst.Call] = None  # the call this reference is the callee of
    rewritten: bool = False
    # The message of a rewritten site in a run that writes nothing ("would migrate").
    pending: Optional[str] = None

    def planned(self, done: str, pending: str) -> None:
        """Say what the rewrite of this site does, in both tenses."""
        self.message, self.pending = done, pending

    def add_note(self, note: str) -> None:
        self.message += note
        if self.pending is not None:
            self.pending += note


@dataclasses.dataclass
class Forward:
    self_name: Optional[str]
    inputs: frozenset[str]
    env: dict[str, list[cst.BaseExpression]]


@dataclasses.dataclass
class Leaves:
    attrs: set[str] = dataclasses.field(default_factory=set)
    inputs: set[str] = dataclasses.field(default_factory=set)
    standardization: bool = False
