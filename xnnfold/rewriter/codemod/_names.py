"""The names the codemod's rules match, as libcst's `QualifiedNameProvider` spells them
(legacy functions, parametrizations, export and lowering calls, GEMMs, legacy state_dict
keys), the parameters of `XnnpackFoldingPartitioner` the export rewrite must not confuse
(`FOLDING_PARTITIONER_POSITIONAL`, `FOLDING_PARTITIONER_OPTIONS`), and the words a file
must spell to have a site at all (`TRIGGER_WORDS`, `TRIGGER_IDENTIFIERS`)."""

from __future__ import annotations

import dataclasses
import re
from typing import Final

from xnnfold.rewriter.codemod._finding_codes import (
    LEGACY_REMOVE_SPECTRAL_NORM,
    LEGACY_REMOVE_WEIGHT_NORM,
    LEGACY_SPECTRAL_NORM,
    LEGACY_WEIGHT_NORM,
    PARAMETRIZED_ORTHOGONAL,
    PARAMETRIZED_SPECTRAL_NORM,
    PARAMETRIZED_WEIGHT_NORM,
    REGISTERED_PARAMETRIZATION,
)

UTILS: Final = "torch.nn.utils"
_PARAMETRIZATIONS: Final = "torch.nn.utils.parametrizations"
_PARAMETRIZE: Final = "torch.nn.utils.parametrize"

WEIGHT_NORM: Final = "weight_norm"
SPECTRAL_NORM: Final = "spectral_norm"


@dataclasses.dataclass(frozen=True)
class Legacy:
    """One legacy function and what it migrates to."""

    code: str
    family: str  # WEIGHT_NORM or SPECTRAL_NORM
    removal: bool
    new_module: str
    new_obj: str

    @property
    def new_name(self) -> str:
        return f"{self.new_module}.{self.new_obj}"


LEGACY: Final[dict[str, Legacy]] = {}
for _family, source_of, _rcode in (
    (WEIGHT_NORM, LEGACY_WEIGHT_NORM.code, LEGACY_REMOVE_WEIGHT_NORM.code),
    (SPECTRAL_NORM, LEGACY_SPECTRAL_NORM.code, LEGACY_REMOVE_SPECTRAL_NORM.code),
):
    _apply = Legacy(source_of, _family, False, _PARAMETRIZATIONS, _family)
    _remove = Legacy(_rcode, _family, True, _PARAMETRIZE, "remove_parametrizations")
    # The function is re-exported by torch.nn.utils; its defining module works too.
    for _name in (f"{UTILS}.{_family}", f"{UTILS}.{_family}.{_family}"):
        LEGACY[_name] = _apply
    for _name in (f"{UTILS}.remove_{_family}", f"{UTILS}.{_family}.remove_{_family}"):
        LEGACY[_name] = _remove

PARAMETRIZATION_CODES: Final = {
    f"{_PARAMETRIZATIONS}.weight_norm": (
        PARAMETRIZED_WEIGHT_NORM.code,
        "parametrizations.weight_norm: folded by xnnfold (XnnpackFoldingPartitioner)",
    ),
    f"{_PARAMETRIZATIONS}.spectral_norm": (
        PARAMETRIZED_SPECTRAL_NORM.code,
        "parametrizations.spectral_norm: folded by xnnfold (XnnpackFoldingPartitioner); "
        "export in eval mode",
    ),
    f"{_PARAMETRIZATIONS}.orthogonal": (
        PARAMETRIZED_ORTHOGONAL.code,
        "parametrizations.orthogonal: folded by xnnfold with its matrix_exp and cayley maps "
        "(householder does not lower in executorch)",
    ),
    f"{_PARAMETRIZE}.register_parametrization": (
        REGISTERED_PARAMETRIZATION.code,
        "parametrize.register_parametrization: folded by xnnfold when the parametrization "
        "is pure ATen over parameters and constants",
    ),
}

TORCH_EXPORT: Final = frozenset({"torch.export.export"})
PREPARE: Final = frozenset(
    {
        "xnnfold.prepare_for_xnnpack",
        "xnnfold.rewriter.prepare_for_xnnpack",
        "xnnfold.rewriter._marking.prepare_for_xnnpack",
    }
)
PREPARE_MODULE: Final = "xnnfold"
PREPARE_OBJ: Final = "prepare_for_xnnpack"
FOLDING_PARTITIONER: Final = "XnnpackFoldingPartitioner"
STOCK_PARTITIONER: Final = "XnnpackPartitioner"
LOWER: Final = "to_edge_transform_and_lower"
# XnnpackFoldingPartitioner's parameters: the stock partitioner's positional ones, in
# order, then its own keyword-only options. Every other keyword reaches the configs, as
# with the stock partitioner; a stock call passing one of the folding partitioner's own
# option names to its configs would change meaning, so such a call is left alone.
FOLDING_PARTITIONER_POSITIONAL: Final = ("configs", "config_precisions", "per_op_mode", "verbose")
FOLDING_PARTITIONER_OPTIONS: Final = (
    "fold",
    "max_fold_nodes",
    "keep_decomposition_filter",
    "growth_budget",
    "facts",
    "tie_tables",
)

# GEMMs whose weight argument is examined in forward: name -> (weight index, bias index).
GEMMS: Final[dict[str, tuple[int, ...]]] = {
    **{
        f"{prefix}.{op}{d}d": (1, 2)
        for prefix in ("torch.nn.functional", "torch")
        for op in ("conv", "conv_transpose")
        for d in (1, 2, 3)
    },
    "torch.nn.functional.linear": (1, 2),
    "torch.matmul": (0, 1),
    "torch.mm": (0, 1),
    "torch.addmm": (0, 1, 2),
}
MATMULS: Final = frozenset({"torch.matmul", "torch.mm", "torch.addmm"})
GEMM_KEYWORDS: Final = frozenset({"weight", "bias", "input", "other", "mat1", "mat2"})
STANDARDIZE_FUNCS: Final = frozenset(
    {
        "torch.nn.functional.batch_norm",
        "torch.batch_norm",
        "torch.var_mean",
        "torch.std_mean",
        "torch.mean",
        "torch.std",
        "torch.var",
    }
)
STANDARDIZE_METHODS: Final = frozenset({"mean", "std", "var", "var_mean", "std_mean"})

# Legacy state_dict keys and attributes, and what a migration turns them into.
LEGACY_KEYS: Final = {
    "weight_g": "parametrizations.weight.original0 (weight_norm)",
    "weight_v": "parametrizations.weight.original1 (weight_norm) or "
    "parametrizations.weight.0._v (spectral_norm)",
    "weight_orig": "parametrizations.weight.original (spectral_norm)",
    "weight_u": "parametrizations.weight.0._u (spectral_norm)",
}
LEGACY_KEY_RE: Final = re.compile(r"(?<![A-Za-z0-9_])(weight_(?:g|v|orig|u))(?![A-Za-z0-9_])")

# Every site spells one of these (the last component of a qualified name is always spelled
# in the file: ``import x as y`` spells ``x``): words as substrings, GEMM names as whole
# identifiers. A file with none of them skips the costly scope analysis; the driver reads
# these lists for its own pre-filter.
TRIGGER_WORDS: Final[tuple[str, ...]] = (
    WEIGHT_NORM,
    SPECTRAL_NORM,
    "parametriz",
    "orthogonal",
    "export",
    LOWER,
    "Xnnpack",
    *LEGACY_KEYS,
    "state_dict",
)
TRIGGER_IDENTIFIERS: Final[tuple[str, ...]] = tuple(
    sorted({name.rsplit(".", 1)[1] for name in GEMMS})
)
TRIGGERS: Final = re.compile(
    "|".join(re.escape(word) for word in TRIGGER_WORDS)
    + r"|(?<![A-Za-z0-9_])(?:"
    + "|".join(TRIGGER_IDENTIFIERS)
    + r")(?![A-Za-z0-9_])"
)
