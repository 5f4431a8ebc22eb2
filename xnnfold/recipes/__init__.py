"""executorch.export recipes with computed GEMM weights folded: import to register them.

    import executorch.export
    from executorch.export import ExportRecipe
    from xnnfold.recipes import XnnfoldRecipeType

    session = executorch.export.export(
        model, [example_inputs], ExportRecipe.get_recipe(XnnfoldRecipeType.FP32)
    )

Importing this package registers `XnnfoldRecipeProvider` with
`executorch.export.recipe_registry` under the backend name ``xnnfold``. Each
`XnnfoldRecipeType` is executorch's XNNPACK recipe of the same name with
`XnnpackFoldingPartitioner` in place of `XnnpackPartitioner` (docs/recipes.md).
Registering again, by importing again or calling `register_recipes`, registers the same
provider under the same name and changes nothing.
"""

from __future__ import annotations

from typing import Final

from executorch.export import recipe_registry

from xnnfold.recipes._partitioners import folding_partitioner_like, RecipeMismatch
from xnnfold.recipes._provider import stock_recipe_type, XnnfoldRecipeProvider
from xnnfold.recipes._torchao import ComputedWeightNotQuantizable, RefuseComputedWeights
from xnnfold.recipes._types import BACKEND_NAME, XnnfoldRecipeType

__all__ = [
    "BACKEND_NAME",
    "ComputedWeightNotQuantizable",
    "PROVIDER",
    "RecipeMismatch",
    "RefuseComputedWeights",
    "XnnfoldRecipeProvider",
    "XnnfoldRecipeType",
    "folding_partitioner_like",
    "register_recipes",
    "stock_recipe_type",
]

# The one provider every registration registers (it holds no state).
PROVIDER: Final = XnnfoldRecipeProvider()


def register_recipes() -> XnnfoldRecipeProvider:
    """Register `PROVIDER` with `executorch.export.recipe_registry` as ``xnnfold`` (what
    importing this package does); idempotent. Returns the provider."""
    recipe_registry.register_backend_recipe_provider(PROVIDER)
    return PROVIDER


register_recipes()
