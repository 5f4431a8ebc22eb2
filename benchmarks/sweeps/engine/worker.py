"""The worker process: one class at a time, built, exported, screened and lowered.

The driver writes one JSON request a line; the worker answers on stdout with
``PHASE <name>`` before each phase that has its own timeout, ``PARTIAL <json>`` after each
partitioner's entry (kept if a later phase times out) and ``RESULT <json>`` at the end.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

from benchmarks.sweeps.engine.library import Library, OutOfReach
from benchmarks.sweeps.engine.lowering import lower_one, STOCK, through_partitioners, XNNFOLD
from benchmarks.sweeps.engine.lowering_cost import exported, measured_lowering
from benchmarks.sweeps.engine.results import (
    CANDIDATE,
    COMPUTED,
    NO_CANDIDATE,
    NOT_A_MODEL,
    NOT_COMPUTED,
    SKIPPED,
)
from benchmarks.sweeps.engine.retime import identical, timed_in_fresh_process, timing_timeout
from benchmarks.sweeps.engine.screen import computed_gemm_args, leaves, positional

# What the driver asks: screen only, screen and lower a candidate, lower a lowered
# class's programs again and time them in a fresh process (`retime`), or lower it again
# with one partitioner and measure that lowering alone (`relowered`).
SCREEN, LOWER, RETIME, RELOWER = "screen", "lower", "retime", "relower"
# Address space per worker: a class that needs more fails with a MemoryError. Two
# programs of a 400M-parameter model (timm's NFNets) and their lowerings need 8 GiB.
WORKER_MEMORY = 8 * 2**30


def _say(kind: str, text: str) -> None:
    sys.stdout.write(f"{kind} {text}\n")
    sys.stdout.flush()


def _message(error: BaseException) -> str:
    text = str(error).strip()
    return f"{type(error).__name__}: {text.splitlines()[0][:200] if text else ''}"


def sweep_class(library: Library, request: dict[str, Any]) -> dict[str, Any]:
    """One class's result line: built, exported and screened; where ``request["mode"]``
    is `LOWER` and the screen finds a candidate, lowered with the partitioners not in
    ``request["skip"]`` (stock as `through_partitioners` decides: where
    ``request["compare"]``, and for every candidate where ``request["always_stock"]``)
    and, unless ``request["extra"]`` is false, through the library's
    `Library.extra_path`."""
    import torch

    import xnnfold

    group, name = request["module"], request["class"]
    result: dict[str, Any] = {"class": name, "module": group}
    try:
        built = library.build(group, name, facts=request.get("facts"))
    except OutOfReach as out:
        if out.stage == NOT_A_MODEL:
            return {**result, "status": NOT_A_MODEL}
        result.update(status=SKIPPED, stage=out.stage, reason=out.reason[:300])
        if out.tried:
            result["tried"] = [line[:160] for line in out.tried]
        return result
    result.update(built.facts)
    result["inputs"] = {k: list(v.shape) for k, v in built.inputs.items()}
    names, args = list(built.inputs), tuple(built.inputs.values())
    try:
        wrapped = positional(built.model, names)
        ep = torch.export.export(wrapped, args, strict=False)
    except Exception as error:
        return {**result, "status": SKIPPED, "stage": "export", "reason": _message(error)}
    if not computed_gemm_args(ep):
        return {**result, "status": NO_CANDIDATE}
    if request["mode"] == SCREEN:
        return {**result, "status": CANDIDATE}
    if request["mode"] == RETIME:
        return {**result, "retime": _retimed(wrapped, ep, args, built.expected)}
    expected = built.expected
    if expected is None:
        with torch.no_grad():
            expected = leaves(built.model(**built.inputs))
    skip = set(request.get("skip", ()))
    programs = {
        label: export
        for label, export in (
            (
                XNNFOLD,
                lambda: torch.export.export(
                    xnnfold.prepare_for_xnnpack(wrapped), args, strict=False
                ),
            ),
            (STOCK, lambda: ep),
        )
        if label not in skip
    }
    compare_stock = bool(request.get("compare")) or XNNFOLD in skip
    result["compared"] = compare_stock
    result["variants"] = variants = through_partitioners(
        programs,
        args,
        expected,
        compare_stock=compare_stock,
        always_stock=bool(request.get("always_stock")),
        announce=lambda phase: _say("PHASE", phase),
        partial=lambda label, entry: _say("PARTIAL", json.dumps({label: entry})),
    )
    ours = variants.get(XNNFOLD, {})
    if XNNFOLD in variants and not ours.get("computed") and "error" not in ours:
        return {**result, "status": NOT_COMPUTED}
    if compare_stock and request.get("extra", True) and XNNFOLD not in skip:
        _say("PHASE", "extra")
        extra = library.extra_path(built, expected)
        if extra is not None:
            result["exporter"] = extra
    return {**result, "status": COMPUTED}


def _retimed(wrapped: Any, ep: Any, args: tuple[Any, ...], expected: Any) -> dict[str, Any]:
    """Both partitioners' programs lowered again and timed in a fresh process
    (`retime`), or "identical" where their files hash alike."""
    import tempfile
    from pathlib import Path

    import torch

    import xnnfold

    if expected is None:
        with torch.no_grad():
            expected = leaves(wrapped(*args))
    with tempfile.TemporaryDirectory(prefix="retime-") as root:
        programs: dict[str, tuple[Path, Path | None]] = {}
        entries: dict[str, dict[str, Any]] = {}
        for label, program in (
            (
                XNNFOLD,
                torch.export.export(xnnfold.prepare_for_xnnpack(wrapped), args, strict=False),
            ),
            (STOCK, ep),
        ):
            directory = Path(root) / label
            directory.mkdir()
            _say("PHASE", f"lower {label}")
            entry, _ = lower_one(label, program, args, expected, directory)
            if "error" in entry:
                return {"error": f"{label}: {entry['error']}"}
            entries[label] = entry
            data = directory / entry["data_files"][0] if entry.get("data_files") else None
            programs[label] = (directory / "model.pte", data)
        found = {"sha256": {label: e["sha256"] for label, e in entries.items()}}
        found["bytes"] = {label: e["bytes"] for label, e in entries.items()}
        found["exact_gelus"] = entries[XNNFOLD]["exact_gelus"]
        if identical(entries):
            return {**found, "identical": True, "ratio": 1.0}
        _say("PHASE", "time")
        inputs = Path(root) / "inputs.pt"
        torch.save(list(args), inputs)
        timeout = timing_timeout([float(e.get("first_ms", 0.0)) for e in entries.values()])
        return {**found, **timed_in_fresh_process(programs, inputs, timeout=timeout)}


def relowered(library: Library, request: dict[str, Any]) -> dict[str, Any]:
    """A ``"relowered"`` entry: the model a result line records (``request["facts"]``,
    its `Library.build_facts`) built, exported for ``request["label"]``'s partitioner and
    lowered with it, what the lowering cost measured (`lowering_cost.measured_lowering`),
    or the error where a stage failed. The driver asks a fresh worker for each lowering:
    the process then holds the model and the one program it lowers, and no other
    lowering's leftovers, when the lowering's peak is read."""
    import tempfile
    from pathlib import Path

    group, name, label = request["module"], request["class"], request["label"]
    head = {"class": name, "module": group}
    try:
        built = library.build(group, name, facts=request.get("facts"))
    except OutOfReach as out:
        return {**head, "relowered": {"error": f"{out.stage}: {out.reason[:200]}"}}
    # The model and its inputs stay, as in the sweep's worker; the eager outputs a
    # library may keep (`Built.expected`) go.
    wrapped, args = positional(built.model, list(built.inputs)), tuple(built.inputs.values())
    del built
    try:
        program = exported(label, wrapped, args)
    except Exception as error:
        return {**head, "relowered": {"error": f"export: {_message(error)}"}}
    _say("PHASE", f"lower {label}")
    with tempfile.TemporaryDirectory(prefix="relower-") as directory:
        found = measured_lowering(program, label, Path(directory))
    return {**head, "relowered": found}


def serve(library: Library, *, memory: int = WORKER_MEMORY) -> int:
    """Answer the driver's requests until its pipe closes, in ``memory`` bytes of address
    space."""
    import logging
    import resource
    import warnings

    import torch

    resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    # One thread each: two workers share two cores, and lowering times compare.
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)
    for line in sys.stdin:
        request = json.loads(line)
        started = time.perf_counter()
        try:
            if request["mode"] == RELOWER:
                result = relowered(library, request)
            else:
                result = sweep_class(library, request)
        except Exception as error:
            result = {
                "class": request["class"],
                "module": request["module"],
                "status": SKIPPED,
                "stage": "error",
                "reason": f"{type(error).__name__}: {str(error)[:300]}",
            }
        result["seconds"] = round(time.perf_counter() - started, 1)
        _say("RESULT", json.dumps(result))
    return 0
