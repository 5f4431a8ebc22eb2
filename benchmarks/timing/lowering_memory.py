"""Peak memory and time of one lowering, stock against xnnfold, each in its own process.

A model of a sweep is built as that sweep builds it (``timm:NAME`` with
`benchmarks.sweeps.timm.library.Timm`, ``transformers:MODULE:CLASS`` with
`benchmarks.sweeps.transformers.library.Transformers`:
random weights, the sweep's config and input) and exported as the sweep's worker exports
it (xnnfold's program through `xnnfold.prepare_for_xnnpack`). Each lowering then runs in
a fresh subprocess: `to_edge_transform_and_lower` through `XnnpackPartitioner` or
`XnnpackFoldingPartitioner` (``tie_tables=True``, as the sweep lowers), then
``to_executorch()`` and `xnnfold.save`, the span the sweep's ``lower_s`` times, measured
as the sweep measures it (`benchmarks.sweeps.engine.lowering_cost`, which the sweep's
``--relower`` runs in its workers too). The subprocess reports its peak resident set
(``VmHWM``, MiB, which includes building and exporting the model: the same for both
partitioners but for ``prepare_for_xnnpack``), what the lowering added to the resident
set at its peak over what the export left (``lower_peak``), and the lowering's wall and
CPU seconds. Lowerings alternate stock/xnnfold, starting with each in turn; the medians
and the ratios xnnfold/stock are printed last.

    PYTHONPATH=. /work/venvs/timm/bin/python benchmarks/timing/lowering_memory.py timm:eca_nfnet_l1
    PYTHONPATH=. python benchmarks/timing/lowering_memory.py --runs 3 \\
        transformers:transformers.models.speecht5.modeling_speecht5:SpeechT5ForSpeechToText
    PYTHONPATH=. python benchmarks/timing/lowering_memory.py --memory-gib 8 timm:nfnet_f5
    PYTHONPATH=. python benchmarks/timing/lowering_memory.py --profile 25 timm:beit_base_patch16_224
    PYTHONPATH=. python benchmarks/timing/lowering_memory.py --hand-folded timm:swinv2_base_window12_192

``--memory-gib`` caps each subprocess's address space (``RLIMIT_AS``) as the sweep's
``--worker-memory`` does; ``--profile N`` runs each lowering once more under cProfile and
prints its N top entries by cumulative and by own time; ``--hand-folded`` also lowers
the model's hand-folded twin (every computed weight stored, `bench_scale.hand_fold`) with
stock's partitioner, the lowering xnnfold's stands in for.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
STOCK, XNNFOLD = "stock", "xnnfold"
# Stock's partitioner on the hand-folded twin (`bench_scale.hand_fold`), with --hand-folded.
HAND = "hand-folded"


def _built(model: str) -> tuple[Any, tuple[Any, ...]]:
    """The sweep's wrapped module and positional inputs for ``model``."""
    from benchmarks.sweeps.engine.screen import positional

    library_name, _, rest = model.partition(":")
    if library_name == "timm":
        import timm.models._registry as registry

        from benchmarks.sweeps.timm.library import Timm

        built = Timm().build(f"timm.models.{registry._model_to_module[rest]}", rest)
    elif library_name == "transformers":
        from benchmarks.sweeps.transformers.library import Transformers

        group, _, name = rest.rpartition(":")
        built = Transformers().build(group, name)
    else:
        raise SystemExit(
            f"lowering_memory: {model!r}: expected timm:NAME or transformers:MODULE:CLASS"
        )
    names = list(built.inputs)
    return positional(built.model, names), tuple(built.inputs.values())


def _lower_here(model: str, label: str, memory_gib: float, profile: int) -> dict[str, Any]:
    """One lowering in this process: what `main` prints for it."""
    import resource

    if memory_gib:
        limit = int(memory_gib * 2**30)
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    # The repository's root, where `benchmarks` imports, whatever PYTHONPATH says.
    sys.path.insert(0, str(HERE.parents[1]))
    import torch

    from benchmarks.sweeps.engine.lowering_cost import exported, measured_lowering

    torch.set_num_threads(1)
    wrapped, args = _built(model)
    partitioner = STOCK if label == HAND else label
    if label == HAND:
        from benchmarks.timing.bench_scale import hand_fold

        wrapped = hand_fold(wrapped)
    ep = exported(partitioner, wrapped, args)
    profiler = None
    if profile:
        import cProfile

        profiler = cProfile.Profile()
    with tempfile.TemporaryDirectory(prefix="lowering-memory-") as directory:
        result = measured_lowering(ep, partitioner, Path(directory), around=profiler)
        if profiler is not None:
            import io
            import pstats

            for order in ("cumulative", "tottime"):
                out = io.StringIO()
                pstats.Stats(profiler, stream=out).sort_stats(order).print_stats(profile)
                result[f"profile_{order}"] = out.getvalue()
            # xnnfold's own functions, whatever their rank among executorch's.
            out = io.StringIO()
            stats = pstats.Stats(profiler, stream=out).sort_stats("cumulative")
            stats.print_stats("xnnfold/", profile)
            result["profile_xnnfold"] = out.getvalue()
    return result


def _one(model: str, label: str, memory_gib: float, profile: int) -> dict[str, Any]:
    """One lowering in a fresh subprocess."""
    command = [sys.executable, __file__, "--child", label, "--memory-gib", str(memory_gib)]
    command += ["--profile", str(profile), model]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        tail = done.stderr.strip().splitlines()[-3:]
        return {"error": f"exit {done.returncode}: {' | '.join(tail)}"}
    return json.loads(lines[-1])


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", help="timm:NAME or transformers:MODULE:CLASS")
    parser.add_argument("--runs", type=int, default=1, help="lowerings per partitioner")
    parser.add_argument("--memory-gib", type=float, default=0.0, help="RLIMIT_AS (0: none)")
    parser.add_argument("--profile", type=int, default=0, help="top N cProfile entries")
    parser.add_argument("--only", choices=(STOCK, XNNFOLD), help="one partitioner only")
    parser.add_argument(
        "--hand-folded",
        action="store_true",
        help="also lower the hand-folded twin with stock's partitioner (bench_scale.hand_fold)",
    )
    parser.add_argument("--child", choices=(STOCK, XNNFOLD, HAND), help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.child:
        print(
            json.dumps(
                _lower_here(options.model, options.child, options.memory_gib, options.profile)
            )
        )
        return 0
    labels = [options.only] if options.only else [STOCK, XNNFOLD]
    if options.hand_folded:
        labels.append(HAND)
    found: dict[str, list[dict[str, Any]]] = {label: [] for label in labels}
    for run in range(options.runs):
        for label in labels if run % 2 == 0 else list(reversed(labels)):
            result = _one(options.model, label, options.memory_gib, 0)
            found[label].append(result)
            shown = {k: v for k, v in result.items() if not k.startswith("profile")}
            print(f"{label:8} run {run + 1}: {json.dumps(shown)}", flush=True)
    if options.profile:
        for label in labels:
            result = _one(options.model, label, options.memory_gib, options.profile)
            for order in ("cumulative", "tottime", "xnnfold"):
                print(f"\n=== {label}: cProfile by {order} ===")
                print(result.get(f"profile_{order}", result.get("error", "")))
    keys = ("peak_mib", "lower_peak_mib", "lower_s", "lower_cpu_s")
    medians = {
        label: {
            key: _median([r[key] for r in results if key in r and "error" not in r]) for key in keys
        }
        for label, results in found.items()
    }
    for label, values in medians.items():
        print(f"{label:8} median: " + ", ".join(f"{k} {v:g}" for k, v in values.items()))
    if STOCK in labels and XNNFOLD in labels:
        ratios = {
            key: medians[XNNFOLD][key] / medians[STOCK][key]
            for key in keys
            if medians[STOCK][key] and medians[STOCK][key] == medians[STOCK][key]
        }
        print("xnnfold/stock: " + ", ".join(f"{k} {v:.3f}x" for k, v in ratios.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
