"""Every model class of the installed transformers, swept for GEMMs with a computed weight.

For each public model class of ``transformers.models.*`` (read from each modeling file's
``__all__``): build it from its config (every size shrunk; else only the counts capped;
else the default config, `LEVELS`), random weights, ``apply_weight_norm()`` where the
class offers it; find small dummy inputs from its main input name (the first that runs
eagerly); ``torch.export`` it (``strict=False``). A class whose exported program has a
GEMM-like op reading a tensor computed from constants is a candidate: lowered with the
folding partitioner and asked `xnnfold.explain` whether a GEMM has a computed weight or
bias, each program written with its ``.ptd`` and run through executorch.runtime against
eager. The first class of each modeling file found with one is also lowered with the
stock ``XnnpackPartitioner``, timed interleaved, and goes through transformers' exporter,
stock and ``xnnfold.integrations.transformers.export``; the file's other classes get the
stock lowering where xnnfold's fails, is off from eager or leaves one outside.

Each class runs in a worker process with a timeout (a worker that hangs or crashes is
replaced); results go to a JSON-lines file, so a rerun skips the classes already there.

    nice -n 10 python benchmarks/transformers_sweep.py --jobs 2 --screen-only
    nice -n 10 python benchmarks/transformers_sweep.py --jobs 2   # lower the candidates
    nice -n 10 python benchmarks/transformers_sweep.py --only UnivNetModel --fresh
    python benchmarks/transformers_sweep.py --report   # the markdown table, from the JSONL

Classes that cannot be built, given inputs or exported are listed with the reason: they
are out of this sweep's reach, not failures of xnnfold.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import json
import os
import queue
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "transformers_sweep_results.jsonl"
TABLE = HERE / "transformers_sweep_results.md"
DEFAULT_TIMEOUT = 150.0
DEFAULT_LOWERING_TIMEOUT = 480.0
# What a worker says when a class's screen found a candidate and the lowerings start.
LOWERING = "LOWERING"
# What a worker does with a class: screen it only (a candidate is left as `CANDIDATE` for
# a later run to lower), or lower a candidate through the partitioners, and through
# transformers' exporter too.
SCREEN, PARTITIONERS, EXPORTER = "screen", "partitioners", "exporter"
CANDIDATE = "candidate, not lowered yet"
RUNS = 7
# A class whose shrunk config fails is tried with its default config, if no larger.
MAX_DEFAULT_PARAMETERS = 30_000_000
# Address space per worker: a class that needs more fails with a MemoryError.
WORKER_MEMORY = 6 * 2**30

# Integer config fields, by name: the cap each is shrunk to.
_EXACT_CAPS = {
    "vocab_size": 256,
    "num_hidden_layers": 2,
    "num_layers": 2,
    "n_layer": 2,
    "n_layers": 2,
    "encoder_layers": 1,
    "decoder_layers": 1,
    "num_encoder_layers": 1,
    "num_decoder_layers": 1,
    "num_attention_heads": 2,
    "num_heads": 2,
    "n_head": 2,
    "n_heads": 2,
    "encoder_attention_heads": 2,
    "decoder_attention_heads": 2,
    "num_key_value_heads": 1,
    "head_dim": 16,
    "hidden_size": 32,
    "d_model": 32,
    "n_embd": 32,
    "embed_dim": 32,
    "dim": 32,
    "intermediate_size": 64,
    "ffn_dim": 64,
    "encoder_ffn_dim": 64,
    "decoder_ffn_dim": 64,
    "d_ff": 64,
    "n_inner": 64,
    "image_size": 64,
    "num_experts": 2,
    "n_routed_experts": 2,
    "num_local_experts": 2,
    "num_experts_per_tok": 1,
    "upsample_initial_channel": 32,
    "max_position_embeddings": 512,
}
# Suffixes of integer or integer-list fields that size channels (or group them): capped
# at 32.
_CHANNEL_SUFFIXES = (
    "_hidden_size",
    "_channels",
    "_dim",
    "_dims",
    "_dimension",
    "hidden_sizes",
    "_size_list",
    "_groups",
)
_NOT_CHANNELS = ("kernel", "stride", "patch", "pad", "dilation", "head_dim", "mel", "in_dim")


# The fields `_EXACT_CAPS` names that count (layers, vocabularies, experts, positions):
# the only ones capped at the "counts" level, for classes whose channel arithmetic
# shrinking the widths breaks (groups, divisibility, hard-coded sizes).
_COUNTS = frozenset(
    name
    for name in _EXACT_CAPS
    if "layer" in name or "experts" in name or name in ("vocab_size", "max_position_embeddings")
)
# The configs tried in turn, while the class fails to build or run eagerly: every size
# shrunk, only the counts capped, the default; the last two only up to
# `MAX_DEFAULT_PARAMETERS` parameters.
LEVELS = ("shrunk", "counts", "default")


def _cap(name: str, value: Any, *, counts_only: bool = False) -> Any:
    if isinstance(value, bool):
        return value
    if counts_only:
        return (
            min(value, _EXACT_CAPS[name]) if name in _COUNTS and isinstance(value, int) else value
        )
    if name in _EXACT_CAPS and isinstance(value, int):
        return min(value, _EXACT_CAPS[name])
    channels = name.endswith(_CHANNEL_SUFFIXES) and not any(w in name for w in _NOT_CHANNELS)
    if channels and isinstance(value, int) and value > 32:
        return 32
    if channels and isinstance(value, (list, tuple)) and all(isinstance(v, int) for v in value):
        return type(value)(min(v, 32) for v in value)
    return value


def discover() -> list[tuple[str, str]]:
    """(module, class name) of every public class of every modeling file, without
    importing transformers' models (the worker checks it is a model class)."""
    import transformers

    root = Path(transformers.__file__).parent / "models"
    found = []
    for path in sorted(root.glob("*/modeling_*.py")):
        tree = ast.parse(path.read_text())
        for node in tree.body:
            if not isinstance(node, ast.Assign) or not any(
                isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets
            ):
                continue
            try:
                names = ast.literal_eval(node.value)
            except ValueError:
                continue
            module = f"transformers.models.{path.parent.name}.{path.stem}"
            found += [
                (module, name)
                for name in names
                if not name.endswith("PreTrainedModel") and not name.isupper()
            ]
    return found


# ----------------------------------------------------------------------------- worker


def _leaves(value: Any) -> list[Any]:
    import torch

    if isinstance(value, torch.Tensor):
        return [value]
    if hasattr(value, "to_tuple"):
        value = value.to_tuple()
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, (list, tuple)):
        return [leaf for item in value for leaf in _leaves(item)]
    return []


def _shrunk(config: Any, *, counts_only: bool = False) -> Any:
    for name, value in list(vars(config).items()):
        if name.startswith("_"):
            continue
        if hasattr(value, "to_dict") and hasattr(value, "model_type"):
            setattr(config, name, _shrunk(value, counts_only=counts_only))
            continue
        new = _cap(name, value, counts_only=counts_only)
        if new != value:
            # A property without a setter keeps its value.
            with contextlib.suppress(Exception):
                setattr(config, name, new)
    vocab = getattr(config, "vocab_size", None)
    for name in ("pad_token_id", "bos_token_id", "eos_token_id", "decoder_start_token_id"):
        token = getattr(config, name, None)
        if isinstance(vocab, int) and isinstance(token, int) and token >= vocab:
            setattr(config, name, vocab - 1)
    if hasattr(config, "use_cache"):
        config.use_cache = False
    return config


def _find(config: Any, name: str) -> Any:
    value = getattr(config, name, None)
    if value is not None:
        return value
    for sub in ("text_config", "vision_config", "audio_config", "encoder_config"):
        inner = getattr(config, sub, None)
        if inner is not None and getattr(inner, name, None) is not None:
            return getattr(inner, name)
    return None


def _candidate_inputs(model: Any) -> Iterator[dict[str, Any]]:
    """Candidate dummy inputs, each with a noise input where the forward takes one (it
    would otherwise draw random numbers, which neither the runtime nor a diff can take)."""
    import inspect

    import torch

    parameters = inspect.signature(model.forward).parameters
    for inputs in _main_inputs(model):
        if "noise_sequence" in parameters:
            (main,) = inputs.values()
            channels = _find(model.config, "model_in_channels") or 64
            noise = torch.randn(1, main.shape[1], int(channels), generator=torch.Generator())
            inputs["noise_sequence"] = noise
        yield inputs


def _main_inputs(model: Any) -> Iterator[dict[str, Any]]:
    import torch

    g = torch.Generator().manual_seed(1)
    config = model.config
    name = getattr(model, "main_input_name", "input_ids")
    vocab = _find(config, "vocab_size") or 100
    ids = torch.randint(0, min(int(vocab), 100), (1, 8), generator=g)
    channels = _find(config, "num_channels") or 3
    size = _find(config, "image_size") or 64
    size = size if isinstance(size, (list, tuple)) else (size, size)
    image = torch.randn(1, int(channels), *map(int, size[-2:]), generator=g)
    if name == "input_ids":
        inputs: dict[str, Any] = {"input_ids": ids}
        if getattr(config, "is_encoder_decoder", False):
            inputs["decoder_input_ids"] = ids[:, :4].clone()
        yield inputs
        yield {"input_ids": ids}
        # A text-and-image model (CLIP-like) takes both.
        yield {"input_ids": ids, "pixel_values": image}
    elif name in ("pixel_values", "pixel_values_videos"):
        yield {name: image}
        yield {name: image, "input_ids": ids}
        yield {name: torch.randn(1, int(channels), 64, 64, generator=g)}
        yield {name: torch.randn(1, 1, int(channels), *map(int, size[-2:]), generator=g)}
    elif name in ("input_values", "audio_values", "waveform"):
        yield {name: torch.randn(1, 1600, generator=g)}
        yield {name: torch.randn(1, 1, 1600, generator=g)}
    elif name in ("input_features", "spectrogram"):
        bins = _find(config, "num_mel_bins") or _find(config, "model_in_dim") or 80
        dim = _find(config, "input_feat_per_channel") or bins
        yield {name: torch.randn(1, 16, int(dim), generator=g)}
        yield {name: torch.randn(1, int(bins), 3000, generator=g)}
        yield {name: torch.randn(1, int(bins), 64, generator=g)}
        yield {name: torch.randn(16, int(dim), generator=g)}
    else:
        yield {name: torch.randn(1, 8, 32, generator=g)}


def _computed_gemm_args(ep: Any) -> bool:
    """Whether a GEMM-like op of the exported program reads a tensor computed from
    constants (no user input above it): a candidate for xnnfold, to be asked `explain`."""
    import torch

    gemms = {
        "linear",
        "conv1d",
        "conv2d",
        "conv3d",
        "conv_transpose1d",
        "conv_transpose2d",
        "conv_transpose3d",
        "convolution",
        "matmul",
        "mm",
        "addmm",
        "bmm",
        "einsum",
        "baddbmm",
    }
    user = {s.arg.name for s in ep.graph_signature.input_specs if s.kind.name == "USER_INPUT"}
    run_time: set[Any] = set()
    for node in ep.graph.nodes:
        if node.op == "placeholder":
            if node.name in user:
                run_time.add(node)
        elif any(arg in run_time for arg in node.all_input_nodes):
            run_time.add(node)
    for node in ep.graph.nodes:
        target = node.target
        if node.op != "call_function" or not isinstance(target, torch._ops.OpOverload):
            continue
        if target._opname not in gemms:
            continue
        for arg in node.all_input_nodes:
            if arg.op != "placeholder" and arg not in run_time:
                return True
    return False


class _Positional:
    """The model called with keyword inputs, taking them positionally and returning the
    tensors of its output, for torch.export and the runtime."""

    @staticmethod
    def build(model: Any, names: list[str]) -> Any:
        import torch

        class Positional(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.model = model

            def forward(self, *args: Any) -> tuple[Any, ...]:
                return tuple(_leaves(self.model(**dict(zip(names, args)))))

        return Positional().eval()


def _compare(actual: list[Any], expected: list[Any]) -> tuple[float, float]:
    """(max abs diff, max abs of eager) over every float output."""
    import torch

    diff, scale = 0.0, 0.0
    if len(actual) != len(expected):
        return float("inf"), 0.0
    for a, e in zip(actual, expected):
        if not isinstance(e, torch.Tensor):
            continue
        if a.shape != e.shape:
            return float("inf"), 0.0
        if e.is_floating_point():
            e32, a32 = e.float(), a.float()
            diff = max(diff, (a32 - e32).abs().max().item() if e.numel() else 0.0)
            scale = max(scale, e32.abs().max().item() if e.numel() else 0.0)
        elif not torch.equal(a, e):
            return float("inf"), 0.0
    return diff, scale


def _lowered(ep: Any, partitioner: Any, directory: Path) -> tuple[Any, tuple[Path, ...]]:
    """The edge program and the files `xnnfold.save` writes to ``directory``: the `.pte`,
    then the `.ptd` a program with a tied table needs (docs/tied-tables.md)."""
    from executorch.exir import to_edge_transform_and_lower

    import xnnfold

    edge = to_edge_transform_and_lower(ep, partitioner=[partitioner])
    return edge, xnnfold.save(edge.to_executorch(), directory / "model.pte")


def _outside(report: Any) -> list[str]:
    return [f"{row.module} ({row.code or 'no code'})" for row in report.outside if row.computed]


def _sweep_class(module: str, name: str, *, mode: str = EXPORTER) -> dict[str, Any]:
    import importlib

    import torch
    from transformers import PreTrainedModel

    import xnnfold

    result: dict[str, Any] = {"class": name, "module": module}
    cls = getattr(importlib.import_module(module), name, None)
    if not (isinstance(cls, type) and issubclass(cls, PreTrainedModel)):
        return {**result, "status": "not a model class"}
    stage = "build"
    try:
        config_class = cls.config_class
        if config_class is None:
            return {**result, "status": "skipped", "stage": stage, "reason": "no config class"}
        inputs = None
        # Why each level failed: the shrunk config's reason is the one recorded.
        failed: list[tuple[str, str]] = []
        for level in LEVELS:
            stage = "build"
            try:
                torch.manual_seed(0)
                config = config_class()
                if level != "default":
                    config = _shrunk(config, counts_only=level == "counts")
                if level != "shrunk":
                    if hasattr(config, "use_cache"):
                        config.use_cache = False
                    with torch.device("meta"):
                        size = sum(p.numel() for p in cls(config).parameters())
                    if size > MAX_DEFAULT_PARAMETERS:
                        failed.append((stage, f"{level} config: {size:,} parameters"))
                        continue
                model = cls(config).float().eval()
                if hasattr(model, "apply_weight_norm"):
                    model.apply_weight_norm()
                    result["weight_norm_applied"] = True
                stage = "inputs"
                last = "no candidate inputs"
                for candidate in _candidate_inputs(model):
                    try:
                        with torch.no_grad():
                            expected = _leaves(model(**candidate))
                        inputs = candidate
                        break
                    except Exception as error:
                        last = f"{type(error).__name__}: {error}"
                if inputs is None:
                    failed.append((stage, last))
            except Exception as error:
                failed.append((stage, f"{type(error).__name__}: {error}"))
            if inputs is not None:
                result["config"] = level
                break
        if inputs is None:
            result["levels"] = [f"{s}: {r[:120]}" for s, r in failed]
            stage, reason = failed[0]
            raise RuntimeError(reason)
        names = list(inputs)
        args = tuple(inputs.values())
        wrapped = _Positional.build(model, names)
        stage = "export"
        ep = torch.export.export(wrapped, args, strict=False)
    except Exception as error:
        message = f"{type(error).__name__}: {str(error).strip().splitlines()[0][:200] if str(error).strip() else ''}"
        return {**result, "status": "skipped", "stage": stage, "reason": message}
    result["inputs"] = {k: list(v.shape) for k, v in inputs.items()}
    if not _computed_gemm_args(ep):
        return {**result, "status": "no computed GEMM argument"}
    if mode == SCREEN:
        return {**result, "status": CANDIDATE}
    # The driver gives the lowerings their own, longer, timeout from here.
    sys.stdout.write(f"{LOWERING}\n")
    sys.stdout.flush()
    ep_folding = torch.export.export(xnnfold.prepare_for_xnnpack(wrapped), args, strict=False)
    result["variants"] = variants = _through_partitioners(
        ep, ep_folding, args, expected, stock_always=mode == EXPORTER
    )
    folding = variants.get("xnnfold", {})
    if not folding.get("computed") and "error" not in folding:
        return {**result, "status": "no computed GEMM"}
    if mode == EXPORTER:
        result["exporter"] = _through_exporter(model, inputs, expected)
    return {**result, "status": "computed GEMM"}


def _through_partitioners(
    ep: Any, ep_folding: Any, args: tuple[Any, ...], expected: list[Any], *, stock_always: bool
) -> dict[str, Any]:
    """xnnfold's partitioner, then stock's: GEMMs outside, files' bytes, diff and ms, or
    the error. Stock's only where xnnfold's found a computed-weight GEMM and
    ``stock_always`` (the comparison, for the first such class of each modeling file),
    or where xnnfold's failed, is off from eager or left one outside (what stock does
    there decides whether that counts against xnnfold)."""
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner

    import xnnfold

    variants: dict[str, Any] = {}
    programs = {}
    # The programs' files live until the timings are done.
    with contextlib.ExitStack() as files:
        for label, make, program in (
            ("xnnfold", lambda: xnnfold.XnnpackFoldingPartitioner(), ep_folding),
            ("stock", lambda: XnnpackPartitioner(), ep),
        ):
            entry: dict[str, Any] = {}
            variants[label] = entry
            directory = Path(files.enter_context(tempfile.TemporaryDirectory(prefix="sweep-")))
            try:
                edge, (pte, *data) = _lowered(program, make(), directory)
            except Exception as error:
                entry["error"] = f"lower: {type(error).__name__}: {str(error)[:300]}"
                continue
            report = xnnfold.explain(edge)
            entry["computed"] = sum(1 for row in report.rows if row.computed)
            entry["folded"] = sum(1 for row in report.rows if row.folded)
            entry["outside"] = _outside(report)
            # What a device stores: the `.pte` and its `.ptd`, if any.
            entry["bytes"] = sum(path.stat().st_size for path in (pte, *data))
            if data:
                entry["data_files"] = [path.name for path in data]
            try:
                loaded = xnnfold.LoadedProgram(
                    pte.read_bytes(), data_path=data[0] if data else None
                )
                actual = loaded(list(args))
            except Exception as error:
                entry["error"] = f"load/run: {type(error).__name__}: {str(error)[:300]}"
                continue
            entry["diff"], entry["scale"] = _compare(actual, expected)
            programs[label] = loaded
            if label == "xnnfold" and not entry["computed"]:
                break  # no computed-weight GEMM: nothing to compare stock with
            if label == "xnnfold" and not (stock_always or _wrong(entry) or entry["outside"]):
                break
        calls = {label: lambda run=run: run(list(args)) for label, run in programs.items()}
        for label, ms in _interleaved(calls).items():
            variants[label]["ms"] = ms
    return variants


def _through_exporter(model: Any, inputs: dict[str, Any], expected: list[Any]) -> dict[str, Any]:
    """transformers' exporter, stock and with xnnfold: GEMMs outside, diff, or its error."""
    import xnnfold

    found: dict[str, Any] = {}
    runners: dict[str, Any] = {}
    try:
        from transformers.exporters import ExecutorchConfig
        from transformers.exporters.exporter_executorch import ExecutorchExporter

        from xnnfold.integrations.transformers import export
    except ImportError as error:
        return {"error": f"{error}"}
    for label, run in (
        (
            "stock",
            lambda: ExecutorchExporter().export(
                model, dict(inputs), ExecutorchConfig(backend="xnnpack")
            ),
        ),
        ("xnnfold", lambda: export(model, dict(inputs))),
    ):
        try:
            exported = run()
            report = xnnfold.explain(exported.program)
            entry: dict[str, Any] = {
                "computed": sum(1 for row in report.rows if row.computed),
                "folded": sum(1 for row in report.rows if row.folded),
                "outside": _outside(report),
                "bytes": len(exported.program.buffer),
            }
            entry["diff"], entry["scale"] = _compare(_leaves(exported(**inputs)), expected)
            runners[label] = exported
        except Exception as error:
            entry = {"error": f"{type(error).__name__}: {str(error).strip()[:200]}"}
        found[label] = entry
    for label, ms in _interleaved(
        {label: lambda exported=exported: exported(**inputs) for label, exported in runners.items()}
    ).items():
        found[label]["ms"] = ms
    return found


def _interleaved(calls: dict[str, Callable[[], Any]]) -> dict[str, float]:
    """The median ms of each call, timed in turn: the order alternates every run."""
    times: dict[str, list[float]] = {label: [] for label in calls}
    labels = list(calls)
    for run in range(RUNS):
        for label in labels if run % 2 == 0 else list(reversed(labels)):
            start = time.perf_counter()
            calls[label]()
            times[label].append((time.perf_counter() - start) * 1000)
    return {label: sorted(samples)[len(samples) // 2] for label, samples in times.items()}


def worker() -> int:
    """Read "module class" lines, write one JSON result line per class."""
    import logging
    import resource
    import warnings

    resource.setrlimit(resource.RLIMIT_AS, (WORKER_MEMORY, WORKER_MEMORY))
    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)
    for line in sys.stdin:
        module, name, mode = line.split()
        started = time.perf_counter()
        try:
            result = _sweep_class(module, name, mode=mode)
        except Exception as error:
            result = {
                "class": name,
                "module": module,
                "status": "skipped",
                "stage": "import",
                "reason": f"{type(error).__name__}: {str(error)[:300]}",
            }
        result["seconds"] = round(time.perf_counter() - started, 1)
        sys.stdout.write("RESULT " + json.dumps(result) + "\n")
        sys.stdout.flush()
    return 0


# ----------------------------------------------------------------------------- driver


# Source text that computes a GEMM weight (strong), or may (weak): the classes of a
# modeling file that has it are swept earlier. Only the order depends on it; what counts
# is `explain`'s answer.
_STRONG = re.compile(
    r"weight_norm|spectral_norm|parametriz|standardiz|StdConv"
    r"|weight\.t\(\)|weight\.T\b|weight\.transpose"
)
_WEAK = re.compile(r"functional\.conv[123]d\(|F\.conv[123]d\(|functional\.linear\(|F\.linear\(")


def _order(classes: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """The first class of each modeling file (usually its base model) before the others,
    and within each, the files whose source computes a GEMM weight first, then those
    whose source may (`_STRONG`, `_WEAK`): a partial run covers every architecture, the
    likely ones first, before the task heads."""
    import importlib.util

    rank: dict[str, int] = {}
    for module, _ in classes:
        if module not in rank:
            spec = importlib.util.find_spec(module)
            origin = spec.origin if spec is not None else None
            text = Path(origin).read_text() if origin else ""
            rank[module] = 0 if _STRONG.search(text) else 1 if _WEAK.search(text) else 2
    seen: set[str] = set()
    ranked = []
    for module, name in classes:
        head = module in seen
        seen.add(module)
        ranked.append(((head, rank[module]), (module, name)))
    return [item for _, item in sorted(ranked, key=lambda pair: pair[0])]


class _Worker:
    def __init__(self) -> None:
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        self.process = subprocess.Popen(
            [sys.executable, __file__, "--worker"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env=env,
        )
        self.lines: queue.Queue[str] = queue.Queue()
        import threading

        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.put(line)
        self.lines.put("")

    def ask(
        self, module: str, name: str, mode: str, timeout: float, lowering_timeout: float
    ) -> dict[str, Any]:
        assert self.process.stdin is not None
        self.process.stdin.write(f"{module} {name} {mode}\n")
        self.process.stdin.flush()
        deadline = time.monotonic() + timeout
        lowering = False
        while True:
            try:
                line = self.lines.get(timeout=max(0.1, deadline - time.monotonic()))
            except queue.Empty:
                return _timed_out(module, name, lowering)
            if line == "":
                return {
                    "class": name,
                    "module": module,
                    "status": "skipped",
                    "stage": "worker died",
                    "reason": "worker died (a native crash, or out of memory)",
                }
            if line.strip() == LOWERING:
                deadline = time.monotonic() + lowering_timeout
                lowering = True
                continue
            if line.startswith("RESULT "):
                result: dict[str, Any] = json.loads(line[len("RESULT ") :])
                return result
            if time.monotonic() > deadline:
                return _timed_out(module, name, lowering)

    def stop(self) -> None:
        self.process.kill()
        self.process.wait()


# Why a class timed out lowering: the other classes of its modeling file are not tried
# (they share the architecture whose lowering took too long).
LOWERING_TIMEOUT = "over the timeout, lowering"


def _timed_out(module: str, name: str, lowering: bool) -> dict[str, Any]:
    return {
        "class": name,
        "module": module,
        "status": "skipped",
        "stage": "timeout",
        "reason": LOWERING_TIMEOUT if lowering else "over the timeout, building or exporting",
    }


def _done() -> dict[str, dict[str, Any]]:
    if not RESULTS.exists():
        return {}
    return {r["class"]: r for r in (json.loads(line) for line in RESULTS.read_text().splitlines())}


def run(
    classes: list[tuple[str, str]],
    timeout: float,
    lowering_timeout: float,
    jobs: int,
    *,
    exporter_for_all: bool,
    screen_only: bool,
) -> None:
    """Sweep ``classes`` in ``jobs`` workers, appending to `RESULTS`; a class already
    there is skipped, unless only screened (`CANDIDATE`) and this run lowers. Through
    transformers' exporter and stock's partitioner too: every class with
    ``exporter_for_all``, else the first class of each modeling file found with a
    computed-weight GEMM (the exporter lowers with the same partitioners, at twice the
    time). A class whose file has a class that timed out lowering is not tried."""
    import threading

    results = _done()
    # Modeling files one of whose classes went through the exporter and stock.
    compared = {r["module"] for r in results.values() if "exporter" in r}
    done = {n for n, r in results.items() if screen_only or r["status"] != CANDIDATE}
    pending = [(m, n) for m, n in classes if n not in done]
    # Modeling file -> its class that timed out lowering.
    slow = {r["module"]: n for n, r in results.items() if r.get("reason") == LOWERING_TIMEOUT}
    if not screen_only:
        # Round-robin over modeling files: each file's first pending class, then each
        # file's second, ...: a run stopped early has lowered as many architectures as
        # it could.
        turn: dict[str, int] = {}
        ranked = []
        for index, (module, name) in enumerate(pending):
            turn[module] = turn.get(module, -1) + 1
            ranked.append(((turn[module], index), (module, name)))
        pending = [item for _, item in sorted(ranked)]
    print(f"{len(classes)} classes, {len(classes) - len(pending)} already done", flush=True)
    work: queue.Queue[tuple[int, str, str]] = queue.Queue()
    for index, (module, name) in enumerate(pending, 1):
        work.put((index, module, name))
    lock = threading.Lock()

    def serve(out: Any) -> None:
        current: Optional[_Worker] = None
        while True:
            try:
                index, module, name = work.get_nowait()
            except queue.Empty:
                break
            if module in slow and not screen_only:
                result = {
                    **_timed_out(module, name, True),
                    "reason": f"not tried: {slow[module]}, of its modeling file, is "
                    f"{LOWERING_TIMEOUT}",
                }
            else:
                if screen_only:
                    mode = SCREEN
                elif exporter_for_all or module not in compared:
                    mode = EXPORTER
                else:
                    mode = PARTITIONERS
                if current is None:
                    current = _Worker()
                result = current.ask(module, name, mode, timeout, lowering_timeout)
                if result.get("stage") in ("worker died", "timeout"):
                    current.stop()
                    current = None
            if result.get("reason") == LOWERING_TIMEOUT:
                slow.setdefault(module, name)
            if "exporter" in result:
                compared.add(module)
            with lock:
                out.write(json.dumps(result) + "\n")
                out.flush()
                print(
                    f"[{index}/{len(pending)}] {name}: {result['status']}"
                    f" {result.get('reason', '')[:100]} ({result.get('seconds', '-')} s)",
                    flush=True,
                )
        if current is not None:
            current.stop()

    with RESULTS.open("a") as out:
        threads = [threading.Thread(target=serve, args=(out,)) for _ in range(jobs)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()


# ----------------------------------------------------------------------------- report

# A variant is wrong when its max abs diff against eager exceeds this, relative to the
# largest eager output (at least 1).
TOLERANCE = 1e-3
# Rows of the out-of-reach table (the most common reasons).
_REASON_ROWS = 30


def _wrong(entry: dict[str, Any]) -> bool:
    return "diff" in entry and entry["diff"] > TOLERANCE * max(1.0, entry.get("scale", 0.0))


def problems(result: dict[str, Any]) -> list[str]:
    """What the issue counts against xnnfold in one class's result, through the folding
    partitioner and through the exporter: wrong against eager, a crash where stock
    lowers, a program that lowers but does not load, a computed GEMM outside without a
    code."""
    found = []
    paths = (
        ("", result.get("variants", {})),
        (" (exporter)", result.get("exporter", {})),
    )
    for where, path in paths:
        ours, stock = path.get("xnnfold", {}), path.get("stock", {})
        error = ours.get("error", "")
        # Unloadable as stock's program is (the same ops on portable: a missing kernel) is
        # not xnnfold's; unloadable where stock's loads, or where stock does not lower, is.
        if _unloadable(ours) and not _unloadable(stock):
            found.append(f"unloadable{where}")
        elif error and not stock.get("error"):
            found.append(f"crash where stock lowers{where}")
        # Off as far as stock is, the difference is not xnnfold's (`_stock_off_too`).
        if _wrong(ours) and not _stock_off_too(ours, stock):
            found.append(f"wrong{where}")
        if any(row.endswith("(no code)") for row in ours.get("outside", [])):
            found.append(f"outside without a code{where}")
    return found


def _unloadable(entry: dict[str, Any]) -> bool:
    error = entry.get("error", "")
    return error.startswith("load/run") or "Failed to load" in error


def _stock_off_too(ours: dict[str, Any], stock: dict[str, Any]) -> bool:
    """Whether stock's program is off from eager at least as far as xnnfold's."""
    return _wrong(stock) and ours["diff"] <= stock["diff"] * (1 + TOLERANCE)


def _computed(result: dict[str, Any]) -> int:
    """Computed-weight GEMMs `explain` found, through either path (0 when neither lowered):
    those xnnfold saw, or those stock left outside (a result line may lack the count)."""
    return max(
        len(entry.get("outside", [])) if label == "stock" else entry.get("computed", 0)
        for path in ("variants", "exporter")
        for label, entry in result.get(path, {}).items()
        if isinstance(entry, dict)
    )


def _cell(entry: dict[str, Any], key: str, fmt: str) -> str:
    if "error" in entry and key not in entry:
        return "error"
    value = entry.get(key)
    if value is None:
        return "-"
    if isinstance(value, list):
        return str(len(value))
    return format(value, fmt)


def _error_cell(entry: dict[str, Any]) -> str:
    error = entry.get("error")
    return "" if not error else error.replace("|", "/").replace("\n", " ")[:90]


def _row(name: str, path: dict[str, Any], flagged: list[str]) -> str:
    stock, ours = path.get("stock", {}), path.get("xnnfold", {})
    if "error" in stock and "error" in ours and not flagged:
        return f"| {name} | both stop (below) | - | - | - | - | none |"
    scale = ours.get("scale", stock.get("scale"))
    return (
        f"| {name} | {_cell(ours, 'computed', 'd')} / {_cell(ours, 'folded', 'd')} "
        f"| {_cell(stock, 'outside', '')} / {_cell(ours, 'outside', '')} "
        f"| {_cell(stock, 'diff', '.1e')} / {_cell(ours, 'diff', '.1e')}"
        f"{f' ({scale:.1e})' if scale is not None else ''} "
        f"| {_cell(stock, 'bytes', ',d')} / {_cell(ours, 'bytes', ',d')} "
        f"| {_cell(stock, 'ms', '.2f')} / {_cell(ours, 'ms', '.2f')} "
        f"| {', '.join(flagged) or 'none'} |"
    )


def report(results: dict[str, dict[str, Any]], classes: list[tuple[str, str]]) -> str:
    """The markdown tables of the classes with a computed-weight GEMM, and the counts."""
    import collections

    import torch
    import transformers

    from xnnfold._releases import installed_version

    # Older result lines named an import failure "crash".
    for r in results.values():
        if r["status"] == "crash":
            r.update(status="skipped", stage="import")
    models = {n for _, n in classes}
    seen = {n: r for n, r in results.items() if n in models and r["status"] != "not a model class"}
    not_models = sum(1 for r in results.values() if r["status"] == "not a model class")
    candidates = sorted(
        (r for r in seen.values() if r["status"] == "computed GEMM"), key=lambda r: r["class"]
    )
    found = [r for r in candidates if _computed(r) or problems(r)]
    unread = [r for r in candidates if r not in found]
    counts = collections.Counter(r["status"] for r in seen.values())
    flagged = {r["class"]: problems(r) for r in found}
    totals = collections.Counter(
        p.replace(" (exporter)", "") for ps in flagged.values() for p in ps
    )
    head = (
        "| class | GEMMs | outside stock / xnnfold | diff stock / xnnfold | .pte bytes stock / "
        "xnnfold | ms stock / xnnfold | problems |"
    )
    rule = "|---|---|---|---|---|---|---|"
    lines = [
        "# transformers' model classes swept for computed-weight GEMMs",
        "",
        "Written by `benchmarks/transformers_sweep.py --report` from "
        "`transformers_sweep_results.jsonl` (the command and the method are in the "
        "script's docstring and benchmarks/README.md). transformers "
        f"{transformers.__version__}, torch {torch.__version__.split('+')[0]}, executorch "
        f"{installed_version('executorch')}. Shrunk configs, random weights; latency is the "
        "median of interleaved calls through executorch.runtime on a shared 2-core machine "
        "(compare within a row only).",
        "",
        f"- public names in the modeling files: {len(classes)}; swept: "
        f"{len(seen) + not_models} ({not_models} not model classes)",
        f"- model classes tried: {len(seen)}",
    ]
    for status, count in sorted(counts.items()):
        lines.append(f"  - {status}: {count}")
    lines += [
        f"- classes with a computed-weight GEMM (`explain`, either path): {len(found)}",
        f"  - wrong against eager: {totals['wrong']}",
        f"  - crashes where stock lowers: {totals['crash where stock lowers']}",
        f"  - lower but cannot load (where stock's program loads, or stock's does not "
        f"lower): {totals['unloadable']}",
        f"  - computed-weight GEMMs outside without a code: {totals['outside without a code']}",
        f"- a GEMM-like op reads a computed tensor, but no lowering to read: {len(unread)}",
        "",
        "## Through torch.export and the partitioners",
        "",
        "`torch.export` (`strict=False`), then `to_edge_transform_and_lower` with the stock "
        "`XnnpackPartitioner` or with `XnnpackFoldingPartitioner` (after "
        "`prepare_for_xnnpack`). GEMMs: with a computed weight or bias / folded by xnnfold. "
        "Outside: computed-weight GEMMs left on portable. Diff: max abs against eager "
        "through executorch.runtime (the largest eager output in brackets); bytes: the "
        "`.pte` and its `.ptd`, if any. Stock's columns are `-` where another class of the "
        "same modeling file (the same architecture) has them and xnnfold's program "
        "lowered, matched eager and left nothing outside.",
        "",
        head,
        rule,
    ]
    for r in found:
        lines.append(_row(r["class"], r.get("variants", {}), flagged[r["class"]]))
    lines += [
        "",
        "## Through transformers' exporter",
        "",
        '`ExecutorchExporter().export(model, inputs, ExecutorchConfig(backend="xnnpack"))` '
        "(stock) and `xnnfold.integrations.transformers.export` (xnnfold), run through the "
        "exporter's runner: the first class of each modeling file found with one "
        "(`--exporter-for-all` runs every class; the exporter lowers with the same "
        "partitioners).",
        "",
        head,
        rule,
    ]
    for r in found:
        if "exporter" in r:
            lines.append(_row(r["class"], r["exporter"], []))
    errors = [
        (r["class"], f"{path} {label}", _error_cell(e))
        for r in found
        for path in ("variants", "exporter")
        for label, e in r.get(path, {}).items()
        if isinstance(e, dict) and "error" in e
    ]
    if errors:
        lines += ["", "Errors in the tables above (both ways alike unless a problem says):", ""]
        lines += [
            f"- {name}, {where.replace('variants', 'partitioner')}: {error}"
            for name, where, error in errors
        ]
    if unread:
        lines += [
            "",
            "## A GEMM-like op reads a computed tensor, but nothing lowered to read",
            "",
            "Neither path lowered these with either partitioner, or `explain` found no "
            "computed-weight GEMM in what did lower:",
            "",
        ]
        lines += [
            f"- {r['class']}: {_error_cell(r['variants'].get('xnnfold', {})) or 'none found'}"
            for r in unread
        ]
    waiting = sorted(n for n, r in seen.items() if r["status"] == CANDIDATE)
    if waiting:
        lines += [
            "",
            "## Candidates not lowered yet",
            "",
            "A GEMM-like op of the exported program reads a tensor computed from "
            "constants; the run ended before these were lowered (a rerun without "
            f"`--screen-only` lowers them): {', '.join(waiting)}.",
        ]
    reasons: collections.Counter[str] = collections.Counter()
    for r in seen.values():
        if r["status"] == "skipped":
            reason = re.sub(r"[\d,]+", "N", r.get("reason", ""))
            reason = reason.replace("RuntimeError: ", "", 1) if reason.count(":") > 1 else reason
            reasons[f"{r.get('stage')}: {reason[:80].replace('|', '/')}"] += 1
    lines += ["", "## Classes out of the sweep's reach (build, inputs, export, timeout)", ""]
    lines += ["| stage: error | classes |", "|---|---|"]
    common = reasons.most_common(_REASON_ROWS)
    lines += [f"| {reason} | {count} |" for reason, count in common]
    rest = sum(reasons.values()) - sum(count for _, count in common)
    if rest:
        lines.append(f"| other reasons (in the JSONL) | {rest} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", help="class names to sweep")
    parser.add_argument("--limit", type=int, help="at most this many classes")
    parser.add_argument(
        "--timeout", type=float, default=DEFAULT_TIMEOUT, help="seconds to build and export"
    )
    parser.add_argument(
        "--lowering-timeout",
        type=float,
        default=DEFAULT_LOWERING_TIMEOUT,
        help="seconds for the lowerings and timing of a class with a candidate",
    )
    parser.add_argument("--jobs", type=int, default=1, help="worker processes")
    parser.add_argument(
        "--exporter-for-all",
        action="store_true",
        help="through transformers' exporter every class, not only each file's first",
    )
    parser.add_argument(
        "--screen-only",
        action="store_true",
        help="build, export and screen; leave the lowerings to a later run",
    )
    parser.add_argument(
        "--redo", nargs="*", default=[], help="redo the classes skipped at these stages"
    )
    parser.add_argument("--fresh", action="store_true", help="redo the classes given")
    parser.add_argument("--report", action="store_true", help="write the markdown table only")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return worker()
    if args.report:
        TABLE.write_text(report(_done(), discover()))
        return 0
    classes = _order(discover())
    if args.only:
        wanted = set(args.only)
        classes = [c for c in classes if c[1] in wanted]
    if args.limit:
        classes = classes[: args.limit]
    if args.redo and RESULTS.exists():
        redo = set(args.redo)
        kept = [
            line
            for line in RESULTS.read_text().splitlines()
            if json.loads(line).get("stage") not in redo
        ]
        RESULTS.write_text("".join(line + "\n" for line in kept))
    if args.fresh and RESULTS.exists():
        names = {n for _, n in classes}
        kept = [
            line
            for line in RESULTS.read_text().splitlines()
            if json.loads(line)["class"] not in names
        ]
        RESULTS.write_text("".join(line + "\n" for line in kept))
    run(
        classes,
        args.timeout,
        args.lowering_timeout,
        args.jobs,
        exporter_for_all=args.exporter_for_all,
        screen_only=args.screen_only,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
