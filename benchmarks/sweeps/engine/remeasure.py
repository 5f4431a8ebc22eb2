"""Measuring lowered rows again, each in fresh workers: ``--retime`` (their programs'
latency, `engine.retime`) and ``--relower`` (what their lowerings cost,
`engine.relower`). Each asks a fresh worker (`driver.Pool`) to build the model the row's
line records (its `Library.build_facts`), and appends the line again with what it found:
``{**line, "retime": found}`` or ``{**line, "relowered": found}``, the latest line of
the class (`results.read_results`), which a rerun without ``--fresh`` skips.
"""

from __future__ import annotations

from typing import Any

from benchmarks.sweeps.engine.driver import Outcome, Pool
from benchmarks.sweeps.engine.library import Library
from benchmarks.sweeps.engine.lowering_cost import STOCK, XNNFOLD
from benchmarks.sweeps.engine.relower import CPU_SECONDS, PEAK, RELOWERED, relowered_median
from benchmarks.sweeps.engine.results import append, read_results
from benchmarks.sweeps.engine.worker import RELOWER, RETIME


def _asked(
    library: Library,
    old: dict[str, Any],
    request: dict[str, Any],
    *,
    timeout: float,
    lowering_timeout: float,
    memory: int,
) -> Outcome:
    """What a fresh worker says to ``request`` about the model ``old`` (a result line)
    records; the worker is stopped after."""
    pool = Pool(library.command, timeout, lowering_timeout, memory)
    facts = {key: old[key] for key in library.build_facts if key in old}
    try:
        return pool.ask({"module": old["module"], "class": old["class"], "facts": facts, **request})
    finally:
        pool.close()


def _error(outcome: Outcome) -> dict[str, Any]:
    """Why ``outcome`` has no answer: the worker's reason, or where it stopped."""
    reason = (outcome.result or {}).get("reason") or (
        "worker died" if outcome.died else f"stopped in {outcome.phase} (over its timeout)"
    )
    return {"error": reason[:200]}


def retime(
    library: Library,
    names: list[str],
    *,
    lowering_timeout: float,
    timeout: float,
    memory: int,
) -> None:
    """Retime each class of ``names`` (`engine.retime`): a fresh worker lowers its
    programs again and times them in a process of their own; its result line is appended
    again with a ``"retime"`` entry (and the stack it was retimed under)."""
    results = read_results(library.results)
    stack = library.versions()
    print(f"{len(names)} rows to retime", flush=True)
    for index, name in enumerate(names, 1):
        old = results[name]
        outcome = _asked(
            library,
            old,
            {"mode": RETIME},
            timeout=timeout,
            lowering_timeout=lowering_timeout,
            memory=memory,
        )
        found = (outcome.result or {}).get("retime") or _error(outcome)
        found["stack"] = stack
        append(library.results, {**old, "retime": found})
        said = "identical" if found.get("identical") else found.get("ratio", found.get("error"))
        print(f"[{index}/{len(names)}] {name}: {said} load {found.get('loadavg')}", flush=True)


def relower(
    library: Library,
    names: list[str],
    *,
    runs: int = 1,
    lowering_timeout: float,
    timeout: float,
    memory: int,
) -> None:
    """Lower each class of ``names`` again ``runs`` times with each partitioner
    (`engine.relower`), each lowering in a fresh worker that builds and exports the model
    for it (`engine.worker.relowered`), stock's and xnnfold's interleaved, the first of
    each round alternating; its result line is appended again with a ``"relowered"``
    entry: each partitioner's runs (a run that failed, or stopped over its timeout,
    records its error), ``runs`` and the stack. A row that fails does not stop the
    others."""
    results = read_results(library.results)
    stack = library.versions()
    print(f"{len(names)} rows to relower, {runs} run(s) each way", flush=True)
    for index, name in enumerate(names, 1):
        old = results[name]
        found: dict[str, Any] = {STOCK: [], XNNFOLD: []}
        for run in range(runs):
            for label in (STOCK, XNNFOLD) if run % 2 == 0 else (XNNFOLD, STOCK):
                outcome = _asked(
                    library,
                    old,
                    {"mode": RELOWER, "label": label},
                    timeout=timeout,
                    lowering_timeout=lowering_timeout,
                    memory=memory,
                )
                found[label].append((outcome.result or {}).get(RELOWERED) or _error(outcome))
        found.update(runs=runs, stack=stack)
        append(library.results, {**old, RELOWERED: found})
        said = ", ".join(
            f"{key} stock/xnnfold {relowered_median(found, STOCK, key)}"
            f"/{relowered_median(found, XNNFOLD, key)}"
            for key in (CPU_SECONDS, PEAK)
        )
        errors = [
            run["error"] for label in (STOCK, XNNFOLD) for run in found[label] if "error" in run
        ]
        print(
            f"[{index}/{len(names)}] {name}: {said}"
            f"{f'; error: {errors[0][:120]}' if errors else ''}",
            flush=True,
        )
