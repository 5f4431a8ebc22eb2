"""Benchmarks of xnnfold: timing scripts, correctness tools and the model-zoo sweeps
(README.md)."""
