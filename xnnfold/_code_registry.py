"""The registry of every stable code xnnfold reports, with no dependency at all.

Two families share it: the codemod's findings, XNF1xx to XNF4xx (registered in
`xnnfold/rewriter/codemod/_finding_codes.py`, documented in docs/codemod.md), and the reasons a
GEMM is not folded or not delegated, XNF5xx (`xnnfold/passes/_reason_codes.py`,
docs/reasons.md). A user greps a log or a report for a code, filters `explain` rows or
``--report`` JSON by one, or looks one up in the docs; so a code names one rule, in one
family, for good. `register` refuses a code or a name registered before, and codes are
never reused or renumbered. The codemod imports this without torch or executorch.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Final

__all__ = ["CODES", "ReasonCode", "family", "register"]


@dataclass(frozen=True)
class ReasonCode:
    """A registered code: ``XNF501``, its short name (``run-time``) and what it means."""

    code: str
    name: str
    summary: str

    # One object per code: copies and pickles (node meta is deep-copied) are that object.
    def __copy__(self) -> ReasonCode:
        return self

    def __deepcopy__(self, memo: dict[int, object]) -> ReasonCode:
        return self

    def __reduce__(self) -> tuple[object, ...]:
        return (_registered, (self.code,))


_CODES: Final[dict[str, ReasonCode]] = {}
# Every registered code, by its code, read-only.
CODES: Final[Mapping[str, ReasonCode]] = MappingProxyType(_CODES)


def _registered(code: str) -> ReasonCode:
    return _CODES[code]


def register(code: str, name: str, summary: str) -> ReasonCode:
    """Register ``code`` under ``name``; refuses a code or a name already registered."""
    taken = _CODES.get(code) or next((c for c in _CODES.values() if c.name == name), None)
    if taken is not None:
        raise ValueError(
            f"xnnfold: code {code} '{name}' clashes with the registered {taken.code} "
            f"'{taken.name}'; codes and names are never reused"
        )
    registered = _CODES[code] = ReasonCode(code, name, summary)
    return registered


def family(*prefixes: str) -> Mapping[str, ReasonCode]:
    """The codes registered so far that start with one of ``prefixes`` (``"XNF5"``), in
    the order they were registered."""
    return MappingProxyType({code: c for code, c in _CODES.items() if code.startswith(prefixes)})
