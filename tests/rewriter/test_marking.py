"""prepare_for_xnnpack: finds every computed tensor, marks it through export, changes nothing else."""

from __future__ import annotations

import pickle

import pytest
import torch
from executorch.exir import to_edge
from torch import nn
from torch.nn.utils import parametrize
from torch.nn.utils.parametrizations import orthogonal, spectral_norm, weight_norm

from xnnfold import find_sites, prepare_for_xnnpack, unprepare_for_xnnpack
from xnnfold._meta import SITE_META_KEY
from xnnfold.fixtures import layer_fixture, NORMS
from xnnfold.passes._ops import EDGE_GEMM_ARGS
from xnnfold.passes.analysis import site_of

LAYERS_FOR_MARKS = ("conv1d", "conv_transpose2d", "linear")
CASES = [
    (norm, layer)
    for norm in NORMS
    for layer in LAYERS_FOR_MARKS
    if not (norm == "weight_norm_dim2" and layer == "linear")
]
KIND = {
    "weight_norm_dim0": "weight_norm",
    "weight_norm_dim2": "weight_norm",
    "weight_norm_dimNone": "weight_norm",
    "spectral_norm": "spectral_norm",
    "legacy_weight_norm": "legacy_weight_norm",
    "legacy_spectral_norm": "legacy_spectral_norm",
}


def _hook_count(model: nn.Module) -> int:
    return sum(len(m._forward_pre_hooks) + len(m._forward_hooks) for m in model.modules())


def _classes(model: nn.Module) -> list[type]:
    """The class of every module and of every forward pre-hook (the legacy norms')."""
    modules = list(model.modules())
    return [type(m) for m in modules] + [
        type(h) for m in modules for h in m._forward_pre_hooks.values()
    ]


@pytest.mark.parametrize("norm,layer", CASES)
def test_finds_the_site(norm: str, layer: str) -> None:
    model = layer_fixture(norm, layer).model()
    (site,) = find_sites(model)
    assert (site.module, site.tensor, site.kind) == ("", "weight", KIND[norm])


@pytest.mark.parametrize("norm,layer", CASES)
def test_outputs_and_state_dict_unchanged(norm: str, layer: str) -> None:
    fixture = layer_fixture(norm, layer)
    model, inputs = fixture.model(), fixture.inputs()
    before_out = model(*inputs).detach()
    before_state = {k: v.clone() for k, v in model.state_dict().items()}
    assert prepare_for_xnnpack(model) is model
    assert torch.equal(model(*inputs), before_out)
    after_state = model.state_dict()
    assert list(after_state) == list(before_state)
    assert all(torch.equal(after_state[k], v) for k, v in before_state.items())


@pytest.mark.parametrize("norm,layer", CASES)
def test_is_idempotent(norm: str, layer: str) -> None:
    model = prepare_for_xnnpack(layer_fixture(norm, layer).model())
    hooks, classes = _hook_count(model), _classes(model)
    prepare_for_xnnpack(model)
    assert _hook_count(model) == hooks and _classes(model) == classes


@pytest.mark.parametrize("norm,layer", CASES)
def test_marks_survive_export_and_edge_decompositions(norm: str, layer: str) -> None:
    fixture = layer_fixture(norm, layer)
    model = prepare_for_xnnpack(fixture.model())
    ep = torch.export.export(model, fixture.inputs())
    marked = [n for n in ep.graph.nodes if site_of(n) == "weight"]
    assert marked, "no exported node carries the site mark"
    edge = to_edge(ep).exported_program()
    gemm = next(
        n for n in edge.graph.nodes if n.op == "call_function" and n.target in EDGE_GEMM_ARGS
    )
    weight = gemm.args[EDGE_GEMM_ARGS[gemm.target][0]]
    while weight.op == "call_function" and site_of(weight) is None:
        weight = weight.all_input_nodes[0]  # the transpose addmm adds is not the norm's
    assert site_of(weight) == "weight"
    computed = [n for n in edge.graph.nodes if n.op == "call_function" and site_of(n)]
    assert all(site_of(n) == "weight" for n in computed)


def test_marks_only_while_exporting(monkeypatch: pytest.MonkeyPatch) -> None:
    """An eager forward of a prepared model enters no annotation; export does, with the site."""
    import torch.fx.traceback as fx_traceback

    entered: list[dict[str, object]] = []
    real = fx_traceback.annotate

    def spy(meta: dict[str, object]) -> object:
        if SITE_META_KEY in meta:  # torch.export annotates for its own reasons too
            entered.append(dict(meta))
        return real(meta)

    monkeypatch.setattr(fx_traceback, "annotate", spy)
    fixture = layer_fixture("weight_norm_dim0", "conv1d")
    model = prepare_for_xnnpack(fixture.model())
    model(*fixture.inputs())
    assert entered == []
    torch.export.export(model, fixture.inputs())
    assert entered and all(meta == {SITE_META_KEY: "weight"} for meta in entered)


def test_names_nested_module_paths() -> None:
    model = nn.Sequential(nn.Sequential(nn.ReLU(), weight_norm(nn.Linear(3, 3))))
    model[0].add_module("legacy", torch.nn.utils.weight_norm(nn.Linear(3, 3), name="weight"))
    names = [s.name for s in find_sites(prepare_for_xnnpack(model))]
    assert names == ["0.1.weight", "0.legacy.weight"]


def test_reports_orthogonal_and_user_parametrizations() -> None:
    class Double(nn.Module):
        def forward(self, w: torch.Tensor) -> torch.Tensor:
            return w * 2

    model = nn.Sequential(orthogonal(nn.Linear(4, 4)), nn.Linear(4, 4))
    parametrize.register_parametrization(model[1], "bias", Double())
    kinds = [(s.name, s.kind) for s in find_sites(model)]
    assert kinds == [("0.weight", "orthogonal"), ("1.bias", "parametrization:Double")]


@pytest.mark.parametrize("norm", ["spectral_norm", "legacy_spectral_norm"])
def test_training_mode_spectral_norm_is_a_clear_error(norm: str) -> None:
    model = layer_fixture(norm, "linear").model().train()
    with pytest.raises(ValueError, match=r"model\.eval\(\)"):
        prepare_for_xnnpack(model)


def test_training_mode_after_prepare_is_a_clear_error_at_export() -> None:
    fixture = layer_fixture("spectral_norm", "linear")
    model = prepare_for_xnnpack(fixture.model()).train()
    with pytest.raises(ValueError, match=r"model\.eval\(\)"):
        torch.export.export(model, fixture.inputs())


def test_training_mode_weight_norm_is_fine() -> None:
    model = layer_fixture("weight_norm_dim0", "linear").model().train()
    assert prepare_for_xnnpack(model) is model


def test_rejects_a_non_module() -> None:
    with pytest.raises(TypeError, match="torch.nn.Module"):
        prepare_for_xnnpack(lambda x: x)  # type: ignore[arg-type]


def test_model_without_sites_is_left_alone() -> None:
    model = nn.Sequential(nn.Linear(3, 3), nn.Conv1d(3, 3, 1))
    hooks = _hook_count(model)
    prepare_for_xnnpack(model)
    assert find_sites(model) == [] and _hook_count(model) == hooks


def test_legacy_removal_still_works_after_prepare() -> None:
    model = prepare_for_xnnpack(layer_fixture("legacy_weight_norm", "conv1d").model())
    torch.nn.utils.remove_weight_norm(model)
    assert find_sites(model) == [] and isinstance(model.weight, nn.Parameter)


@pytest.mark.parametrize("norm", ["spectral_norm", "legacy_weight_norm"])
def test_prepare_changes_classes_only_and_unprepare_gives_them_back(norm: str) -> None:
    model = layer_fixture(norm, "conv1d").model()
    hooks, classes = _hook_count(model), _classes(model)
    prepare_for_xnnpack(model)
    assert _hook_count(model) == hooks and _classes(model) != classes
    unprepare_for_xnnpack(model)
    unprepare_for_xnnpack(model)
    assert _hook_count(model) == hooks and _classes(model) == classes


def test_a_parametrization_removed_after_prepare_leaves_a_plain_parameter() -> None:
    model = prepare_for_xnnpack(weight_norm(nn.Linear(3, 3)))
    weight = model.weight.detach().clone()
    parametrize.remove_parametrizations(model, "weight")
    assert find_sites(model) == [] and torch.equal(model.weight, weight)


@pytest.mark.parametrize("norm", ["legacy_weight_norm", "legacy_spectral_norm"])
def test_prepared_legacy_model_still_pickles(norm: str) -> None:
    # (parametrized modules refuse pickling with or without xnnfold)
    fixture = layer_fixture(norm, "conv1d")
    model = prepare_for_xnnpack(fixture.model())
    clone = pickle.loads(pickle.dumps(model))
    assert torch.equal(clone(*fixture.inputs()), model(*fixture.inputs()))


def test_spectral_norm_in_eval_does_not_touch_buffers() -> None:
    model = spectral_norm(nn.Linear(5, 5)).eval()
    u = model.parametrizations.weight[0]._u.clone()
    prepare_for_xnnpack(model)
    torch.export.export(model, (torch.randn(2, 5),))
    assert torch.equal(model.parametrizations.weight[0]._u, u)


# --------------------------------------------------------------------------------------
# Under dynamo (strict export, a torch.cond branch, torch.compile) the hooks leave the
# nodes unmarked instead of failing the trace: the stock partitioner lowers these, so a
# prepared model must export and fold there too.


class _Branches(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = weight_norm(nn.Linear(8, 8))
        self.b = weight_norm(nn.Linear(8, 8))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cond(x.sum() > 0, lambda x: self.a(x), lambda x: self.b(x), (x,))


@pytest.mark.runtime
@pytest.mark.parametrize("norm", ["weight_norm_dim0", "legacy_weight_norm", "spectral_norm"])
def test_strict_export_of_a_prepared_model_lowers_and_folds(norm: str) -> None:
    import xnnfold

    fixture = layer_fixture(norm, "linear")
    model, inputs = prepare_for_xnnpack(fixture.model()), fixture.inputs()
    ep = torch.export.export(model, inputs, strict=True)
    from executorch.exir import to_edge_transform_and_lower

    edge = to_edge_transform_and_lower(ep, partitioner=[xnnfold.XnnpackFoldingPartitioner()])
    assert [r.folded for r in xnnfold.explain(edge).rows] == [("weight",)]
    (out,) = xnnfold.run_pte(edge.to_executorch().buffer, inputs)
    with torch.no_grad():
        torch.testing.assert_close(out, fixture.model()(*inputs), atol=1e-5, rtol=1e-5)


def test_a_prepared_module_in_a_torch_cond_branch_exports() -> None:
    torch.manual_seed(0)
    model = prepare_for_xnnpack(_Branches().eval())
    x = torch.randn(3, 8, generator=torch.Generator().manual_seed(1))
    ep = torch.export.export(model, (x,))
    torch.testing.assert_close(ep.module()(x), model(x))


def test_torch_compile_fullgraph_of_a_prepared_model_runs() -> None:
    fixture = layer_fixture("weight_norm_dim0", "conv1d")
    model, inputs = prepare_for_xnnpack(fixture.model()), fixture.inputs()
    compiled = torch.compile(model, fullgraph=True, backend="eager")
    with torch.no_grad():
        torch.testing.assert_close(compiled(*inputs), fixture.model()(*inputs))


@pytest.mark.parametrize("norm", ["spectral_norm", "legacy_spectral_norm"])
def test_training_mode_spectral_norm_is_a_clear_error_under_strict_export(norm: str) -> None:
    fixture = layer_fixture(norm, "linear")
    model = prepare_for_xnnpack(fixture.model()).train()
    with pytest.raises(Exception, match="training mode"):
        torch.export.export(model, fixture.inputs(), strict=True)
