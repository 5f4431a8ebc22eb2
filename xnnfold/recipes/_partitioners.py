"""A stock recipe's `XnnpackPartitioner`, rebuilt as an `XnnpackFoldingPartitioner`.

The stock provider builds its partitioner inside the recipe (today
``XnnpackPartitioner(precision_type=...)``, a keyword its configs ignore), and a newer
release may build it otherwise. So the folding partitioner is not built from a copy of
those arguments but from the partitioner the stock recipe holds: the same config
classes, the same enabled precisions, the same config options and ``per_op_mode``. It is
then compared with the stock one, attribute for attribute on every config and on the
partitioner itself; a difference is an error naming it, never a partitioner that
delegates otherwise than stock where there is nothing to fold.
"""

from __future__ import annotations

from typing import Any, Final, Optional

from executorch.backends.xnnpack.partition.config.xnnpack_config import (
    ConfigPrecisionType,
    XNNPartitionerConfig,
)
from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner

from xnnfold.passes import CrossMethodFacts, XnnpackFoldingPartitioner

__all__ = ["RecipeMismatch", "folding_partitioner_like", "replace_partitioners"]

# Keywords `XNNPartitionerConfig.__init__` reads into attributes of the same name (1.4.1
# has no `enable_bf16`); the ones a stock config carries are handed on with its value.
CONFIG_OPTIONS: Final = ("force_non_static_weights_for_f32_linear", "enable_bf16")
# Partitioner attributes compared config by config rather than as a whole.
_CONFIGS_ATTRIBUTE: Final = "target_partitioner_configs"
# Config attribute whose order carries no meaning (it is only ever tested for membership).
_PRECISIONS_ATTRIBUTE: Final = "enabled_precision_types"

_FIX: Final = (
    "use executorch's XNNPackRecipeType recipe and swap its partitioner by hand "
    "(xnnfold.XnnpackFoldingPartitioner takes the same arguments), and report this "
    "executorch release to xnnfold"
)


class RecipeMismatch(RuntimeError):
    """A stock recipe holds a partitioner xnnfold cannot reproduce with folding on."""


def _precisions(configs: list[XNNPartitionerConfig]) -> Optional[list[ConfigPrecisionType]]:
    """The ``config_precisions`` that enables what ``configs`` enable: None when each
    enables every precision it supports, else every enabled one in first-seen order."""
    if all(list(c.enabled_precision_types) == list(c.supported_precision_types()) for c in configs):
        return None
    seen: list[ConfigPrecisionType] = []
    for config in configs:
        seen.extend(p for p in config.enabled_precision_types if p not in seen)
    return seen


def _options(configs: list[XNNPartitionerConfig]) -> dict[str, Any]:
    """The `CONFIG_OPTIONS` the configs carry, with the first config's value (the stock
    partitioner hands every config the same keywords; the comparison checks that)."""
    if not configs:
        return {}
    return {name: getattr(configs[0], name) for name in CONFIG_OPTIONS if hasattr(configs[0], name)}


def _normalized(name: str, value: Any) -> Any:
    return frozenset(value) if name == _PRECISIONS_ATTRIBUTE else value


def _differences(stock: XnnpackPartitioner, folding: XnnpackFoldingPartitioner) -> list[str]:
    """What ``folding`` does not share with ``stock``: a stock attribute missing or with
    another value, on the partitioner or on a config; a config missing, extra, or of a
    class that neither is nor extends the stock one."""
    found = [
        f"partitioner.{name} is {value!r} in stock, {getattr(folding, name, '(missing)')!r} here"
        for name, value in vars(stock).items()
        if name != _CONFIGS_ATTRIBUTE and getattr(folding, name, None) != value
    ]
    ours = getattr(folding, _CONFIGS_ATTRIBUTE)
    theirs = getattr(stock, _CONFIGS_ATTRIBUTE)
    found += [f"config for {target} missing" for target in theirs.keys() - ours.keys()]
    found += [f"config for {target} not in stock" for target in ours.keys() - theirs.keys()]
    for target, config in theirs.items():
        mine = ours.get(target)
        if mine is None:
            continue
        if not isinstance(mine, type(config)):
            found.append(f"{target}: {type(mine).__name__} is not a {type(config).__name__}")
        for name, value in vars(config).items():
            if not hasattr(mine, name) or _normalized(name, getattr(mine, name)) != _normalized(
                name, value
            ):
                found.append(
                    f"{type(config).__name__}.{name} is {value!r} in stock, "
                    f"{getattr(mine, name, '(missing)')!r} here"
                )
    return found


def folding_partitioner_like(
    stock: XnnpackPartitioner,
    *,
    recipe: str,
    tie_tables: bool = False,
    facts: Optional[CrossMethodFacts] = None,
) -> XnnpackFoldingPartitioner:
    """An `XnnpackFoldingPartitioner` configured as ``stock`` is, sharing ``facts`` with
    the recipe's other partitioners.

    Raises `RecipeMismatch` naming every difference when ``stock`` is not exactly an
    `XnnpackPartitioner` (a subclass may partition otherwise) or when the rebuilt
    partitioner differs from it in a config class or attribute.
    """
    if type(stock) is not XnnpackPartitioner:
        raise RecipeMismatch(
            f"xnnfold: the stock recipe {recipe!r} lowers with {type(stock).__qualname__}, "
            "not XnnpackPartitioner, and xnnfold only knows how to rebuild the latter with "
            f"folding on; {_FIX}"
        )
    configs = list(getattr(stock, _CONFIGS_ATTRIBUTE).values())
    folding = XnnpackFoldingPartitioner(
        [type(config) for config in configs],
        _precisions(configs),
        stock.per_op_mode,
        tie_tables=tie_tables,
        facts=facts,
        **_options(configs),
    )
    differences = _differences(stock, folding)
    if differences:
        raise RecipeMismatch(
            f"xnnfold: cannot rebuild the partitioner of the stock recipe {recipe!r} with "
            f"folding on: {'; '.join(differences)}; {_FIX}"
        )
    return folding


def _replaced(
    partitioners: list[Any], *, recipe: str, tie_tables: bool, facts: CrossMethodFacts
) -> list[Any]:
    return [
        folding_partitioner_like(p, recipe=recipe, tie_tables=tie_tables, facts=facts)
        if isinstance(p, XnnpackPartitioner) and not isinstance(p, XnnpackFoldingPartitioner)
        else p
        for p in partitioners
    ]


def replace_partitioners(
    partitioners: Optional[list[Any] | dict[str, list[Any]]],
    *,
    recipe: str,
    tie_tables: bool = False,
) -> Optional[list[Any] | dict[str, list[Any]]]:
    """``partitioners`` (a list, or one list per method, as `LoweringRecipe` takes them)
    with each `XnnpackPartitioner` replaced by `folding_partitioner_like` it; other
    partitioners, folding ones included, are kept in their place.

    The folding partitioners share one `CrossMethodFacts`: the recipe's methods may share
    tensors, and its partitioners serve each lowering the recipe runs, one at a time."""
    if partitioners is None:
        return None
    facts = CrossMethodFacts()
    if isinstance(partitioners, dict):
        return {
            method: _replaced(listed, recipe=recipe, tie_tables=tie_tables, facts=facts)
            for method, listed in partitioners.items()
        }
    return _replaced(partitioners, recipe=recipe, tie_tables=tie_tables, facts=facts)
