"""One call from an eager model to an ExecuTorch program with computed weights folded."""

from __future__ import annotations

from typing import Any, Optional

import torch
from executorch.exir import (
    EdgeProgramManager,
    ExecutorchProgramManager,
    to_edge_transform_and_lower,
)
from torch import nn

from xnnfold.passes import CrossMethodFacts, XnnpackFoldingPartitioner
from xnnfold.rewriter import prepare_for_xnnpack

__all__ = ["lower", "to_executorch"]


def lower(
    model: nn.Module,
    example_inputs: tuple[Any, ...],
    *,
    dynamic_shapes: Optional[Any] = None,
    partitioner: Optional[XnnpackFoldingPartitioner] = None,
) -> EdgeProgramManager:
    """Prepare, export and lower ``model`` with `XnnpackFoldingPartitioner`.

    Returns the `EdgeProgramManager`, whose program can be inspected (`summarize`) before
    ``.to_executorch()``. The default partitioner gets this lowering's own
    `CrossMethodFacts`.
    """
    if not isinstance(example_inputs, tuple):
        raise TypeError(
            "example_inputs must be a tuple of positional inputs, got "
            f"{type(example_inputs).__name__}; wrap a single tensor as (x,)"
        )
    model = prepare_for_xnnpack(model)
    ep = torch.export.export(model, example_inputs, dynamic_shapes=dynamic_shapes)
    if partitioner is None:
        partitioner = XnnpackFoldingPartitioner(facts=CrossMethodFacts())
    return to_edge_transform_and_lower(ep, partitioner=[partitioner])


def to_executorch(
    model: nn.Module,
    example_inputs: tuple[Any, ...],
    *,
    dynamic_shapes: Optional[Any] = None,
    partitioner: Optional[XnnpackFoldingPartitioner] = None,
) -> ExecutorchProgramManager:
    """The common case in one call: prepare, export, lower with folding, emit.

    Args:
        model: an eval-mode model (spectral_norm needs eval mode).
        example_inputs: positional inputs for ``torch.export.export``.
        dynamic_shapes: passed to ``torch.export.export``.
        partitioner: a configured `XnnpackFoldingPartitioner` (default options otherwise).

    Returns:
        The `ExecutorchProgramManager`; ``.buffer`` holds the ``.pte`` bytes, and a
        program with a tied table also needs its ``.ptd`` (docs/tied-tables.md).

    Example::

        et = xnnfold.to_executorch(model.eval(), (x,))
        xnnfold.save(et, "model.pte")  # and the .ptd beside it, when the program needs one
    """
    return lower(
        model, example_inputs, dynamic_shapes=dynamic_shapes, partitioner=partitioner
    ).to_executorch()
