"""Op arguments that executorch's XNNPACK backend serializes differently from eager.

The stock configs accept these nodes and XNNPACK computes something else than eager
PyTorch (`benchmarks/correctness/op_arguments.py` finds them, docs/limits.md names the
upstream code):

- ``avg_pool2d`` with padding, ``count_include_pad=False`` and a ``divisor_override``:
  `AvgPoolingConfig` accepts a divisor equal to the window, and XNNPACK's average pooling
  divides a window that reaches the padded border by the elements inside the input
  (``op_avg_pooling2d.py`` has no divisor field), where eager divides by the divisor
  (XNF520).
- ``upsample_bilinear2d`` with ``scale_factors`` and ``align_corners=False`` whose output
  size is not the input size times the scale: XNNPACK's resize maps coordinates by the
  sizes (``op_static_resize_bilinear_2d.py`` serializes only the output size), where eager
  maps them by ``1 / scale`` (XNF521).
- ``max.dim`` (its values) over a dim other than 2 or 3 as written (``-1`` included) or
  without ``keepdim``: `MaxDimConfig` accepts any, and XNNPACK's serializer
  (``op_max_dim.py``) raises on them, so lowering stops (XNF522).

`checked_configs` replaces each such stock config by a subclass of it (same
``target_name``, so it replaces rather than joins) that declines those nodes: they run
on the portable kernels, as eager computes them. The stock configs themselves are never
changed, and a node without such an argument is accepted exactly as before, so a program
without one lowers to the same bytes. `argument_declines` names the declined nodes once
per partition, with a WARNING, for the reasons `explain` shows.
"""

from __future__ import annotations

import logging
import math
from typing import Callable, Mapping, Optional, Sequence

from executorch.backends.xnnpack.partition.config.generic_node_configs import (
    AvgPoolingConfig,
    UpsampleBilinear2dConfig,
)
from executorch.backends.xnnpack.partition.config.node_configs import MaxDimConfig
from executorch.backends.xnnpack.partition.config.xnnpack_config import XNNPartitionerConfig
from executorch.exir.backend.canonical_partitioners.config_partitioner import (
    format_target_name,
    PartitionerConfig,
)
from torch.export import ExportedProgram
from torch.fx import Node

from xnnfold._meta import VAL_META_KEY
from xnnfold.passes._node_arguments import argument
from xnnfold.passes._reason_codes import (
    MAX_DIM_ARGUMENTS,
    POOL_DIVISOR_PADDING,
    Problem,
    RESIZE_SCALE,
)
from xnnfold.passes.partition._outcome import PARTITIONER_LOGGER
from xnnfold.passes.report._reasons import module_path

__all__ = [
    "argument_declines",
    "avg_pool_problem",
    "checked_configs",
    "CheckedAvgPoolingConfig",
    "CheckedMaxDimConfig",
    "CheckedUpsampleBilinear2dConfig",
    "max_dim_problem",
    "resize_problem",
]

logger = logging.getLogger(PARTITIONER_LOGGER)

# avg_pool2d(input, kernel_size, stride, padding, ceil_mode, count_include_pad,
# divisor_override) and upsample_bilinear2d.vec(input, output_size, align_corners,
# scale_factors): the arguments read below, by position and schema name.
_POOL_PADDING = (3, "padding")
_POOL_INCLUDE_PAD = (5, "count_include_pad")
_POOL_DIVISOR = (6, "divisor_override")
_RESIZE_ALIGN_CORNERS = (2, "align_corners")
_RESIZE_SCALES = (3, "scale_factors")
# max.dim(input, dim, keepdim): the dims XNNPACK's serializer takes, compared as written.
_MAX_DIM, _MAX_KEEPDIM, _MAX_DIMS = (1, "dim"), (2, "keepdim"), (2, 3)


def avg_pool_problem(node: Node) -> Optional[Problem]:
    """The problem with ``avg_pool2d`` node ``node`` that XNNPACK computes differently
    from eager, or None: a divisor override on a padded window that leaves the padding
    out of the average."""
    padding = argument(node, *_POOL_PADDING, ())
    pads = [padding] if isinstance(padding, int) else list(padding)  # type: ignore[call-overload]
    divisor = argument(node, *_POOL_DIVISOR, None)
    include_pad = argument(node, *_POOL_INCLUDE_PAD, True)
    if divisor is None or include_pad or not any(pads):
        return None
    return Problem(
        POOL_DIVISOR_PADDING,
        f"avg_pool2d with padding {pads}, count_include_pad=False and divisor_override="
        f"{divisor}: eager divides every window by {divisor}, XNNPACK divides a window "
        "reaching the padding by the elements inside the input",
    )


def resize_problem(node: Node) -> Optional[Problem]:
    """The problem with ``upsample_bilinear2d`` node ``node`` that XNNPACK computes
    differently from eager, or None: scale factors that are not the ratio of the output
    size to the input size, with ``align_corners=False``."""
    scales = argument(node, *_RESIZE_SCALES, None)
    if scales is None or argument(node, *_RESIZE_ALIGN_CORNERS, False):
        return None
    source = node.args[0]
    if not isinstance(source, Node) or VAL_META_KEY not in source.meta:
        return None
    sizes_in = tuple(source.meta[VAL_META_KEY].shape[-2:])
    sizes_out = tuple(node.meta[VAL_META_KEY].shape[-2:])
    for size_in, size_out, scale in zip(sizes_in, sizes_out, scales):  # type: ignore[call-overload]
        if not (isinstance(size_in, int) and isinstance(size_out, int)):
            return None  # dynamic: the stock config declines it
        if scale and scale > 0 and not math.isclose(size_in / size_out, 1 / scale, rel_tol=1e-9):
            return Problem(
                RESIZE_SCALE,
                f"upsample_bilinear2d with scale_factors={list(scales)} from "  # type: ignore[call-overload]
                f"{list(sizes_in)} to {list(sizes_out)}, align_corners=False: eager maps "
                "coordinates by 1 / scale, XNNPACK by the ratio of the sizes",
            )
    return None


def max_dim_problem(node: Node) -> Optional[Problem]:
    """The problem with ``max.dim`` node ``node`` that stops XNNPACK's serializer, or
    None: a dim other than 2 or 3 as written, or no ``keepdim``."""
    dim = argument(node, *_MAX_DIM, None)
    keepdim = argument(node, *_MAX_KEEPDIM, False)
    if dim in _MAX_DIMS and keepdim:
        return None
    return Problem(
        MAX_DIM_ARGUMENTS,
        f"max.dim with dim={dim}, keepdim={keepdim}: XNNPACK's serializer takes only dim "
        "2 or 3 (as written) with keepdim=True and stops the lowering on any other",
    )


class _ArgumentCheckMixin:
    """A stock config that also declines the arguments ``rule`` finds a problem with."""

    rule: Callable[[Node], Optional[Problem]]

    def stock_accepts(self, node: Node, ep: ExportedProgram) -> bool:
        return bool(super().check_constraints(node, ep))  # type: ignore[misc]

    def check_constraints(self, node: Node, ep: ExportedProgram) -> bool:
        return self.stock_accepts(node, ep) and type(self).rule(node) is None


class CheckedAvgPoolingConfig(_ArgumentCheckMixin, AvgPoolingConfig):
    """`AvgPoolingConfig` that leaves on portable what `avg_pool_problem` finds."""

    rule = staticmethod(avg_pool_problem)


class CheckedUpsampleBilinear2dConfig(_ArgumentCheckMixin, UpsampleBilinear2dConfig):
    """`UpsampleBilinear2dConfig` that leaves on portable what `resize_problem` finds."""

    rule = staticmethod(resize_problem)


class CheckedMaxDimConfig(_ArgumentCheckMixin, MaxDimConfig):
    """`MaxDimConfig` that leaves on portable what `max_dim_problem` finds."""

    rule = staticmethod(max_dim_problem)


# Stock config -> its checked replacement (same target_name).
_CHECKED: Mapping[type[XNNPartitionerConfig], type[XNNPartitionerConfig]] = {
    AvgPoolingConfig: CheckedAvgPoolingConfig,
    MaxDimConfig: CheckedMaxDimConfig,
    UpsampleBilinear2dConfig: CheckedUpsampleBilinear2dConfig,
}


def checked_configs(
    configs: Sequence[type[XNNPartitionerConfig]],
) -> list[type[XNNPartitionerConfig]]:
    """``configs`` with each stock config that has an argument check replaced by its
    checked version."""
    return [_CHECKED.get(config, config) for config in configs]


def argument_declines(
    ep: ExportedProgram,
    configs: Mapping[str, PartitionerConfig],
    delegated: frozenset[str],
) -> dict[str, Problem]:
    """The nodes of ``ep`` left outside the delegates only for an argument XNNPACK
    computes differently from eager, by name, each with its problem; warns once about
    each. ``configs`` are the partitioner's, by target name; a node its stock config
    declines anyway (a dtype, a rank) is not named."""
    found: dict[str, Problem] = {}
    for node in ep.graph.nodes:
        if node.op != "call_function" or node.name in delegated:
            continue
        config = configs.get(format_target_name(getattr(node.target, "__name__", "")))
        if not isinstance(config, _ArgumentCheckMixin):
            continue
        problem = type(config).rule(node)
        if problem is None or not config.stock_accepts(node, ep):
            continue
        found[node.name] = problem
        logger.warning(
            "xnnfold: '%s' in module '%s' stays on the portable kernels: %s [%s]",
            node.name,
            module_path(node),
            problem,
            problem.code.code,
        )
    return found
