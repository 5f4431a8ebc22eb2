"""Exporting a built model and screening its program for GEMMs with a computed argument."""

from __future__ import annotations

from typing import Any

# ATen op names (``OpOverload._opname``) that are GEMMs or become one.
GEMMS = frozenset(
    {
        "linear",
        "conv1d",
        "conv2d",
        "conv3d",
        "conv_transpose1d",
        "conv_transpose2d",
        "conv_transpose3d",
        "convolution",
        "matmul",
        "mm",
        "addmm",
        "bmm",
        "einsum",
        "baddbmm",
    }
)


def leaves(value: Any) -> list[Any]:
    """The tensors of a model's output, in order: through ``to_tuple()`` (transformers'
    outputs), dicts, lists and tuples; anything else is dropped."""
    import torch

    if isinstance(value, torch.Tensor):
        return [value]
    if hasattr(value, "to_tuple"):
        value = value.to_tuple()
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, (list, tuple)):
        return [leaf for item in value for leaf in leaves(item)]
    return []


def positional(model: Any, names: list[str]) -> Any:
    """``model`` taking its keyword inputs ``names`` positionally and returning the
    tensors of its output: the form torch.export and the runtime take."""
    import torch

    class Positional(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, *args: Any) -> tuple[Any, ...]:
            return tuple(leaves(self.model(**dict(zip(names, args)))))

    return Positional().eval()


def computed_gemm_args(ep: Any) -> bool:
    """Whether a GEMM-like op of the exported program reads a tensor computed from
    constants (no user input above it): a candidate for xnnfold, to be asked `explain`.

    A GEMM reading a parameter directly is what stock delegates already; one reading only
    activations has no weight to fold.
    """
    import torch

    user = {s.arg.name for s in ep.graph_signature.input_specs if s.kind.name == "USER_INPUT"}
    run_time: set[Any] = set()
    for node in ep.graph.nodes:
        if node.op == "placeholder":
            if node.name in user:
                run_time.add(node)
        elif any(arg in run_time for arg in node.all_input_nodes):
            run_time.add(node)
    for node in ep.graph.nodes:
        target = node.target
        if node.op != "call_function" or not isinstance(target, torch._ops.OpOverload):
            continue
        if target._opname not in GEMMS:
            continue
        for arg in node.all_input_nodes:
            if arg.op != "placeholder" and arg not in run_time:
                return True
    return False


def compare(actual: list[Any], expected: list[Any]) -> tuple[float, float]:
    """(max abs diff, max abs of eager) over every float output; (inf, 0) where the
    outputs' count or shapes differ or an integer output is not equal."""
    import torch

    diff, scale = 0.0, 0.0
    if len(actual) != len(expected):
        return float("inf"), 0.0
    for a, e in zip(actual, expected):
        if not isinstance(e, torch.Tensor):
            continue
        if a.shape != e.shape:
            return float("inf"), 0.0
        if e.is_floating_point():
            e32, a32 = e.float(), a.float()
            diff = max(diff, (a32 - e32).abs().max().item() if e.numel() else 0.0)
            scale = max(scale, e32.abs().max().item() if e.numel() else 0.0)
        elif not torch.equal(a, e):
            return float("inf"), 0.0
    return diff, scale
