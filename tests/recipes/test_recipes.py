"""xnnfold.recipes: executorch's XNNPACK export recipes with the folding partitioner.

Each recipe runs end to end through `executorch.export.export` and `executorch.runtime`
against eager; the quantized ones are held to the stock recipe's own error on the
hand-folded twin, and must delegate what the stock recipe leaves on portable. A model
with nothing to fold gives the stock recipe's bytes. The torchao recipes refuse a module
with a computed weight or bias, naming it, and fold the computed weights torchao
leaves alone.
"""

from __future__ import annotations

import functools
import importlib
import warnings
from typing import Any

import pytest
import torch
from executorch.backends.xnnpack.partition.config.xnnpack_config import ConfigPrecisionType
from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
from executorch.backends.xnnpack.recipes import XNNPackRecipeType
from executorch.export import export as export_with_recipe
from executorch.export import ExportRecipe, ExportSession, recipe_registry
from torch import nn
from torch.nn.utils.parametrizations import weight_norm

import xnnfold
import xnnfold.recipes
from xnnfold import XnnpackFoldingPartitioner
from xnnfold.fixtures import Fixture, ScaledBias
from xnnfold.recipes import (
    ComputedWeightNotQuantizable,
    folding_partitioner_like,
    RecipeMismatch,
    RefuseComputedWeights,
    XnnfoldRecipeProvider,
    XnnfoldRecipeType,
)

from tests._lowering import fixture_by_name

pytestmark = pytest.mark.runtime

FP32 = "FP32"
PT2E = (
    "PT2E_INT8_DYNAMIC_PER_CHANNEL",
    "PT2E_INT8_STATIC_PER_CHANNEL",
    "PT2E_INT8_STATIC_PER_TENSOR",
)
TORCHAO = (
    "TORCHAO_INT8_DYNAMIC_ACT_INT4_WEIGHT_PER_CHANNEL",
    "TORCHAO_INT8_DYNAMIC_ACT_INT4_WEIGHT_PER_TENSOR",
)
# weight_norm and spectral_norm, on convolutions and on a linear fed a 3-D activation.
FIXTURE_NAMES = (
    "weight_norm_dim0-conv1d",
    "spectral_norm-conv2d",
    "weight_norm_dim0-linear",
    "spectral_norm-linear",
)
FP32_ATOL = 1e-5
# A quantized recipe's error may exceed the stock recipe's on the hand-folded twin by this
# factor (both quantize the same weights; the measured errors are equal).
QUANTIZED_SLACK = 1.25


def _export(model: nn.Module, inputs: tuple[Any, ...], recipe: Any) -> ExportSession:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the recipe API's ExperimentalWarning
        return export_with_recipe(model, [inputs], ExportRecipe.get_recipe(recipe))


@functools.cache
def _run(source: str, name: str, recipe_name: str) -> tuple[float, int]:
    """(max abs error of the .pte against eager, GEMMs left outside a delegate) for
    fixture ``name`` under ``source`` ("xnnfold", "stock", or "stock-hand-folded")."""
    fixture = fixture_by_name(name)
    model = fixture.hand_folded() if source == "stock-hand-folded" else fixture.model()
    recipes = XnnfoldRecipeType if source == "xnnfold" else XNNPackRecipeType
    session = _export(model, fixture.inputs(), recipes[recipe_name])
    (output,) = xnnfold.run_pte(session.get_pte_buffer(), fixture.inputs())
    with torch.no_grad():
        expected = fixture.model()(*fixture.inputs())
    outside = len(xnnfold.explain(session.get_edge_program_manager()).outside)
    return float((output - expected).abs().max()), outside


# --- registration ------------------------------------------------------------------------


def test_importing_registers_the_xnnfold_provider() -> None:
    assert "xnnfold" in recipe_registry.list_backends()
    assert set(recipe_registry.get_supported_recipes("xnnfold")) == set(XnnfoldRecipeType)


def test_registering_again_changes_nothing() -> None:
    recipe = XnnfoldRecipeType.FP32  # a member from before the re-registrations
    xnnfold.recipes.register_recipes()
    importlib.reload(xnnfold.recipes)
    assert xnnfold.recipes.register_recipes() is xnnfold.recipes.PROVIDER
    assert recipe_registry.list_backends().count("xnnfold") == 1
    assert recipe_registry.get_supported_recipes("xnnfold") == list(XnnfoldRecipeType)
    assert ExportRecipe.get_recipe(recipe).name == "xnnfold_fp32"


def test_the_provider_declines_a_recipe_type_of_another_backend() -> None:
    assert XnnfoldRecipeProvider().create_recipe(XNNPackRecipeType.FP32) is None


# --- built from the stock recipe ---------------------------------------------------------


@pytest.mark.parametrize("member", list(XnnfoldRecipeType), ids=lambda m: m.name)
def test_each_recipe_is_the_stock_one_with_folding_partitioners(
    member: XnnfoldRecipeType,
) -> None:
    ours = ExportRecipe.get_recipe(member)
    stock = ExportRecipe.get_recipe(XNNPackRecipeType[member.name])
    assert ours.name == member.value == stock.name.replace("xnnpack", "xnnfold")
    assert ours.lowering_recipe is not None and stock.lowering_recipe is not None
    assert [type(p) for p in ours.lowering_recipe.partitioners] == [XnnpackFoldingPartitioner]
    assert ours.lowering_recipe.edge_compile_config == stock.lowering_recipe.edge_compile_config
    assert (ours.strict, ours.mode, ours.pipeline_stages) == (
        stock.strict,
        stock.mode,
        stock.pipeline_stages,
    )
    ours_q, stock_q = ours.quantization_recipe, stock.quantization_recipe
    assert (ours_q is None) == (stock_q is None)
    if ours_q is not None and stock_q is not None:
        assert [type(q) for q in ours_q.quantizers or []] == [
            type(q) for q in stock_q.quantizers or []
        ]
        assert [c.ao_base_config for c in ours_q.ao_quantization_configs or []] == [
            c.ao_base_config for c in stock_q.ao_quantization_configs or []
        ]


def test_a_recipe_s_folding_partitioners_share_one_facts_object() -> None:
    """A recipe's methods may share tensors: what one method writes or stores, the
    partitioner of another must know (`CrossMethodFacts`)."""
    from xnnfold.recipes._partitioners import replace_partitioners

    replaced = replace_partitioners(
        {"encode": [XnnpackPartitioner()], "decode": [XnnpackPartitioner()]}, recipe="test"
    )
    assert isinstance(replaced, dict)
    (encode,), (decode,) = replaced["encode"], replaced["decode"]
    assert encode.facts is decode.facts
    assert replace_partitioners([XnnpackPartitioner()], recipe="test")[0].facts is not encode.facts  # type: ignore[index]


def test_a_recipe_keyword_reaches_the_stock_recipe() -> None:
    member = XnnfoldRecipeType.TORCHAO_INT8_DYNAMIC_ACT_INT4_WEIGHT_PER_TENSOR
    recipe = ExportRecipe.get_recipe(member, group_size=16)
    assert recipe.quantization_recipe is not None
    (config,) = recipe.quantization_recipe.ao_quantization_configs or []
    assert config.ao_base_config.weight_granularity.group_size == 16


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"force_non_static_weights_for_f32_linear": True},
        {"config_precisions": ConfigPrecisionType.STATIC_QUANT},
        {"per_op_mode": True},
    ],
    ids=["defaults", "force_non_static", "static_only", "per_op"],
)
def test_the_folding_partitioner_has_the_stock_configuration(options: dict[str, Any]) -> None:
    stock = XnnpackPartitioner(**options)
    folding = folding_partitioner_like(stock, recipe="r")
    assert folding.per_op_mode == stock.per_op_mode
    for target, config in stock.target_partitioner_configs.items():
        mine = folding.target_partitioner_configs[target]
        assert isinstance(mine, type(config))
        assert mine.enabled_precision_types == config.enabled_precision_types
        assert (
            mine.force_non_static_weights_for_f32_linear
            == config.force_non_static_weights_for_f32_linear
        )


def test_a_partitioner_it_cannot_reproduce_is_an_error() -> None:
    stock = XnnpackPartitioner()
    next(iter(stock.target_partitioner_configs.values())).fused_acts = ["made_up.default"]
    with pytest.raises(RecipeMismatch, match=r"cannot rebuild the partitioner.*fused_acts"):
        folding_partitioner_like(stock, recipe="r")


def test_a_stock_partitioner_subclass_is_an_error() -> None:
    class Custom(XnnpackPartitioner):
        pass

    with pytest.raises(RecipeMismatch, match=r"lowers with .*Custom, not XnnpackPartitioner"):
        folding_partitioner_like(Custom(), recipe="r")


# --- FP32 end to end ---------------------------------------------------------------------


def test_fp32_recipe_delegates_a_weight_norm_linear_and_matches_eager() -> None:
    error, outside = _run("xnnfold", "weight_norm_dim0-linear", FP32)
    assert outside == 0
    assert error < FP32_ATOL


@pytest.mark.slow
@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_fp32_recipe_delegates_every_fixture_and_matches_eager(name: str) -> None:
    error, outside = _run("xnnfold", name, FP32)
    assert outside == 0
    assert error < FP32_ATOL


@pytest.mark.slow
@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_the_stock_fp32_recipe_leaves_each_fixture_on_portable(name: str) -> None:
    # What the recipe is for: without it, every one of these GEMMs stays outside.
    assert _run("stock", name, FP32)[1] == 1


# --- PT2E quantized recipes --------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("recipe", PT2E)
@pytest.mark.parametrize("name", ["weight_norm_dim0-conv1d", "spectral_norm-linear"])
def test_quantized_recipe_errs_no_more_than_stock_on_the_hand_folded_model(
    name: str, recipe: str
) -> None:
    error, outside = _run("xnnfold", name, recipe)
    stock_error, stock_outside = _run("stock-hand-folded", name, recipe)
    assert outside == stock_outside == 0
    assert error <= stock_error * QUANTIZED_SLACK + 1e-6, (error, stock_error)


@pytest.mark.slow
def test_dynamic_quantized_recipe_delegates_the_conv_stock_leaves_out() -> None:
    # XNNPACKQuantizer's dynamic mode skips 1-D convolutions, so the stock recipe keeps
    # the weight_norm conv and its weight computation on portable, in fp32.
    recipe = "PT2E_INT8_DYNAMIC_PER_CHANNEL"
    assert _run("stock", "weight_norm_dim0-conv1d", recipe)[1] == 1
    error, outside = _run("xnnfold", "weight_norm_dim0-conv1d", recipe)
    assert outside == 0
    assert error < FP32_ATOL


@pytest.mark.slow
@pytest.mark.parametrize(
    "recipe", ["PT2E_INT8_DYNAMIC_PER_CHANNEL", "PT2E_INT8_STATIC_PER_CHANNEL"]
)
def test_quantized_recipe_lowers_a_computed_bias(recipe: str) -> None:
    # The stock recipe fails at emit here (a dequantize left on portable has no out
    # variant, docs/recipes.md); xnnfold delegates the GEMM with its bias folded.
    name = "linear_computed_bias"
    error, outside = _run("xnnfold", name, recipe)
    stock_error, _ = _run("stock-hand-folded", name, recipe)
    assert outside == 0
    assert error <= stock_error * QUANTIZED_SLACK + 1e-6, (error, stock_error)


# --- nothing to fold ---------------------------------------------------------------------


class ConvLinear(nn.Module):
    """Stored weights only: a convolution, a ReLU and a linear."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv1d(8, 16, 3, padding=1)
        self.linear = nn.Linear(32, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(torch.relu(self.conv(x)))


@pytest.mark.slow
@pytest.mark.parametrize("recipe", (FP32, *PT2E, TORCHAO[0]))
def test_a_model_with_nothing_to_fold_gives_the_stock_bytes(recipe: str) -> None:
    def pte(recipes: Any) -> bytes:
        torch.manual_seed(0)
        model, inputs = ConvLinear().eval(), (torch.randn(1, 8, 32),)
        return _export(model, inputs, recipes[recipe]).get_pte_buffer()

    assert pte(XnnfoldRecipeType) == pte(XNNPackRecipeType)


# --- torchao recipes ---------------------------------------------------------------------


def test_torchao_recipe_refuses_a_weight_norm_linear_naming_it() -> None:
    fixture = fixture_by_name("weight_norm_dim0-linear")
    member = XnnfoldRecipeType.TORCHAO_INT8_DYNAMIC_ACT_INT4_WEIGHT_PER_CHANNEL
    with pytest.raises(
        ComputedWeightNotQuantizable,
        match=r"cannot quantize module '\(root\)'.*weight is computed \(weight_norm\).*"
        r"remove_parametrizations.*PT2E_INT8_DYNAMIC_PER_CHANNEL",
    ):
        _export(fixture.model(), fixture.inputs(), member)


def test_the_torchao_filter_refuses_a_legacy_weight_norm_linear() -> None:
    # Through a recipe, executorch's deep copy of the model fails first on a legacy hook.
    module = fixture_by_name("legacy_weight_norm-linear").model()
    with pytest.raises(ComputedWeightNotQuantizable, match=r"'lin'.*\(legacy_weight_norm\)"):
        RefuseComputedWeights(None, "r")(module, "lin")


def test_the_torchao_filter_refuses_a_linear_with_a_computed_bias() -> None:
    module = nn.Linear(4, 4)
    torch.nn.utils.parametrize.register_parametrization(module, "bias", ScaledBias())
    with pytest.raises(ComputedWeightNotQuantizable, match=r"its bias is computed.*lift"):
        RefuseComputedWeights(None, "r")(module, "lin")


def test_the_torchao_filter_selects_what_torchao_selects() -> None:
    refuse = RefuseComputedWeights(None, "r")
    assert refuse(nn.Linear(4, 4), "lin")
    assert not refuse(weight_norm(nn.Conv1d(4, 4, 3)), "conv")
    assert not RefuseComputedWeights(lambda module, fqn: False, "r")(nn.Linear(4, 4), "lin")


class ConvThenLinear(nn.Module):
    """A weight_norm conv, which torchao leaves alone, then a linear it quantizes."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = weight_norm(nn.Conv1d(8, 16, 3, padding=1))
        self.linear = nn.Linear(32, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(torch.relu(self.conv(x)))


CONV_THEN_LINEAR = Fixture(
    name="conv_then_linear",
    description="weight_norm conv, then a plain linear",
    build=ConvThenLinear,
    make_inputs=lambda: (torch.randn(1, 8, 32),),
)


@pytest.mark.slow
@pytest.mark.parametrize("recipe", TORCHAO)
def test_torchao_recipe_folds_the_computed_weights_it_leaves_alone(recipe: str) -> None:
    fixture, inputs = CONV_THEN_LINEAR, CONV_THEN_LINEAR.inputs()
    session = _export(fixture.model(), inputs, XnnfoldRecipeType[recipe])
    report = xnnfold.explain(session.get_edge_program_manager())
    assert not report.outside, report
    assert any(row.folded for row in report.rows), report
    (output,) = xnnfold.run_pte(session.get_pte_buffer(), inputs)
    stock = _export(fixture.hand_folded(), inputs, XNNPackRecipeType[recipe])
    (stock_output,) = xnnfold.run_pte(stock.get_pte_buffer(), inputs)
    with torch.no_grad():
        expected = fixture.model()(*inputs)
    error = float((output - expected).abs().max())
    stock_error = float((stock_output - expected).abs().max())
    assert error <= stock_error * QUANTIZED_SLACK + 1e-6, (error, stock_error)


class _TiedHead(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(1024, 64)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return nn.functional.linear(torch.tanh(self.emb(ids)), self.emb.weight)


@pytest.mark.slow
@pytest.mark.runtime
def test_tie_tables_stores_a_tied_table_once(tmp_path: Any) -> None:
    torch.manual_seed(0)
    model = _TiedHead().eval()
    ids = torch.randint(0, 1024, (8,), generator=torch.Generator().manual_seed(1))
    default = export_with_recipe(model, [(ids,)], ExportRecipe.get_recipe(XnnfoldRecipeType.FP32))
    assert xnnfold.data_files(default.get_executorch_program_manager()) == ()
    session = export_with_recipe(
        model, [(ids,)], ExportRecipe.get_recipe(XnnfoldRecipeType.FP32, tie_tables=True)
    )
    paths = xnnfold.save(session.get_executorch_program_manager(), tmp_path / "tied.pte")
    table = 1024 * 64 * 4
    assert sum(p.stat().st_size for p in paths) <= len(default.get_pte_buffer()) - 0.9 * table
    (logits,) = xnnfold.run_pte(paths[0].read_bytes(), [ids], data_path=paths[1])
    torch.testing.assert_close(logits, model(ids), atol=1e-5, rtol=1e-5)
