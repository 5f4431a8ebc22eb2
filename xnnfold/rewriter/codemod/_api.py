"""The contract between the codemod's rules (one file at a time) and its driver (a tree).

The rules (`_codemod_rules.transform_source`) take one file's bytes and return what they
found and, when a rewrite applies, the new bytes. The driver (`_codemod_driver`) walks
trees, reads and writes files atomically, runs workers and prints reports. Neither knows
the other's internals; this module holds the types they share.
"""

from __future__ import annotations

import dataclasses
from typing import Optional

__all__ = ["CodemodOptions", "FileOutcome", "Finding", "UnparseableSource"]


@dataclasses.dataclass(frozen=True)
class CodemodOptions:
    """What the rules may rewrite. Reporting is always on.

    Args:
        migrate_weight_norm: rewrite legacy ``torch.nn.utils.weight_norm`` (and its
            removals) to ``torch.nn.utils.parametrizations.weight_norm``.
        migrate_spectral_norm: also rewrite legacy ``spectral_norm`` (off by default:
            torch has no state_dict compatibility hook for it).
        wire_export: wrap models passed to ``torch.export.export`` in
            ``prepare_for_xnnpack`` and swap ``XnnpackPartitioner`` for
            ``XnnpackFoldingPartitioner`` in files that lower to XNNPACK.
        force: migrate even files that depend on legacy state_dict keys or attributes.
    """

    migrate_weight_norm: bool = True
    migrate_spectral_norm: bool = False
    wire_export: bool = True
    force: bool = False


@dataclasses.dataclass(frozen=True)
class Finding:
    """One report line: ``path:line:col: CODE message``.

    ``rewritten`` is True when the outcome's new code changes this site. ``message`` says
    what a rewrite did ("migrated to ..."); ``pending_message``, when set, says the same
    of a rewrite not written ("would migrate to ..."), for the modes that write nothing.
    """

    code: str
    line: int
    col: int
    message: str
    rewritten: bool = False
    pending_message: Optional[str] = None

    def text(self, *, written: bool = True) -> str:
        """The message for a run that wrote its rewrites (``written``) or did not."""
        return self.message if written or self.pending_message is None else self.pending_message

    def format(self, path: str, *, written: bool = True) -> str:
        return f"{path}:{self.line}:{self.col}: {self.code} {self.text(written=written)}"


@dataclasses.dataclass(frozen=True)
class FileOutcome:
    """The rules' answer for one file: findings, and new bytes or None if unchanged.

    ``pending`` is True when a rewrite applies. With ``transform_source(...,
    rewrite=False)`` (report and check modes, which never need the bytes) ``new_code``
    stays None and ``pending`` alone says whether the file would change. A rule that
    always returns the bytes may leave it False: the driver then compares ``new_code``
    with the file.
    """

    findings: tuple[Finding, ...]
    new_code: Optional[bytes] = None
    pending: bool = False


class UnparseableSource(Exception):
    """The file is not Python libcst can parse (syntax error, newer syntax, bad encoding).

    The driver reports it and leaves the file untouched.
    """

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason
