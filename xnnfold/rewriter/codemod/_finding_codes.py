"""Stable codes for every finding the codemod reports (XNF1xx to XNF4xx).

A finding's code names the rule that matched, so that a user can grep a report for one,
filter ``--report`` JSON by one, or look one up in docs/codemod.md; the message beside it
says what was seen and what the rewrite does. Every code the rules emit is one of the
constants below (tests/rewriter/codemod/test_codemod_codes.py checks that each is emitted by some
fixture and documented). They are registered in the one registry of xnnfold's codes
(`xnnfold._code_registry`, beside the folding partitioner's reason codes, XNF5xx), which refuses a
code or a name used before; codes are never reused or renumbered.

``line:col`` of a finding are 1-based; ``Finding.rewritten`` says whether the new code
changes the site.
"""

from __future__ import annotations

from typing import Final

from xnnfold._code_registry import family
from xnnfold._code_registry import register as _code

__all__ = ["CODES"]

# Legacy hook-based norms (migrated to parametrizations).
LEGACY_WEIGHT_NORM: Final = _code(
    "XNF101",
    "legacy-weight-norm",
    "legacy torch.nn.utils.weight_norm: migrated to parametrizations.weight_norm",
)
LEGACY_REMOVE_WEIGHT_NORM: Final = _code(
    "XNF102",
    "legacy-remove-weight-norm",
    "legacy remove_weight_norm: migrated to parametrize.remove_parametrizations",
)
LEGACY_SPECTRAL_NORM: Final = _code(
    "XNF103",
    "legacy-spectral-norm",
    "legacy torch.nn.utils.spectral_norm: reported; migrated only with migrate_spectral_norm "
    "(torch has no state_dict compatibility hook for it)",
)
LEGACY_REMOVE_SPECTRAL_NORM: Final = _code(
    "XNF104", "legacy-remove-spectral-norm", "legacy remove_spectral_norm: as XNF103"
)

# Parametrizations and weights computed in forward (what xnnfold folds).
PARAMETRIZED_WEIGHT_NORM: Final = _code(
    "XNF201", "weight-norm", "parametrizations.weight_norm: folded by xnnfold"
)
PARAMETRIZED_SPECTRAL_NORM: Final = _code(
    "XNF202",
    "spectral-norm",
    "parametrizations.spectral_norm: folded by xnnfold (export in eval mode)",
)
PARAMETRIZED_ORTHOGONAL: Final = _code(
    "XNF203",
    "orthogonal",
    "parametrizations.orthogonal: folded by xnnfold (matrix_exp / cayley maps)",
)
REGISTERED_PARAMETRIZATION: Final = _code(
    "XNF204",
    "register-parametrization",
    "parametrize.register_parametrization: folded when the parametrization is pure",
)
FORWARD_COMPUTED_WEIGHT: Final = _code(
    "XNF210",
    "forward-weight",
    "weight computed in forward from module attributes: a folding candidate",
)
FORWARD_STANDARDIZATION: Final = _code(
    "XNF211",
    "forward-standardization",
    "weight standardization in forward (batch_norm / mean / std / var of a weight)",
)
FORWARD_PER_SAMPLE_WEIGHT: Final = _code(
    "XNF212",
    "per-sample-weight",
    "weight in forward that depends on the input (per-sample): declined",
)

# Export sites.
TORCH_EXPORT_CALL: Final = _code(
    "XNF301", "torch-export", "torch.export.export: model wrapped in prepare_for_xnnpack"
)
LOWERING_CALL: Final = _code(
    "XNF302", "to-edge-transform-and-lower", "to_edge_transform_and_lower: the lowering call"
)
STOCK_PARTITIONER_CALL: Final = _code(
    "XNF303",
    "stock-partitioner",
    "XnnpackPartitioner(...): replaced by XnnpackFoldingPartitioner(...)",
)

# Reads of legacy state (each blocks migrating its file unless forced).
LEGACY_KEY_STRING: Final = _code(
    "XNF401",
    "legacy-key-string",
    "string naming a legacy state_dict key (weight_g, weight_v, weight_orig, weight_u): "
    "migration renames the key; blocks migrating this file",
)
LEGACY_ATTRIBUTE: Final = _code(
    "XNF402",
    "legacy-attribute",
    "attribute access to a legacy attribute (.weight_g ...): as XNF401",
)
KEY_BY_KEY_LOADER: Final = _code(
    "XNF403",
    "key-by-key-loader",
    "checkpoint loader copying key by key from a model's own state_dict() keys: it would "
    "skip legacy weights silently after a migration; as XNF401",
)

# The codemod's codes, by code.
CODES: Final = family("XNF1", "XNF2", "XNF3", "XNF4")
