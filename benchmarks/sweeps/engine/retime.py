"""Retiming a row whose xnnfold program ran slower than stock's, so that noise cannot
decide it: the two programs, lowered again in a fresh worker, loaded alone in a fresh
process and timed over at least `CALLS` interleaved calls after `WARM_UP` untimed ones
(more for a fast program: `calls_for`), with the load average beside the figures. Where
the two programs' files are byte-identical (SHA-256 of the ``.pte`` and any ``.ptd``),
the ratio is 1 by construction: the row is "identical" and nothing is timed.

    python -m benchmarks.sweeps.engine.retime SPEC.json   # the timing process alone
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

# A row is retimed where xnnfold's median latency over stock's is above this.
SLOWER_ABOVE = 1.03
# Interleaved calls of each program (odd, for a median), after the untimed ones: at least
# `CALLS`, and as many as take `MIN_SECONDS` of both programs' calls, up to `MAX_CALLS`.
# Over 31 calls a 7 ms program (MiniCPMV4_6Model's) retimed 1.032x and 1.036x; over 201,
# 0.985x: on this machine a few milliseconds' noise decides 31 calls.
CALLS = 31
MIN_SECONDS = 3.0
MAX_CALLS = 1001
WARM_UP = 3
# The timing process's limit: this, plus `TIMING_HEADROOM` times what its calls take at
# the pace of each program's first call (`timing_timeout`), so a program of seconds a
# call (maxvit_large_tf_512's 10 s, xlarge_512's 17 s) still finishes on a loaded machine.
TIMING_TIMEOUT_S = 900.0
TIMING_HEADROOM = 3.0


def latency_ratio(path: dict[str, Any]) -> float | None:
    """xnnfold's median latency over stock's in the sweep's own timing, where both ran."""
    ours, stock = path.get("xnnfold", {}), path.get("stock", {})
    if ours.get("ms") and stock.get("ms"):
        return float(ours["ms"]) / float(stock["ms"])
    return None


def to_retime(results: dict[str, dict[str, Any]], *, again: bool = False) -> list[str]:
    """The classes whose sweep timing has xnnfold above `SLOWER_ABOVE` stock's, not yet
    retimed (all of them where ``again``)."""
    return sorted(
        name
        for name, result in results.items()
        if (latency_ratio(result.get("variants", {})) or 0.0) > SLOWER_ABOVE
        and (again or "retime" not in result)
    )


def identical(entries: dict[str, dict[str, Any]]) -> bool:
    """Whether the two programs' files hash alike (both hashed)."""
    hashes = [entry.get("sha256") for entry in entries.values()]
    return len(hashes) == 2 and hashes[0] is not None and hashes[0] == hashes[1]


def timing_timeout(first_ms: list[float]) -> float:
    """Seconds the timing process may take, where one call of each program took
    ``first_ms`` (ms) after lowering: `TIMING_TIMEOUT_S` plus `TIMING_HEADROOM` times
    the `WARM_UP` and `calls_for` rounds at that pace."""
    round_s = sum(first_ms) / 1000.0
    return TIMING_TIMEOUT_S + TIMING_HEADROOM * (WARM_UP + calls_for(round_s)) * round_s


def timed_in_fresh_process(
    programs: dict[str, tuple[Path, Path | None]], inputs: Path, *, timeout: float
) -> dict[str, Any]:
    """The median ms of each program (``.pte``, ``.ptd`` or None) on the inputs saved at
    ``inputs`` (``torch.save`` of a list), timed in a process of its own (`main`) that
    may take ``timeout`` seconds (`timing_timeout`)."""
    spec = {
        "programs": {
            label: [str(pte), str(ptd) if ptd else None] for label, (pte, ptd) in programs.items()
        },
        "inputs": str(inputs),
    }
    spec_path = inputs.with_suffix(".json")
    spec_path.write_text(json.dumps(spec))
    done = subprocess.run(
        [sys.executable, "-m", __name__, str(spec_path)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=dict(os.environ),
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        tail = done.stderr.strip().splitlines()[-1:] if done.stderr.strip() else []
        return {"error": f"timing process exited {done.returncode}: {' '.join(tail)[:200]}"}
    return dict(json.loads(lines[-1]))


def calls_for(seconds_per_round: float) -> int:
    """How many interleaved calls of each program to time, where one call of each takes
    ``seconds_per_round`` together: odd, at least `CALLS`, at most `MAX_CALLS`."""
    wanted = int(MIN_SECONDS / max(seconds_per_round, 1e-9))
    return min(MAX_CALLS, max(CALLS, wanted)) | 1


def _time(spec: dict[str, Any]) -> dict[str, Any]:
    import torch

    from benchmarks.sweeps.engine.lowering import FromFile

    inputs = list(torch.load(spec["inputs"]))
    methods = {
        label: FromFile(Path(pte), Path(ptd) if ptd else None)
        for label, (pte, ptd) in spec["programs"].items()
    }
    labels = list(methods)
    for _ in range(WARM_UP):
        start = time.perf_counter()
        for label in labels:
            methods[label](inputs)
        round_s = time.perf_counter() - start
    calls = calls_for(round_s)
    load_before = os.getloadavg()
    samples: dict[str, list[float]] = {label: [] for label in labels}
    for call in range(calls):
        for label in labels if call % 2 == 0 else reversed(labels):
            start = time.perf_counter()
            methods[label](inputs)
            samples[label].append((time.perf_counter() - start) * 1000)
    load_after = os.getloadavg()
    ms = {label: round(sorted(s)[len(s) // 2], 4) for label, s in samples.items()}
    found: dict[str, Any] = {"ms": ms, "calls": calls, "warm_up": WARM_UP}
    found["loadavg"] = [round(v, 2) for v in (*load_before, *load_after)]
    if {"xnnfold", "stock"} <= set(ms):
        found["ratio"] = round(ms["xnnfold"] / ms["stock"], 4)
    return found


def main(argv: list[str]) -> int:
    """Time the programs of the spec file ``argv[0]``, print the result as one JSON line."""
    spec = json.loads(Path(argv[0]).read_text())
    print(json.dumps(_time(spec)), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
