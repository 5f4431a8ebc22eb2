"""The timm sweep: `Timm` (`library`) over the engine; run with ``python -m
benchmarks.sweeps.timm`` from the repository's root (its README)."""
