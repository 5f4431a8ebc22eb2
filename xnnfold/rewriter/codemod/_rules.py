"""The codemod's per-file rules: find computed-weight sites in source code and migrate them.

A model's source says which of its weights are computed: legacy hook-based
``torch.nn.utils.weight_norm`` / ``spectral_norm``, new-style parametrizations, weights
computed in ``forward``. xnnfold folds parametrizations; the legacy hooks it only marks, and
torch deprecates them. `transform_source` reads one file, reports every site with a stable
code, and rewrites what is safe to rewrite: legacy weight_norm (and its removals) to
``torch.nn.utils.parametrizations.weight_norm`` in every import and alias form, and export
sites that lower to XNNPACK to ``prepare_for_xnnpack`` / ``XnnpackFoldingPartitioner``.

Names are resolved through imports and aliases with libcst's `QualifiedNameProvider`, never
by spelling: a local function or class called ``weight_norm``, ``WN`` or ``norm`` is not a
site. Imports are added with `AddImportsVisitor` and legacy imports that became unused are
removed with `RemoveImportsVisitor`. A file is migrated completely or not at all: when it
reads legacy state_dict keys or attributes (which a migration renames), it is left alone
unless ``options.force``; a family (weight_norm, spectral_norm) is not migrated when one of
its removals cannot be mapped or is passed as a value, or its legacy import is conditional.
docs/codemod.md describes every rule.

This module is the entry point; the rules live in modules of one concern each: `_names`
(what the rules match), `_syntax` (helpers over libcst nodes), `_sites` (what the analysis
records), `_analysis` (the read-only pass), `_planning` (the findings and the plan),
`_rewrite` (the rewrite and its imports).

Every finding carries a stable code, registered in `_finding_codes` (XNF1xx to XNF4xx) and
listed in docs/codemod.md.
"""

from __future__ import annotations

from typing import Optional

import libcst as cst
from libcst.codemod import CodemodContext

from xnnfold.rewriter.codemod._api import CodemodOptions, FileOutcome, Finding, UnparseableSource
from xnnfold.rewriter.codemod._names import TRIGGERS
from xnnfold.rewriter.codemod._planning import Rules

__all__ = ["apply_rules", "transform_source"]


def _may_have_sites(text: str) -> bool:
    return TRIGGERS.search(text) is not None


def _run_rules(
    module: cst.Module,
    *,
    options: CodemodOptions,
    context: Optional[CodemodContext],
    rewrite: bool,
    text: Optional[str] = None,
) -> tuple[cst.Module, tuple[Finding, ...], bool]:
    """`apply_rules`, plus whether a rewrite is pending (``rewrite=False`` skips making it)."""
    # ``module.code`` regenerates the whole source: use the caller's text when it has it.
    if not _may_have_sites(module.code if text is None else text):
        return module, (), False
    rules = Rules(
        context if context is not None else CodemodContext(), options=options, rewrite=rewrite
    )
    updated = rules.transform_module(module)
    findings = tuple(
        Finding(
            site.code,
            site.line,
            site.col,
            site.message,
            rewritten=site.rewritten,
            pending_message=site.pending,
        )
        for site in sorted(rules.sites, key=lambda s: (s.line, s.col, s.code))
    )
    return updated, findings, rules.pending


def apply_rules(
    module: cst.Module, *, options: CodemodOptions, context: Optional[CodemodContext] = None
) -> tuple[cst.Module, tuple[Finding, ...]]:
    """Run every rule on a parsed module: the (possibly) rewritten module and the findings."""
    updated, findings, _ = _run_rules(module, options=options, context=context, rewrite=True)
    return updated, findings


def transform_source(code: bytes, *, options: CodemodOptions, rewrite: bool = True) -> FileOutcome:
    """Report and rewrite one file's source.

    Args:
        code: the file's bytes; its encoding cookie, line endings and indentation are kept.
        options: what may be rewritten (reporting is always on).
        rewrite: False when only the findings and whether a rewrite is pending are needed
            (report and check modes): the findings, their ``rewritten`` flags and
            ``pending`` are those of ``rewrite=True``, but ``new_code`` stays None. Skips
            the import rewriting, about half the cost of a file with a rewrite.

    Returns:
        The findings, sorted by position, and the new bytes, or ``new_code=None`` when
        nothing changes (``pending`` says whether something would).

    Raises:
        UnparseableSource: libcst cannot parse ``code`` (syntax error, syntax newer than
            libcst knows, or bytes that do not decode in the declared encoding).
    """
    try:
        module = cst.parse_module(code)
    except cst.ParserSyntaxError as error:
        raise UnparseableSource(
            f"syntax error: {error.message} (line {error.raw_line}, column {error.raw_column})"
        ) from error
    except (UnicodeDecodeError, LookupError, SyntaxError, ValueError) as error:
        raise UnparseableSource(f"cannot decode or parse: {error}") from error
    try:
        text: Optional[str] = code.decode(module.encoding)
    except (UnicodeDecodeError, LookupError):
        text = None
    updated, findings, pending = _run_rules(
        module, options=options, context=None, rewrite=rewrite, text=text
    )
    if not rewrite:
        return FileOutcome(findings=findings, new_code=None, pending=pending)
    new_code = code if updated is module else updated.bytes
    if new_code == code:
        return FileOutcome(findings=findings, new_code=None)
    return FileOutcome(findings=findings, new_code=new_code, pending=True)
