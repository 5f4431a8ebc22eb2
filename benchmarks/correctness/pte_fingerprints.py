"""Fingerprints of every `.pte` the fixtures produce, to prove a refactor changed no program.

A change meant to keep behaviour (a module moved, a helper merged) must leave every
lowered program byte-identical. This script lowers each fixture (the registry, the
norm x layer grid, the patterns, the architectures) three ways and records the SHA-256
and size of each `.pte`:

- ``xnnfold``: ``prepare_for_xnnpack`` + `XnnpackFoldingPartitioner`;
- ``stock``: the same model with executorch's `XnnpackPartitioner`, after a folding
  lowering installed the preprocess hook (a program xnnfold did not mark must not change);
- ``hand``: the hand-folded twin with the stock partitioner.

For the ``xnnfold`` variant it also records the SHA-256 of `xnnfold.explain`'s rows (where
each GEMM ran, what folded, each reason with its code, the growth ledger), so a refactor
that keeps the bytes but changes a reason shows too.

    python benchmarks/correctness/pte_fingerprints.py --write benchmarks/correctness/pte_fingerprints.json
    python benchmarks/correctness/pte_fingerprints.py --check benchmarks/correctness/pte_fingerprints.json

``--check`` exits 1 and lists every program whose bytes differ (or that no longer
lowers), and every fixture with nothing to fold (`SAME_AS_STOCK`: a tied language model)
whose xnnfold program is not the stock one byte for byte. Lowering runs on one thread: with more, a reduction rounds differently and the
weight_norm(dim=2) fixtures' weights change in the last bit, in the hand-folded twins too.
Fingerprints hold for one torch and executorch release (the file records which, and
``--check`` refuses a file made with others) and for one CPU model: spectral_norm's power
iteration and a var_mean round differently on another CPU, in the stock and hand-folded
programs too (28 of the 213 programs differ between two x86_64 machines of the same
kind). So a refactor is checked against a baseline written on the same machine from the
code before it (``--write /tmp/base.json``, then ``--check /tmp/base.json``).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from importlib import metadata
from pathlib import Path
from typing import Any, Callable

VARIANTS = ("xnnfold", "stock", "hand")


# Fixtures with nothing to fold: their xnnfold program must be the stock one, byte for
# byte (a tied table is stored as stock stores it unless tie_tables=True).
SAME_AS_STOCK = ("tied_lm",)


def _fixtures() -> dict[str, Any]:
    from xnnfold.fixtures import FIXTURES, layer_fixture, LAYERS, NORMS, TIED_LM

    found: dict[str, Any] = {**FIXTURES, TIED_LM.name: TIED_LM}
    for norm in NORMS:
        for layer in LAYERS:
            if norm == "weight_norm_dim2" and layer == "linear":
                continue  # not a model: weight_norm(dim=2) needs a weight of rank 3
            fixture = layer_fixture(norm, layer)
            found[fixture.name] = fixture
    return found


def _lower(fixture: Any, variant: str) -> tuple[bytes, str]:
    import torch
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import to_edge_transform_and_lower

    import xnnfold

    model = fixture.hand_folded() if variant == "hand" else fixture.model()
    if variant == "xnnfold":
        model = xnnfold.prepare_for_xnnpack(model)
    dynamic = fixture.dynamic_shapes() if fixture.dynamic_shapes is not None else None
    ep = torch.export.export(model, fixture.inputs(), dynamic_shapes=dynamic)
    partitioner: Any = (
        xnnfold.XnnpackFoldingPartitioner(facts=xnnfold.CrossMethodFacts())
        if variant == "xnnfold"
        else XnnpackPartitioner()
    )
    edge = to_edge_transform_and_lower(ep, partitioner=[partitioner])
    rows = repr(xnnfold.explain(edge).rows) if variant == "xnnfold" else ""
    return bytes(edge.to_executorch().buffer), rows


def fingerprints(names: list[str] | None, progress: Callable[[str], None]) -> dict[str, Any]:
    fixtures = _fixtures()
    programs: dict[str, dict[str, Any]] = {}
    for name in names or sorted(fixtures):
        for variant in VARIANTS:
            key = f"{name}/{variant}"
            progress(key)
            try:
                buffer, rows = _lower(fixtures[name], variant)
            except Exception as error:  # recorded, so a refactor that fixes or breaks it shows
                programs[key] = {"error": f"{type(error).__name__}: {str(error)[:200]}"}
                continue
            programs[key] = {"sha256": hashlib.sha256(buffer).hexdigest(), "bytes": len(buffer)}
            if rows:
                programs[key]["explain"] = hashlib.sha256(rows.encode()).hexdigest()
    return {
        "releases": {p: metadata.version(p) for p in ("torch", "executorch")},
        "programs": programs,
    }


def unlike_stock(found: dict[str, Any]) -> list[str]:
    """One line per `SAME_AS_STOCK` fixture whose xnnfold program is not the stock one."""
    lines = []
    for name in SAME_AS_STOCK:
        ours, stock = (
            found["programs"].get(f"{name}/xnnfold"),
            found["programs"].get(f"{name}/stock"),
        )
        if ours is not None and stock is not None and ours.get("sha256") != stock.get("sha256"):
            lines.append(f"{name}: xnnfold's program is not stock's: {ours} != {stock}")
    return lines


def compare(expected: dict[str, Any], found: dict[str, Any]) -> list[str]:
    """One line per program that differs between two fingerprint sets."""
    lines = []
    for key in sorted(set(expected["programs"]) | set(found["programs"])):
        before, after = expected["programs"].get(key), found["programs"].get(key)
        if before != after:
            lines.append(f"{key}: {before} -> {after}")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--write", type=Path, help="record the fingerprints in this file")
    mode.add_argument("--check", type=Path, help="compare with the fingerprints in this file")
    parser.add_argument("--only", nargs="+", help="these fixtures only (names as recorded)")
    args = parser.parse_args(argv)
    import torch

    # A reduction split over threads rounds differently: the weight_norm(dim=2) fixtures'
    # folded (and hand-folded) weights change in the last bit with the thread count.
    torch.set_num_threads(1)

    def progress(key: str) -> None:
        print(f"lowering {key}", file=sys.stderr, flush=True)

    if args.check:
        expected = json.loads(args.check.read_text())
        releases = {p: metadata.version(p) for p in ("torch", "executorch")}
        if expected["releases"] != releases:
            print(
                f"{args.check} was recorded with {expected['releases']}, this is {releases}: "
                "record a baseline with these releases first (--write, on the code before the change)",
                file=sys.stderr,
            )
            return 2
        names = args.only or sorted({k.rsplit("/", 1)[0] for k in expected["programs"]})
        found = fingerprints(names, progress)
        if args.only:
            expected = {
                **expected,
                "programs": {
                    k: v for k, v in expected["programs"].items() if k.rsplit("/", 1)[0] in names
                },
            }
        differences = compare(expected, found) + unlike_stock(found)
        for line in differences:
            print(line)
        print(
            f"{len(found['programs'])} programs, {len(differences)} differ",
            file=sys.stderr,
        )
        return 1 if differences else 0
    result = fingerprints(args.only, progress)
    for line in unlike_stock(result):
        print(line)
    args.write.write_text(json.dumps(result, indent=1, sort_keys=True) + "\n")
    errors = [k for k, v in result["programs"].items() if "error" in v]
    print(
        f"{len(result['programs'])} programs recorded in {args.write}"
        + (f"; {len(errors)} do not lower: {', '.join(errors)}" if errors else ""),
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
