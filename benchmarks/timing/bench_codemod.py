"""Time ``xnnfold codemod --report`` over a generated tree of model-like Python files.

Generates ``--files`` modules (default 2,000) in a temporary directory, seeded so every
run sees the same tree: most are plain (models with conv/linear layers and their forward,
data and training utilities, configs); a fraction holds legacy weight_norm / spectral_norm
sites, parametrizations, legacy state_dict keys, weights computed in forward, or export
code that lowers to XNNPACK. Times the report with 1 and 2 workers, with the driver's
trigger-word pre-filter (the default) and without it (every file parsed), checks that
every variant reports the same findings, prints a markdown table and writes it to
``benchmarks/timing/codemod_results.md``.

    python benchmarks/timing/bench_codemod.py --files 2000 --jobs 1 2
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from xnnfold.rewriter.codemod import CodemodOptions, CodemodSummary, run_codemod

TARGET_S = 60.0

_HEADER = '''"""{doc}"""

from __future__ import annotations

import math
from typing import Optional

import torch
from torch import nn
'''

_BLOCK = '''

class {name}Block(nn.Module):
    """Residual block {i}: two convolutions, a norm and a gated activation."""

    def __init__(self, channels: int, kernel_size: int = {k}, dilation: int = {d}) -> None:
        super().__init__()
        padding = (kernel_size - 1) * dilation // 2
        self.conv1 = {wrap1}nn.Conv1d(channels, channels, kernel_size, padding=padding, dilation=dilation){close1}
        self.conv2 = {wrap2}nn.Conv1d(channels, channels, 1){close2}
        self.norm = nn.GroupNorm(1, channels)
        self.scale = nn.Parameter(torch.ones(1, channels, 1) * {scale})

    def forward(self, x: torch.Tensor, mask: Optional[torch.Tensor] = None) -> torch.Tensor:
        residual = x
        x = self.norm(x)
        x = self.conv1(x)
        gate, value = x.chunk(2, dim=1) if x.shape[1] % 2 == 0 else (x, x)
        x = torch.sigmoid(gate) * torch.tanh(value)
        x = self.conv2(x) * self.scale
        if mask is not None:
            x = x * mask
        return residual + x
'''

_MODEL = '''

class {name}(nn.Module):
    """A stack of {n} blocks with an input and an output projection."""

    def __init__(self, in_channels: int = {c}, hidden: int = {h}, layers: int = {n}) -> None:
        super().__init__()
        self.inp = nn.Conv1d(in_channels, hidden, 7, padding=3)
        self.blocks = nn.ModuleList([{name}Block(hidden, dilation=2 ** (i % 4)) for i in range(layers)])
        self.out = nn.Linear(hidden, in_channels)
        self.dropout = nn.Dropout({p})

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.inp(x)
        for block in self.blocks:
            x = self.dropout(block(x))
        return self.out(x.transpose(1, 2)).transpose(1, 2)


def build_{lower}(config: dict) -> {name}:
    model = {name}(config.get("in_channels", {c}), config.get("hidden", {h}), config.get("layers", {n}))
    for parameter in model.parameters():
        if parameter.dim() > 1:
            nn.init.xavier_uniform_(parameter, gain=math.sqrt({g}))
    return model
'''

_UTILS = '''"""{doc}"""

from __future__ import annotations

import json
import os
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator


@dataclass
class {name}Config:
    root: str = "data/{lower}"
    batch_size: int = {b}
    shuffle: bool = True
    seed: int = {i}
    extensions: list = field(default_factory=lambda: [".wav", ".flac"])

    @classmethod
    def from_file(cls, path: str) -> "{name}Config":
        with open(path) as handle:
            return cls(**json.load(handle))


def list_files(config: {name}Config) -> list:
    files = []
    for directory, _, names in os.walk(config.root):
        for name in sorted(names):
            if os.path.splitext(name)[1] in config.extensions:
                files.append(os.path.join(directory, name))
    return files


def batches(config: {name}Config) -> Iterator[list]:
    files = list_files(config)
    rng = random.Random(config.seed)
    if config.shuffle:
        rng.shuffle(files)
    for start in range(0, len(files), config.batch_size):
        yield files[start:start + config.batch_size]


def summarize(paths: list) -> dict:
    sizes = [Path(p).stat().st_size for p in paths if Path(p).exists()]
    return {{"count": len(sizes), "total": sum(sizes), "mean": sum(sizes) / max(len(sizes), 1)}}
'''

_ATTENTION = '''

class {name}Attention(nn.Module):
    """Self-attention over the time axis; its matmuls multiply activations only."""

    def __init__(self, dim: int = {h}, heads: int = 4) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(x).reshape(b, t, 3, self.heads, d // self.heads).unbind(2)
        scores = torch.matmul(q.transpose(1, 2), k.permute(0, 2, 3, 1)) / math.sqrt(d // self.heads)
        out = torch.matmul(scores.softmax(-1), v.transpose(1, 2))
        return self.proj(out.transpose(1, 2).reshape(b, t, d))
'''

_LEGACY_KEYS = """

def load_legacy_checkpoint(model: nn.Module, path: str) -> None:
    state = torch.load(path, map_location="cpu")
    for key in list(state):
        if key.endswith("weight_g") or key.endswith("weight_v"):
            state[key] = state[key].float()
    model.load_state_dict(state)
"""

_FORWARD_COMPUTED = """

class {name}Scaled(nn.Module):
    def __init__(self, features: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(features, features))
        self.gain = nn.Parameter(torch.ones(features, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        w = self.weight * self.gain / self.weight.norm(dim=1, keepdim=True)
        return torch.nn.functional.linear(x, w)
"""

_EXPORT = """

def export_{lower}(model: nn.Module, example: torch.Tensor, path: str) -> None:
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import to_edge_transform_and_lower

    program = torch.export.export(model.eval(), (example,))
    edge = to_edge_transform_and_lower(program, partitioner=[XnnpackPartitioner()])
    with open(path, "wb") as handle:
        handle.write(edge.to_executorch().buffer)
"""

# Kinds of files, with their share of the tree.
# About 15% of the files hold a site, and 30% of the models an attention block whose
# torch.matmul passes the pre-filter (and is then parsed to find no computed weight).
KINDS = (
    ("plain_model", 0.50),
    ("utils", 0.35),
    ("legacy_weight_norm", 0.04),
    ("parametrization", 0.03),
    ("legacy_spectral_norm", 0.02),
    ("legacy_keys", 0.02),
    ("forward_computed", 0.02),
    ("export", 0.02),
)


def _module(kind: str, i: int, rng: random.Random) -> str:
    name = f"{rng.choice(['Wave', 'Mel', 'Pos', 'Gan', 'Res', 'Dac', 'Vits', 'Enc'])}Net{i}"
    fill = dict(
        name=name,
        lower=name.lower(),
        i=i,
        k=rng.choice([3, 5, 7]),
        d=rng.choice([1, 2, 3]),
        c=rng.choice([1, 80, 128]),
        h=rng.choice([64, 128, 256]),
        n=rng.randint(2, 8),
        p=rng.choice([0.0, 0.1]),
        g=rng.choice([1, 2]),
        scale=rng.choice([0.1, 1.0]),
        b=rng.choice([8, 16, 32]),
    )
    if kind == "utils":
        return _UTILS.format(doc=f"Data utilities for dataset {i}.", **fill)
    wrap = ("", "")
    header = _HEADER.format(doc=f"Model {name}: a convolutional stack ({kind}).")
    if kind in ("legacy_weight_norm", "legacy_keys"):
        header += "from torch.nn.utils import weight_norm\n"
        wrap = ("weight_norm(", ")")
    elif kind == "legacy_spectral_norm":
        header += "from torch.nn.utils import spectral_norm\n"
        wrap = ("spectral_norm(", ")")
    elif kind == "parametrization":
        header += "from torch.nn.utils.parametrizations import weight_norm\n"
        wrap = ("weight_norm(", ")")
    text = header
    for b in range(rng.randint(1, 3)):
        block = dict(fill, name=f"{name}{b}")
        text += _BLOCK.format(wrap1=wrap[0], close1=wrap[1], wrap2="", close2="", **block)
    text += _MODEL.format(**dict(fill, name=name)).replace(f"{name}Block", f"{name}0Block")
    if rng.random() < 0.3:
        text += _ATTENTION.format(**fill)
    if kind == "legacy_keys":
        text += _LEGACY_KEYS
    elif kind == "forward_computed":
        text += _FORWARD_COMPUTED.format(**fill)
    elif kind == "export":
        text += _EXPORT.format(**fill)
    return text


def generate(root: Path, files: int, seed: int = 20261130) -> dict[str, int]:
    rng = random.Random(seed)
    names = [kind for kind, _ in KINDS]
    weights = [share for _, share in KINDS]
    counts = dict.fromkeys(names, 0)
    for i in range(files):
        kind = rng.choices(names, weights)[0]
        counts[kind] += 1
        path = root / f"pkg{i // 100:02d}" / f"{kind}_{i:04d}.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(_module(kind, i, rng))
    return counts


def _cpu_s() -> float:
    """CPU seconds of this process and its finished children (the -j workers)."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def _findings(summary: CodemodSummary) -> list[str]:
    return [finding.format(path) for path, finding in summary.findings]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=2000)
    parser.add_argument("--jobs", type=int, nargs="+", default=[1, 2])
    parser.add_argument(
        "--unfiltered-dirs",
        type=int,
        default=2,
        help="sub-directories of 100 files timed without the pre-filter "
        "(every file parsed; 0 = none, the full tree takes many minutes here)",
    )
    parser.add_argument("--out", type=Path, default=Path(__file__).with_name("codemod_results.md"))
    args = parser.parse_args()

    rows = []
    reference = None
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "tree"
        counts = generate(root, args.files)
        size = sum(p.stat().st_size for p in root.rglob("*.py"))
        subtree = sorted(str(p) for p in root.iterdir())[: args.unfiltered_dirs]
        variants = [(True, jobs, [str(root)]) for jobs in args.jobs]
        if subtree:
            variants += [(False, jobs, subtree) for jobs in args.jobs]
        for prefilter, jobs, paths in variants:
            cpu = _cpu_s()
            summary = run_codemod(
                paths,
                options=CodemodOptions(),
                mode="report",
                jobs=jobs,
                prefilter=prefilter,
                progress=False,
            )
            cpu = _cpu_s() - cpu
            findings = _findings(summary)
            if reference is None:
                reference = findings
            # The pre-filter must never hide a finding: compare on the files both runs saw.
            expected = [f for f in reference if any(f.startswith(p + os.sep) for p in paths)]
            if findings != expected:
                raise SystemExit(
                    f"pre-filter={prefilter} -j {jobs}: findings differ from the first run"
                )
            rows.append((prefilter, jobs, summary, cpu))
            print(
                f"pre-filter={prefilter} -j {jobs} over {summary.scanned} files: "
                f"{summary.elapsed_s:.1f} s",
                file=sys.stderr,
                flush=True,
            )
        start = time.perf_counter()
        cli = subprocess.run(
            [
                sys.executable,
                "-m",
                "xnnfold",
                "codemod",
                "--report",
                "-j",
                str(max(args.jobs)),
                str(root),
            ],
            capture_output=True,
            text=True,
        )
        cli_s = time.perf_counter() - start
        if cli.returncode != 0:
            raise SystemExit(f"xnnfold codemod --report failed:\n{cli.stderr}")

    load = os.getloadavg()
    full = [s.elapsed_s for prefilter, _, s, _ in rows if prefilter]
    lines = [
        f"`python benchmarks/timing/bench_codemod.py --files {args.files}`: "
        f"{args.files:,} generated files ({size / 1e6:.1f} MB; "
        + ", ".join(f"{kind} {n}" for kind, n in counts.items())
        + f"), `--report` mode; {platform.machine()}, {os.cpu_count()} cores, "
        f"load average {load[0]:.1f} at the end (other jobs share the machine).",
        "",
        "| pre-filter | jobs | files | files parsed | findings | files with a pending rewrite | wall time (s) | CPU time (s) | CPU ms / parsed file |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for prefilter, jobs, summary, cpu in rows:
        parsed = summary.scanned - summary.prefiltered
        lines.append(
            f"| {'on' if prefilter else 'off'} | {jobs} | {summary.scanned:,} | {parsed:,} | "
            f"{len(summary.findings):,} | "
            f"{len(summary.changed):,} | {summary.elapsed_s:.1f} | {cpu:.1f} | "
            f"{1000 * cpu / max(parsed, 1):.0f} |"
        )
    lines += [
        "",
        f"End to end, `python -m xnnfold codemod --report -j {max(args.jobs)} TREE` (interpreter "
        f"start and imports included): {cli_s:.1f} s.",
        "",
        f"Target: `--report` over {args.files:,} files under {TARGET_S:.0f} s: "
        + ("met" if min(full) < TARGET_S else "MISSED")
        + f" (best {min(full):.1f} s; pre-filter on, -j {args.jobs[0]}: {full[0]:.1f} s).",
        "",
        # Other jobs share this machine, so wall time overstates the cost: CPU seconds
        # divided by the worker count is the wall time on an otherwise idle machine.
        "Projected on an idle machine (CPU time / jobs, pre-filter on): "
        + "; ".join(
            f"-j {jobs}: {cpu / jobs:.1f} s" for prefilter, jobs, _, cpu in rows if prefilter
        )
        + ".",
    ]
    text = "\n".join(lines) + "\n"
    print(text)
    args.out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
