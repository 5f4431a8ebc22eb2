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
    tie_tables: bool = False,
) -> EdgeProgramManager:
    """Prepare, export and lower ``model`` with `XnnpackFoldingPartitioner`.

    Returns the `EdgeProgramManager`, whose program can be inspected (`summarize`) before
    ``.to_executorch()``. The default partitioner gets this lowering's own
    `CrossMethodFacts` and ``tie_tables``: True stores a tied table once, in a data file
    the ``.pte`` then needs (write both with `xnnfold.save`); False, the default, keeps the
    ``.pte`` self-contained (docs/tied-tables.md).
    """
    if not isinstance(example_inputs, tuple):
        raise TypeError(
            "example_inputs must be a tuple of positional inputs, got "
            f"{type(example_inputs).__name__}; wrap a single tensor as (x,)"
        )
    if partitioner is not None and tie_tables:
        raise ValueError(
            "xnnfold.lower: tie_tables applies to the default partitioner; with your own, "
            "pass it there: XnnpackFoldingPartitioner(tie_tables=True)"
        )
    model = prepare_for_xnnpack(model)
    ep = torch.export.export(model, example_inputs, dynamic_shapes=dynamic_shapes)
    if partitioner is None:
        partitioner = XnnpackFoldingPartitioner(facts=CrossMethodFacts(), tie_tables=tie_tables)
    return to_edge_transform_and_lower(ep, partitioner=[partitioner])


def to_executorch(
    model: nn.Module,
    example_inputs: tuple[Any, ...],
    *,
    dynamic_shapes: Optional[Any] = None,
    partitioner: Optional[XnnpackFoldingPartitioner] = None,
    tie_tables: bool = False,
) -> ExecutorchProgramManager:
    """The common case in one call: prepare, export, lower with folding, emit.

    Args:
        model: an eval-mode model (spectral_norm needs eval mode).
        example_inputs: positional inputs for ``torch.export.export``.
        dynamic_shapes: passed to ``torch.export.export``.
        partitioner: a configured `XnnpackFoldingPartitioner` (default options otherwise).
        tie_tables: for the default partitioner: store a tied table once, in a data file
            the ``.pte`` then needs (docs/tied-tables.md). Off by default: ``.buffer``
            is a self-contained ``.pte``.

    Returns:
        The `ExecutorchProgramManager`; ``.buffer`` holds the ``.pte`` bytes. With
        ``tie_tables=True`` a program with a tied table also needs its ``.ptd``.

    Example::

        et = xnnfold.to_executorch(model.eval(), (x,))
        with open("model.pte", "wb") as f:
            et.write_to_file(f)
        # tie_tables=True: write model.pte and model.ptd, the data it loads with
        xnnfold.save(xnnfold.to_executorch(model.eval(), (x,), tie_tables=True), "model.pte")
    """
    return lower(
        model,
        example_inputs,
        dynamic_shapes=dynamic_shapes,
        partitioner=partitioner,
        tie_tables=tie_tables,
    ).to_executorch()
