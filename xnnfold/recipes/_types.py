"""`XnnfoldRecipeType`: the recipe names `executorch.export` looks xnnfold's recipes up by.

Each member is an XNNPACK recipe of the same name (`XNNPackRecipeType`) lowered with the
folding partitioner; its value is the stock value with ``xnnpack`` replaced by
``xnnfold``, and `ExportRecipe.get_recipe` finds the provider through
`get_backend_name`.
"""

from __future__ import annotations

from typing import Final

from executorch.export import RecipeType

__all__ = ["BACKEND_NAME", "STOCK_BACKEND_NAME", "XnnfoldRecipeType"]

# The name xnnfold's provider registers under, and the one of the recipes it builds on.
BACKEND_NAME: Final = "xnnfold"
STOCK_BACKEND_NAME: Final = "xnnpack"


class XnnfoldRecipeType(RecipeType):
    """xnnfold's recipes: executorch's XNNPACK recipes with `XnnpackFoldingPartitioner`.

    ``ExportRecipe.get_recipe(XnnfoldRecipeType.FP32)`` is
    ``ExportRecipe.get_recipe(XNNPackRecipeType.FP32)`` with every `XnnpackPartitioner`
    replaced by a folding partitioner of the same configuration (docs/recipes.md).
    """

    FP32 = "xnnfold_fp32"

    # PT2E quantization with XNNPACKQuantizer, int8 (static ones calibrate on the example
    # inputs, or on the recipe's calibration inputs)
    PT2E_INT8_DYNAMIC_PER_CHANNEL = "xnnfold_pt2e_int8_dynamic_per_channel"
    PT2E_INT8_STATIC_PER_CHANNEL = "xnnfold_pt2e_int8_static_per_channel"
    PT2E_INT8_STATIC_PER_TENSOR = "xnnfold_pt2e_int8_static_per_tensor"

    # torchao quantize_ on the eager model: int8 dynamic activations, int4 weights, per
    # channel or per group (``group_size``, default 32). A module torchao quantizes must
    # hold its weight and bias as stored tensors (see `_torchao.py`).
    TORCHAO_INT8_DYNAMIC_ACT_INT4_WEIGHT_PER_CHANNEL = "xnnfold_torchao_int8da_int4w_per_channel"
    TORCHAO_INT8_DYNAMIC_ACT_INT4_WEIGHT_PER_TENSOR = "xnnfold_torchao_int8da_int4w_per_tensor"

    @classmethod
    def get_backend_name(cls) -> str:
        return BACKEND_NAME
