"""The torchao recipes: `quantize_` refuses a computed weight, so xnnfold says so first.

The stock torchao recipes run ``torchao.quantization.quantize_`` on the eager model
(executorch's SOURCE_TRANSFORM stage), which replaces each selected module's ``weight``
with a quantized parameter. A weight computed by a parametrization cannot be replaced
(``KeyError: "attribute 'weight' already exists"``), and one computed by a legacy
weight_norm or spectral_norm hook is replaced, then fails at the next forward
(``TypeError: cannot assign ... as parameter 'weight'``); the stock recipes fail the same
way, and there is nothing left to fold once a weight is quantized. A computed bias on a
selected module fails later: `unwrap_tensor_subclass` parametrizes the quantized weight,
and `torch.export` then cannot lift the module (stock too). Every computed weight of a
module torchao does not select (a convolution's, one computed in ``forward``) stays in
fp32 and the folding partitioner folds it as in the FP32 recipe.

So each torchao config of an xnnfold recipe gets a filter that selects what the stock
one selects and raises `ComputedWeightNotQuantizable` for a selected module with a
computed tensor, naming the module, the tensor and the ways out.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Callable, Final, Optional

from executorch.export import QuantizationRecipe
from torch import nn

from xnnfold._upstream import quantize_default_filter
from xnnfold.rewriter import find_sites

__all__ = ["ComputedWeightNotQuantizable", "RefuseComputedWeights", "guard_quantization"]

# The tensor torchao's quantize_ replaces on each module it selects.
QUANTIZED_TENSOR: Final = "weight"
# Why a computed tensor of a module quantize_ selects fails, for the message.
_WHY_WEIGHT: Final = (
    "torchao's quantize_ replaces a module's weight with a quantized parameter, which a "
    "computed weight cannot take (a parametrization refuses it, a legacy hook overwrites "
    "it at the next forward)"
)
_WHY_OTHER: Final = (
    "torch.export cannot lift the module once torchao has parametrized its quantized "
    "weight as well (AssertionError: Attribute ... not found in model, with the stock "
    "recipe too)"
)
# What to use instead, for the message.
_PT2E_RECIPE: Final = "XnnfoldRecipeType.PT2E_INT8_DYNAMIC_PER_CHANNEL"

ModuleFilter = Callable[[nn.Module, str], bool]


class ComputedWeightNotQuantizable(ValueError):
    """A torchao recipe selected a module whose weight is computed, not stored."""


@dataclass(frozen=True)
class RefuseComputedWeights:
    """A `quantize_` filter: ``selects``, raising for a selected module with a computed
    tensor of its own (a parametrization or a legacy weight_norm/spectral_norm hook)."""

    selects: Optional[ModuleFilter]
    recipe: str

    def __call__(self, module: nn.Module, fqn: str) -> bool:
        selects = self.selects if self.selects is not None else quantize_default_filter
        if not selects(module, fqn):
            return False
        computed = [site for site in find_sites(module) if not site.module]
        if computed:
            site = computed[0]
            why = _WHY_WEIGHT if site.tensor == QUANTIZED_TENSOR else _WHY_OTHER
            raise ComputedWeightNotQuantizable(
                f"xnnfold: recipe {self.recipe!r} cannot quantize module {fqn or '(root)'!r} "
                f"({type(module).__name__}): its {site.tensor} is computed ({site.kind}), and "
                f"{why}. Make it a parameter first (torch.nn.utils.parametrize."
                f"remove_parametrizations(module, {site.tensor!r}), or torch.nn.utils."
                "remove_weight_norm / remove_spectral_norm) to keep this recipe, or use "
                f"{_PT2E_RECIPE}: its convert_pt2e quantizes computed weights, and xnnfold "
                "folds what it leaves in fp32."
            )
        return True


def guard_quantization(
    quantization: Optional[QuantizationRecipe], *, recipe: str
) -> Optional[QuantizationRecipe]:
    """``quantization`` with each torchao config's filter wrapped in
    `RefuseComputedWeights`; the same object when it has no torchao configs."""
    if quantization is None or not quantization.ao_quantization_configs:
        return quantization
    guarded = [
        dataclasses.replace(config, filter_fn=RefuseComputedWeights(config.filter_fn, recipe))
        for config in quantization.ao_quantization_configs
    ]
    return dataclasses.replace(quantization, ao_quantization_configs=guarded)
