"""XnnpackFoldingPartitioner is a drop-in for XnnpackPartitioner.

It takes every argument the stock partitioner takes, with the same meaning, and on a
program with nothing to fold it lowers byte-identically to stock on every lowering path
executorch offers: to_edge_transform_and_lower (one partitioner list for every method, or
one per method), to_edge().to_backend(), and the export recipes, with static shapes and
with dynamic ones.
"""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any, Callable, Final

import pytest
import torch
from executorch.backends.xnnpack.partition.config.gemm_configs import LinearConfig
from executorch.backends.xnnpack.partition.config.generic_node_configs import ReLUConfig
from executorch.backends.xnnpack.partition.config.xnnpack_config import ConfigPrecisionType
from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
from executorch.backends.xnnpack.recipes import XNNPackRecipeType
from executorch.exir import EdgeProgramManager, to_edge, to_edge_transform_and_lower
from executorch.exir.backend.partitioner import Partitioner
from executorch.exir.delegate import executorch_call_delegate
from executorch.export import export as export_with_recipe
from executorch.export import ExportRecipe
from torch import nn
from torch.export import Dim

import xnnfold
from xnnfold import XnnpackFoldingPartitioner

pytestmark = pytest.mark.runtime

PATHS = ("list", "per_method", "to_backend", "recipe")
Factory = Callable[..., Partitioner]


class LinearRelu(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.linear(x))


def _inputs() -> tuple[torch.Tensor]:
    return (torch.randn(2, 3, 8, generator=torch.Generator().manual_seed(1)),)


def _dynamic_shapes() -> dict[str, dict[int, Any]]:
    # Two dynamic dimensions: the linear's decomposition reads both sizes and multiplies
    # them (a symbolic `mul`) to flatten the input.
    return {"x": {0: Dim("batch", min=1, max=10), 1: Dim("seq", min=1, max=10)}}


def _delegates(edge: EdgeProgramManager) -> int:
    return sum(
        node.target is executorch_call_delegate
        for name in edge.methods
        for node in edge.exported_program(name).graph.nodes
    )


def _lower(factory: Factory, path: str, *, dynamic: bool, **options: Any) -> tuple[bytes, int]:
    """The .pte and the delegate count of LinearRelu lowered along ``path``."""
    torch.manual_seed(0)
    model = LinearRelu().eval()
    shapes = _dynamic_shapes() if dynamic else None
    if path == "recipe":
        recipe = ExportRecipe.get_recipe(XNNPackRecipeType.FP32)
        assert recipe.lowering_recipe is not None
        # The stock recipe builds XnnpackPartitioner(precision_type=None); so does this.
        lowering = dataclasses.replace(
            recipe.lowering_recipe, partitioners=[factory(precision_type=None, **options)]
        )
        session = export_with_recipe(
            model,
            [_inputs()],
            dataclasses.replace(recipe, lowering_recipe=lowering),
            dynamic_shapes=shapes,
        )
        return session.get_pte_buffer(), _delegates(session.get_edge_program_manager())
    ep = torch.export.export(model, _inputs(), dynamic_shapes=shapes)
    if path == "list":
        edge = to_edge_transform_and_lower(ep, partitioner=[factory(**options)])
    elif path == "per_method":
        edge = to_edge_transform_and_lower(
            {"forward": ep}, partitioner={"forward": [factory(**options)]}
        )
    else:
        edge = to_edge(ep).to_backend(factory(**options))
    return edge.to_executorch().buffer, _delegates(edge)


# The fast tier keeps one static and one dynamic path; the full tier runs all eight.
FAST_PATHS: Final = {("list", False), ("to_backend", True)}


@pytest.mark.parametrize(
    ("path", "dynamic"),
    [
        pytest.param(
            path,
            dynamic,
            id=f"{path}-{'dynamic' if dynamic else 'static'}",
            marks=() if (path, dynamic) in FAST_PATHS else pytest.mark.slow,
        )
        for path in PATHS
        for dynamic in (False, True)
    ],
)
def test_nothing_to_fold_lowers_byte_identically_to_stock(path: str, dynamic: bool) -> None:
    stock, stock_delegates = _lower(XnnpackPartitioner, path, dynamic=dynamic)
    ours, delegates = _lower(XnnpackFoldingPartitioner, path, dynamic=dynamic)
    assert (delegates, stock_delegates) == (1, 1)
    assert ours == stock


def test_stock_config_keywords_lower_byte_identically() -> None:
    """Keywords the configs read (the flag) and ignore (executorch's own test passes
    force_fp32_dynamic_linear) give the stock program too."""
    options = {"force_non_static_weights_for_f32_linear": True, "force_fp32_dynamic_linear": True}
    stock, _ = _lower(XnnpackPartitioner, "to_backend", dynamic=True, **options)
    ours, _ = _lower(XnnpackFoldingPartitioner, "to_backend", dynamic=True, **options)
    assert ours == stock


def test_two_dynamic_dims_run_like_eager_at_another_shape() -> None:
    """The one delegate takes the symbolic sizes: a shape other than the example's runs."""
    buffer, _ = _lower(XnnpackFoldingPartitioner, "to_backend", dynamic=True)
    torch.manual_seed(0)
    model = LinearRelu().eval()
    x = torch.randn(5, 7, 8)
    (out,) = xnnfold.run_pte(buffer, [x])
    torch.testing.assert_close(out, model(x))


def _parameters(cls: type) -> list[inspect.Parameter]:
    return list(inspect.signature(cls.__init__).parameters.values())[1:]


def test_every_stock_parameter_is_accepted_with_its_kind_and_default() -> None:
    ours = _parameters(XnnpackFoldingPartitioner)
    named = [p for p in ours if p.kind is not inspect.Parameter.VAR_KEYWORD]
    for index, stock in enumerate(_parameters(XnnpackPartitioner)):
        if stock.kind is inspect.Parameter.VAR_KEYWORD:
            assert any(p.kind is inspect.Parameter.VAR_KEYWORD for p in ours)
            continue
        # Same position too: the stock partitioner's positional order is ours.
        mine = named[index]
        assert (mine.name, mine.kind, mine.default) == (stock.name, stock.kind, stock.default)


def test_own_options_are_keyword_only() -> None:
    stock = {p.name for p in _parameters(XnnpackPartitioner)}
    own = [p for p in _parameters(XnnpackFoldingPartitioner) if p.name not in stock]
    assert {p.name for p in own} >= {
        "fold",
        "max_fold_nodes",
        "keep_decomposition_filter",
        "growth_budget",
    }
    assert all(
        p.kind in (inspect.Parameter.KEYWORD_ONLY, inspect.Parameter.VAR_KEYWORD) for p in own
    )


def _configs(partitioner: XnnpackPartitioner) -> list[tuple[str, Any]]:
    return [
        (name, config.enabled_precision_types)
        for name, config in partitioner.target_partitioner_configs.items()
    ]


def test_positional_arguments_mean_what_they_mean_for_stock() -> None:
    arguments = ([LinearConfig, ReLUConfig], ConfigPrecisionType.FP32, True, False)
    stock = XnnpackPartitioner(*arguments)
    ours = XnnpackFoldingPartitioner(*arguments)
    assert _configs(ours) == _configs(stock)
    assert ours.per_op_mode is stock.per_op_mode is True


class LimitedReLUConfig(ReLUConfig):
    """A user's config class with an option of its own and no ``**kwargs``: it can be
    built only with exactly the keywords the caller gave."""

    def __init__(self, *, relu_limit: float) -> None:
        super().__init__()
        self.relu_limit = relu_limit


@pytest.mark.parametrize("cls", [XnnpackPartitioner, XnnpackFoldingPartitioner])
def test_keywords_reach_a_custom_config_class(cls: type[XnnpackPartitioner]) -> None:
    partitioner = cls(configs=[LimitedReLUConfig], relu_limit=6.0)
    (config,) = partitioner.target_partitioner_configs.values()
    assert isinstance(config, LimitedReLUConfig)
    assert config.relu_limit == 6.0


def test_stock_config_flag_reaches_the_folding_configs() -> None:
    partitioner = XnnpackFoldingPartitioner(force_non_static_weights_for_f32_linear=True)
    configs = partitioner.target_partitioner_configs.values()
    assert all(config.force_non_static_weights_for_f32_linear is True for config in configs)
