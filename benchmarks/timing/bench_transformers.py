"""transformers' ExecuTorch exporter, stock vs `xnnfold.integrations.transformers.export`.

Exports the README's tiny Wav2Vec2Model (its positional convolution under weight_norm),
or with ``--base`` wav2vec2-base's dimensions with one transformer layer (the 128-tap
grouped positional convolution over 768 channels), both ways, checks each against eager through the exporter's runner, then times calls
through the runner, interleaved (the two variants alternate, the first of each pair
alternating too), and prints the median latency of each, the ratio, the GEMMs left on
portable and the `.pte` bytes. Needs transformers (``pip install "xnnfold[transformers]"``).

    python benchmarks/timing/bench_transformers.py --runs 20
    python benchmarks/timing/bench_transformers.py --base --runs 5 --samples 16000
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any, Callable

import torch


def _model(base: bool) -> Any:
    from transformers import Wav2Vec2Config, Wav2Vec2Model

    torch.manual_seed(0)
    if base:
        return Wav2Vec2Model(Wav2Vec2Config(num_hidden_layers=1)).eval()
    config = Wav2Vec2Config(
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=64,
        conv_dim=(32, 32),
        conv_stride=(5, 2),
        conv_kernel=(10, 3),
        num_conv_pos_embeddings=16,
        num_conv_pos_embedding_groups=4,
    )
    return Wav2Vec2Model(config).eval()


def _timed(call: Callable[[], Any]) -> float:
    start = time.perf_counter()
    call()
    return (time.perf_counter() - start) * 1000


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20, help="timed calls per variant")
    parser.add_argument("--samples", type=int, default=4000, help="audio samples per call")
    parser.add_argument("--base", action="store_true", help="wav2vec2-base's dimensions, one layer")
    args = parser.parse_args()

    from transformers.exporters import ExecutorchConfig
    from transformers.exporters.exporter_executorch import ExecutorchExporter

    import xnnfold
    from xnnfold.integrations.transformers import export

    inputs = {
        "input_values": torch.randn(1, args.samples, generator=torch.Generator().manual_seed(1))
    }
    exports = {
        "stock ExecutorchExporter": ExecutorchExporter().export(
            _model(args.base), dict(inputs), ExecutorchConfig(backend="xnnpack")
        ),
        "xnnfold export": export(_model(args.base), dict(inputs)),
    }
    with torch.no_grad():
        expected = _model(args.base)(**inputs).last_hidden_state
    times: dict[str, list[float]] = {name: [] for name in exports}
    for name, exported in exports.items():
        diff = (exported(**inputs).last_hidden_state - expected).abs().max().item()
        print(f"{name}: max abs diff vs eager {diff:.2e}", flush=True)
    names = list(exports)
    for run in range(args.runs):
        for name in names if run % 2 == 0 else reversed(names):
            times[name].append(_timed(lambda exported=exports[name]: exported(**inputs)))

    print("\n| variant | GEMMs on portable | .pte bytes | median latency (ms) |")
    print("|---|---|---|---|")
    medians = {}
    for name, exported in exports.items():
        outside = ", ".join(row.module for row in xnnfold.explain(exported.program).outside)
        medians[name] = statistics.median(times[name])
        print(
            f"| {name} | {outside or 'none'} | {len(exported.program.buffer):,} "
            f"| {medians[name]:,.2f} |"
        )
    stock, folding = medians.values()
    print(f"\nstock / xnnfold: {stock / folding:.1f}x ({args.runs} interleaved calls each)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
