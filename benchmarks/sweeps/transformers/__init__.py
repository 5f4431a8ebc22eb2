"""The transformers sweep: `Transformers` (`library`) over the engine; run with ``python -m
benchmarks.sweeps.transformers`` from the repository's root (its README)."""
