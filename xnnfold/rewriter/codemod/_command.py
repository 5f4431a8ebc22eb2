"""xnnfold's codemod as a libcst command, for ``python -m libcst.tool codemod``.

libcst's tool looks a command up inside its configured command packages unless ``-x``
says the name is a plain ``module.Class`` path, so run it as::

    python -m libcst.tool codemod -x xnnfold.rewriter.codemod.XnnfoldCodemod --no-format PATH...

(``--no-format``: the tool otherwise pipes every file through ``black``). The command's own
flags are ``--no-migrate-weight-norm``, ``--migrate-spectral-norm``, ``--no-wire-export`` and
``--force``; each finding is printed as a warning ``line:col: CODE message``. The rules are
`xnnfold.rewriter.codemod._rules` (see its docstring for the code table); ``xnnfold
codemod`` runs the same rules with its own driver.
"""

from __future__ import annotations

import argparse

import libcst as cst
from libcst.codemod import CodemodCommand, CodemodContext

from xnnfold.rewriter.codemod._api import CodemodOptions, FileOutcome, Finding, UnparseableSource
from xnnfold.rewriter.codemod._rules import apply_rules, transform_source

__all__ = [
    "CodemodOptions",
    "FileOutcome",
    "Finding",
    "UnparseableSource",
    "XnnfoldCodemod",
    "transform_source",
]


class XnnfoldCodemod(CodemodCommand):
    """Report computed-weight sites; migrate legacy weight_norm; wire XNNPACK exports."""

    DESCRIPTION: str = (
        "Report weight_norm/spectral_norm/parametrization, computed-weight and export "
        "sites; migrate legacy torch.nn.utils.weight_norm to parametrizations and wire "
        "XNNPACK lowering to xnnfold."
    )

    def __init__(
        self,
        context: CodemodContext,
        *,
        migrate_weight_norm: bool = True,
        migrate_spectral_norm: bool = False,
        wire_export: bool = True,
        force: bool = False,
    ) -> None:
        super().__init__(context)
        self.options = CodemodOptions(
            migrate_weight_norm=migrate_weight_norm,
            migrate_spectral_norm=migrate_spectral_norm,
            wire_export=wire_export,
            force=force,
        )

    @staticmethod
    def add_args(arg_parser: argparse.ArgumentParser) -> None:
        arg_parser.add_argument(
            "--no-migrate-weight-norm",
            dest="migrate_weight_norm",
            action="store_false",
            help="Only report legacy torch.nn.utils.weight_norm; do not migrate it.",
        )
        arg_parser.add_argument(
            "--migrate-spectral-norm",
            dest="migrate_spectral_norm",
            action="store_true",
            help="Also migrate legacy spectral_norm (torch has no state_dict "
            "compatibility hook for it: old checkpoints need converting).",
        )
        arg_parser.add_argument(
            "--no-wire-export",
            dest="wire_export",
            action="store_false",
            help="Do not wrap exported models in prepare_for_xnnpack nor swap "
            "XnnpackPartitioner for XnnpackFoldingPartitioner.",
        )
        arg_parser.add_argument(
            "--force",
            dest="force",
            action="store_true",
            help="Migrate files that read legacy state_dict keys or attributes too.",
        )

    def transform_module_impl(self, tree: cst.Module) -> cst.Module:
        updated, findings = apply_rules(tree, options=self.options, context=self.context)
        for finding in findings:
            self.warn(f"{finding.line}:{finding.col}: {finding.code} {finding.message}")
        # The rules return the tree they were given when nothing changes; libcst then
        # reports the file as unmodified.
        return updated
