"""`XnnfoldRecipeProvider`: each xnnfold recipe is the stock XNNPACK recipe, partitioner swapped.

`create_recipe` asks `executorch.export` for the XNNPACK recipe of the same member name,
with the same keywords (the stock provider validates them), and changes only:

- every `XnnpackPartitioner` of its lowering recipe, rebuilt as an
  `XnnpackFoldingPartitioner` of the same configuration (`_partitioners.py`);
- every torchao config's filter, which also refuses a module whose weight is computed
  (`_torchao.py`);
- its name, the xnnfold member's value.

Everything else (quantizers, edge compile config, backend config, strictness, stages) is
the stock recipe's own object, so what a newer executorch changes in its recipes carries
over. xnnfold's `prepare_for_xnnpack` has no place here: a recipe reaches the model only
through torchao's `quantize_`, and the marks only name the sites in reports (the caller
can prepare the model and export non-strict; see docs/recipes.md).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Sequence

import executorch.backends.xnnpack.recipes  # noqa: F401 - registers the stock provider
from executorch.backends.xnnpack.recipes import XNNPackRecipeType
from executorch.export import BackendRecipeProvider, ExportRecipe, RecipeType

from xnnfold.recipes._partitioners import replace_partitioners
from xnnfold.recipes._torchao import guard_quantization
from xnnfold.recipes._types import BACKEND_NAME, XnnfoldRecipeType

# The keyword of ``ExportRecipe.get_recipe`` that turns tied tables on (off by default).
TIE_TABLES_OPTION = "tie_tables"

__all__ = ["XnnfoldRecipeProvider", "stock_recipe_type"]


def stock_recipe_type(recipe_type: XnnfoldRecipeType) -> XNNPackRecipeType:
    """The XNNPACK recipe ``recipe_type`` is built from: the member of the same name."""
    try:
        return XNNPackRecipeType[recipe_type.name]
    except KeyError:
        raise ValueError(
            f"xnnfold: recipe {recipe_type.value!r} is built from XNNPackRecipeType."
            f"{recipe_type.name}, which the installed executorch does not define "
            f"(it has {', '.join(m.name for m in XNNPackRecipeType)}); use one of those, or "
            "the executorch release xnnfold was tested with"
        ) from None


class XnnfoldRecipeProvider(BackendRecipeProvider):
    """The ``xnnfold`` backend of `executorch.export.recipe_registry`: the XNNPACK recipes
    of `XnnfoldRecipeType` with computed GEMM weights folded. Holds no state, so one
    instance serves every registration."""

    @property
    def backend_name(self) -> str:
        return BACKEND_NAME

    def get_supported_recipes(self) -> Sequence[RecipeType]:
        return list(XnnfoldRecipeType)

    def create_recipe(self, recipe_type: RecipeType, **kwargs: Any) -> ExportRecipe | None:
        """The stock recipe of ``recipe_type``'s name with the folding partitioner, or
        None for a recipe type that is not xnnfold's (as the registry expects).

        ``tie_tables=True`` (a keyword of ``ExportRecipe.get_recipe``) stores a tied table
        once, in ``_default_external_constant.ptd`` (docs/tied-tables.md). Off by default:
        an ``ExportSession`` saves and runs a ``.pte`` alone (``save_to_pte``,
        ``run_method``), which cannot load such a program; write it with
        ``xnnfold.save(session.get_executorch_program_manager(), "model.pte")``."""
        if not isinstance(recipe_type, XnnfoldRecipeType):
            return None
        tie_tables = bool(kwargs.pop(TIE_TABLES_OPTION, False))
        stock = ExportRecipe.get_recipe(stock_recipe_type(recipe_type), **kwargs)
        name = recipe_type.value
        lowering = stock.lowering_recipe
        if lowering is not None:
            lowering = dataclasses.replace(
                lowering,
                partitioners=replace_partitioners(
                    lowering.partitioners, recipe=name, tie_tables=tie_tables
                ),
            )
        return dataclasses.replace(
            stock,
            name=name,
            lowering_recipe=lowering,
            quantization_recipe=guard_quantization(stock.quantization_recipe, recipe=name),
        )
