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
from typing import Final

from torch.export import ExportedProgram

from xnnfold._meta import EXTERNAL_CONSTANT_TAG, EXTERNAL_TAG_KEYS
from xnnfold.passes.analysis import TiedTables
from xnnfold.passes.partition._outcome import PARTITIONER_LOGGER

__all__ = ["TIED_TABLE_WARNING", "tag_external", "tag_tied_tables"]

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
