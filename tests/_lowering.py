"""Shared lowering cache: each model is lowered once per session, then checked many ways.

Not in conftest.py: the codemod's tests run where neither torch nor executorch is
installed, and pytest imports conftest.py for every test."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Optional

import torch
from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
from executorch.exir import EdgeProgramManager, to_edge_transform_and_lower

import xnnfold
from xnnfold.fixtures import Fixture, FIXTURES, layer_fixture


@dataclass
class Lowered:
    edge: EdgeProgramManager
    buffer: bytes
    summary: xnnfold.ProgramSummary


def lower_stock(
    model: torch.nn.Module, inputs: tuple[Any, ...], dynamic_shapes: Optional[Any] = None
) -> Lowered:
    ep = torch.export.export(model, inputs, dynamic_shapes=dynamic_shapes)
    edge = to_edge_transform_and_lower(ep, partitioner=[XnnpackPartitioner()])
    summary = xnnfold.summarize(edge)
    return Lowered(edge, edge.to_executorch().buffer, summary)


def lower_folding(
    model: torch.nn.Module, inputs: tuple[Any, ...], dynamic_shapes: Optional[Any] = None
) -> Lowered:
    edge = xnnfold.lower(model, inputs, dynamic_shapes=dynamic_shapes)
    summary = xnnfold.summarize(edge)
    return Lowered(edge, edge.to_executorch().buffer, summary)


def fixture_by_name(name: str) -> Fixture:
    if name in FIXTURES:
        return FIXTURES[name]
    norm, layer = name.split("-")
    return layer_fixture(norm, layer)


@functools.cache
def lowered_folding(name: str) -> Lowered:
    fixture = fixture_by_name(name)
    return lower_folding(fixture.model(), fixture.inputs())


@functools.cache
def lowered_hand_folded(name: str) -> Lowered:
    fixture = fixture_by_name(name)
    return lower_stock(fixture.hand_folded(), fixture.inputs())


@functools.cache
def lowered_dynamic(name: str) -> Lowered:
    fixture = fixture_by_name(name)
    assert fixture.dynamic_shapes is not None
    return lower_folding(fixture.model(), fixture.inputs(), fixture.dynamic_shapes())
