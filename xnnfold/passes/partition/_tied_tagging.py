"""Store a tied table once: tag both its copies for the same external data file.

`find_tied_tables` finds the constants a delegated linear takes as its weight and
an op outside the delegate also reads, in one method or across the methods of the
lowering (from the `CrossMethodFacts`). Tagging such a placeholder with executorch's two
external-data tags, the one XNNPACK's node visitor reads for the delegate's copy
(``meta["custom"]["delegate_constant_tag"]``) and the one the emitter reads for the
program's (``meta["constant_tag"]``), both under executorch's default external tag, puts
both copies in one ``.ptd``, where the named data store keeps identical bytes once.
``to_executorch(ExecutorchBackendConfig(external_constants=True))`` writes the same tag, so
the table is stored once whether the rest of the constants stay in the ``.pte`` or not.
executorch copies a placeholder's metadata onto the copy it makes for the delegate.

An untied table keeps its two copies; the partitioner gives its GEMM the reason (XNF517)
when it has none other (`_outcome.gemm_reason`).
"""

from __future__ import annotations

import logging
import warnings
from typing import Final, Mapping

from torch.export import ExportedProgram

from xnnfold._meta import EXTERNAL_CONSTANT_TAG, EXTERNAL_TAG_KEYS
from xnnfold.passes.analysis import tied_across_methods, TiedTables
from xnnfold.passes.partition._outcome import PARTITIONER_LOGGER

__all__ = ["TIED_TABLE_WARNING", "tag_external", "tag_tied_tables", "tie_tables"]

# The partitioner's warnings keep the logger name users configure and filter by.
logger = logging.getLogger(PARTITIONER_LOGGER)

# Said for each table stored once: the .pte alone no longer holds it. (The ``export``
# command, which writes both files and says so, leaves it out.)
TIED_TABLE_WARNING: Final = (
    "xnnfold: the tied table '%s' (%d bytes) is stored once, in the external data file "
    "'%s.ptd'; the .pte loads only with that file: write both with "
    "xnnfold.save(et, 'model.pte') (which names it model.ptd) and load the .pte with it "
    "as data_path, or keep the table in the .pte with tie_tables=False"
)


def tag_external(ep: ExportedProgram, placeholders: frozenset[str]) -> None:
    """Tag ``placeholders`` of ``ep`` for executorch's default external data file, for
    the program's copy and a delegate's alike."""
    for node in ep.graph.nodes:
        if node.op != "placeholder" or node.name not in placeholders:
            continue
        for meta_key, tag_key in EXTERNAL_TAG_KEYS:
            meta = node.meta.setdefault(meta_key, {}) if meta_key is not None else node.meta
            meta[tag_key] = EXTERNAL_CONSTANT_TAG


def tag_tied_tables(ep: ExportedProgram, tables: TiedTables) -> None:
    """Tag the tied tables of a partitioned program for one `.ptd`, and say so."""
    tag_external(ep, frozenset(t.placeholder for t in tables.tied))
    for table in tables.tied:
        # The .pte alone no longer holds the table: say so where it happens.
        logger.warning(
            TIED_TABLE_WARNING,
            table.fqn,
            table.nbytes,
            EXTERNAL_CONSTANT_TAG,
        )


def tie_tables(programs: Mapping[str, ExportedProgram]) -> dict[str, tuple[str, ...]]:
    """Deprecated: ``XnnpackFoldingPartitioner(tie_tables=True)`` stores a table shared
    across methods once while partitioning, with no call before lowering.

    Tags, on the exported (ATen) programs, the tables one method reads as a linear's
    weight and another reads otherwise (the same finding `CrossMethodFacts` makes for the
    partitioner), for executorch's default external data file. Tagged before lowering,
    such a table is a source the partitioner leaves alone: a weight computed from it is
    not folded (XNF503).

    Args:
        programs: the exported (ATen) programs by method name, as given to
            ``to_edge_transform_and_lower``.

    Returns:
        The placeholders tagged, by method; empty when no table is shared across methods
        (then nothing is changed).
    """
    warnings.warn(
        "xnnfold.tie_tables(programs) is deprecated: lower with "
        "XnnpackFoldingPartitioner(tie_tables=True), which stores a table shared across "
        "methods once while partitioning",
        DeprecationWarning,
        stacklevel=2,
    )
    if not isinstance(programs, Mapping) or not all(
        isinstance(ep, ExportedProgram) for ep in programs.values()
    ):
        raise TypeError(
            "xnnfold.tie_tables expects a dict of method name to torch.export's "
            f"ExportedProgram, as given to to_edge_transform_and_lower; got {type(programs).__name__}"
        )
    found = tied_across_methods(dict(programs))
    for method, placeholders in found.items():
        tag_external(programs[method], frozenset(placeholders))
    return found
