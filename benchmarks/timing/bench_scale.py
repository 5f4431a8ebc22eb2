"""xnnfold at full model size, against the hand-folded twin lowered by the stock partitioner.

Random weights from the real configs, nothing downloaded:

- wav2vec2 base and large encoders (transformers ``Wav2Vec2Model``, 95M and 317M
  parameters; weight_norm on the positional convolution), 1 s of 16 kHz audio;
- the SpeechT5 HiFi-GAN vocoder at its default config, with its weight_norm applied
  (``apply_weight_norm()``, as for training or a checkpoint kept parametrized), 1 s of mel
  frames;
- timm ``nfnet_l0`` at 224x224 (weight standardization computed in ``forward``).

Each lowering runs in its own process, so peak RSS is that lowering's alone, and the two
variants alternate (``--lowerings`` each; medians reported):
``xnnfold`` (the model as built, ``prepare_for_xnnpack`` + ``XnnpackFoldingPartitioner``)
and ``hand`` (a fresh instance of the same seed whose computed weights were folded in eager
and stored as parameters, ``XnnpackPartitioner``). Reported per model: export + lowering
wall time (``torch.export`` through ``to_executorch``), peak RSS of the process, ``.pte``
bytes, median latency through executorch.runtime with the two programs called alternately
in one process, and the max abs difference of each from eager. Ratios are xnnfold / hand.

    python benchmarks/timing/bench_scale.py                          # all four models
    python benchmarks/timing/bench_scale.py --models hifigan --runs 5

Needs ``transformers`` and ``timm`` beside xnnfold's lowering stack.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from importlib import metadata
from pathlib import Path
from typing import Any, Callable

MODELS = ("wav2vec2-base", "wav2vec2-large", "hifigan", "nfnet_l0")
VARIANTS = ("xnnfold", "hand")
SEED = 0


# -- models (child process) -------------------------------------------------------------


def _wav2vec2(large: bool) -> tuple[Any, tuple[Any, ...]]:
    import torch
    from transformers import Wav2Vec2Config, Wav2Vec2Model

    if large:
        # wav2vec2-large-lv60's architecture (stable layer norm, layer-norm feature encoder).
        config = Wav2Vec2Config(
            hidden_size=1024,
            num_hidden_layers=24,
            num_attention_heads=16,
            intermediate_size=4096,
            feat_extract_norm="layer",
            do_stable_layer_norm=True,
            conv_bias=True,
        )
    else:
        config = Wav2Vec2Config()  # the base architecture
    model = Wav2Vec2Model(config).eval()
    return model, (torch.randn(1, 16000, generator=torch.Generator().manual_seed(1)),)


def _hifigan() -> tuple[Any, tuple[Any, ...]]:
    import torch
    from transformers import SpeechT5HifiGan, SpeechT5HifiGanConfig

    config = SpeechT5HifiGanConfig()
    model = SpeechT5HifiGan(config)
    model.apply_weight_norm()
    frames = config.sampling_rate // 256  # 1 s at the default hop of 256 samples
    spectrogram = torch.randn(
        frames, config.model_in_dim, generator=torch.Generator().manual_seed(1)
    )
    return model.eval(), (spectrogram,)


def _nfnet() -> tuple[Any, tuple[Any, ...]]:
    import timm
    import torch

    model = timm.create_model("nfnet_l0", pretrained=False).eval()
    return model, (torch.randn(1, 3, 224, 224, generator=torch.Generator().manual_seed(1)),)


def build(name: str) -> tuple[Any, tuple[Any, ...]]:
    import torch

    torch.manual_seed(SEED)
    builders: dict[str, Callable[[], tuple[Any, tuple[Any, ...]]]] = {
        "wav2vec2-base": lambda: _wav2vec2(large=False),
        "wav2vec2-large": lambda: _wav2vec2(large=True),
        "hifigan": _hifigan,
        "nfnet_l0": _nfnet,
    }
    return builders[name]()


def hand_fold(model: Any) -> Any:
    """Store every computed weight as a parameter: parametrizations removed (their value
    kept), timm's standardized convolutions given their standardized weight, and timm's
    SwinV2 attention given its qkv bias (``cat(q_bias, k_bias, v_bias)``) stored."""
    import torch
    import torch.nn.functional as F
    from torch.nn.utils import parametrize

    for module in list(model.modules()):
        if parametrize.is_parametrized(module):
            for tensor in list(module.parametrizations.keys()):
                parametrize.remove_parametrizations(module, tensor, leave_parametrized=True)
    for module in list(model.modules()):
        # timm's WindowAttention (swin_transformer_v2): with q_bias None it calls
        # self.qkv(x), which adds qkv.bias.
        if getattr(module, "q_bias", None) is not None and hasattr(module, "qkv"):
            with torch.no_grad():
                bias = torch.cat((module.q_bias, module.k_bias, module.v_bias))
            module.qkv.bias = torch.nn.Parameter(bias)
            module.q_bias = None
    try:
        from timm.layers import ScaledStdConv2d, ScaledStdConv2dSame
    except ImportError:
        return model
    for module in list(model.modules()):
        if isinstance(module, (ScaledStdConv2d, ScaledStdConv2dSame)):
            with torch.no_grad():
                weight = F.batch_norm(
                    module.weight.reshape(1, module.out_channels, -1),
                    None,
                    None,
                    weight=(module.gain * module.scale).view(-1),
                    training=True,
                    momentum=0.0,
                    eps=module.eps,
                ).reshape_as(module.weight)
            del module.weight, module.gain
            module.weight = torch.nn.Parameter(weight.contiguous())
            same = isinstance(module, ScaledStdConv2dSame)

            def forward(x: Any, module: Any = module, same: bool = same) -> Any:
                if same:
                    from timm.layers.padding import pad_same

                    x = pad_same(x, module.kernel_size, module.stride, module.dilation)
                return F.conv2d(
                    x,
                    module.weight,
                    module.bias,
                    module.stride,
                    module.padding,
                    module.dilation,
                    module.groups,
                )

            module.forward = forward
    return model


def _peak_rss_mb() -> float:
    """This process's peak RSS. VmHWM, not getrusage's ru_maxrss: Linux carries
    ru_maxrss over exec, so a child would report its parent's peak (here, the parent
    that just ran the previous model's programs)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def child(name: str, variant: str, out: Path) -> None:
    import torch
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import to_edge_transform_and_lower

    import xnnfold

    model, inputs = build(name)
    if variant == "xnnfold" and not (out / f"{name}.eager.pt").exists():
        with torch.no_grad():
            eager = model(*inputs)
        # The program's first output, as a plain tensor (a transformers output class
        # would not load with torch.load's weights_only default).
        eager = getattr(eager, "last_hidden_state", eager)
        if isinstance(eager, (tuple, list)):
            eager = eager[0]
        torch.save({"inputs": inputs, "eager": eager}, out / f"{name}.eager.pt")
    rss_before = _peak_rss_mb()
    start = time.perf_counter()
    if variant == "xnnfold":
        ep = torch.export.export(xnnfold.prepare_for_xnnpack(model), inputs)
        partitioner: Any = xnnfold.XnnpackFoldingPartitioner(facts=xnnfold.CrossMethodFacts())
    else:
        ep = torch.export.export(hand_fold(model), inputs)
        partitioner = XnnpackPartitioner()
    exported = time.perf_counter()
    edge = to_edge_transform_and_lower(ep, partitioner=[partitioner])
    lowered = time.perf_counter()
    buffer = edge.to_executorch().buffer
    end = time.perf_counter()
    seconds = end - start
    summary = xnnfold.summarize(edge)
    (out / f"{name}.{variant}.pte").write_bytes(buffer)
    result = {
        "seconds": seconds,
        "phases": {
            "export": exported - start,
            "lower": lowered - exported,
            "to_executorch": end - lowered,
        },
        "peak_rss_mb": _peak_rss_mb(),
        "rss_before_lowering_mb": rss_before,
        "bytes": len(buffer),
        "delegates": summary.delegates,
        "outside": summary.outside_ops_text(),
    }
    (out / f"{name}.{variant}.json").write_text(json.dumps(result))


# -- parent -----------------------------------------------------------------------------


def _latency(name: str, out: Path, runs: int) -> dict[str, dict[str, float]]:
    """Median latency and max abs error of both programs, called alternately."""
    import torch

    import xnnfold

    saved = torch.load(out / f"{name}.eager.pt")
    inputs, eager = list(saved["inputs"]), saved["eager"]
    eager_out = eager
    programs = {v: (out / f"{name}.{v}.pte").read_bytes() for v in VARIANTS}
    loaded = {v: xnnfold.LoadedProgram(programs[v]) for v in VARIANTS}
    times: dict[str, list[float]] = {v: [] for v in VARIANTS}
    errors: dict[str, float] = {}
    for v in VARIANTS:  # warm-up, and the outputs
        got = loaded[v](inputs)[0]
        errors[v] = float((got - eager_out).abs().max())
    for i in range(runs):
        order = VARIANTS if i % 2 == 0 else VARIANTS[::-1]
        for v in order:
            start = time.perf_counter()
            loaded[v](inputs)
            times[v].append(time.perf_counter() - start)
    identical = len(set(programs.values())) == 1
    scale = float(eager_out.abs().max())
    return {
        v: {
            "median_ms": 1e3 * statistics.median(times[v]),
            "max_abs_error": errors[v],
            "eager_max_abs": scale,
            "identical": identical,
        }
        for v in VARIANTS
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="+", choices=MODELS, default=list(MODELS))
    parser.add_argument("--runs", type=int, default=9, help="timed calls per program")
    parser.add_argument(
        "--lowerings",
        type=int,
        default=3,
        help="lowerings per variant, alternating xnnfold and hand; medians are reported",
    )
    parser.add_argument("--out", type=Path, default=Path(__file__).with_name("scale_results.md"))
    parser.add_argument(
        "--child", nargs=3, metavar=("MODEL", "VARIANT", "DIR"), help=argparse.SUPPRESS
    )
    args = parser.parse_args(argv)
    if args.child:
        child(args.child[0], args.child[1], Path(args.child[2]))
        return 0

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        for name in args.models:
            runs: dict[str, list[dict[str, Any]]] = {v: [] for v in VARIANTS}
            for i in range(args.lowerings):
                # Alternated, so a change in the machine's load falls on both variants.
                for variant in VARIANTS if i % 2 == 0 else VARIANTS[::-1]:
                    print(
                        f"lowering {name} ({variant}, {i + 1}/{args.lowerings}) ...",
                        file=sys.stderr,
                        flush=True,
                    )
                    subprocess.run(
                        [sys.executable, __file__, "--child", name, variant, str(out)],
                        check=True,
                        env={**os.environ, "PYTHONWARNINGS": "ignore"},
                    )
                    runs[variant].append(json.loads((out / f"{name}.{variant}.json").read_text()))
            measured: dict[str, dict[str, Any]] = {}
            for variant, results in runs.items():
                measured[variant] = {
                    **results[-1],
                    "seconds": statistics.median(r["seconds"] for r in results),
                    "peak_rss_mb": statistics.median(r["peak_rss_mb"] for r in results),
                    "all_seconds": [r["seconds"] for r in results],
                    "phases": {
                        phase: statistics.median(r["phases"][phase] for r in results)
                        for phase in results[0]["phases"]
                    },
                }
                assert len({r["bytes"] for r in results}) == 1, (
                    f"{name} {variant}: .pte size varies"
                )
            for variant, timing in _latency(name, out, args.runs).items():
                measured[variant].update(timing)
            rows.append((name, measured))
            for variant in VARIANTS:
                (out / f"{name}.{variant}.pte").unlink()

    command = "python benchmarks/timing/bench_scale.py " + " ".join(
        (["--models", *args.models] if args.models != list(MODELS) else [])
        + ["--runs", str(args.runs), "--lowerings", str(args.lowerings)]
    )
    lines = [
        "# Full-size models: xnnfold vs the hand-folded twin (stock partitioner)",
        "",
        f"`{command}` on {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; "
        f"torch {metadata.version('torch')}, executorch {metadata.version('executorch')}; "
        f"{platform.machine()}, {os.cpu_count()} cores; each lowering in its own process, "
        f"{args.lowerings} per variant, alternating (medians of time and peak RSS); "
        "latency: both programs called alternately in one process.",
        "",
        "| model | variant | export + lowering (s) | export / lower / to_executorch (s) | peak RSS (MB) | .pte bytes | delegates | ops outside | median latency (ms) | max abs diff vs eager |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, m in rows:
        for variant in VARIANTS:
            r = m[variant]
            lines.append(
                f"| {name} | {variant} | {r['seconds']:.1f} | "
                f"{' / '.join(f'{t:.1f}' for t in r['phases'].values())} | {r['peak_rss_mb']:,.0f} | "
                f"{r['bytes']:,} | {r['delegates']} | {r['outside']} | {r['median_ms']:.2f} | "
                f"{r['max_abs_error']:.2e} |"
            )
    lines += [
        "",
        "| model | lowering time | peak RSS | bytes | latency | byte-identical programs | eager max abs output |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, m in rows:
        x, h = m["xnnfold"], m["hand"]
        lines.append(
            f"| {name} | {x['seconds'] / h['seconds']:.3f}x | {x['peak_rss_mb'] / h['peak_rss_mb']:.3f}x | "
            f"{x['bytes'] - h['bytes']:+,} | {x['median_ms'] / h['median_ms']:.3f}x | "
            f"{'yes' if x['identical'] else 'no'} | {x['eager_max_abs']:.3g} |"
        )
    text = "\n".join(lines) + "\n"
    args.out.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
