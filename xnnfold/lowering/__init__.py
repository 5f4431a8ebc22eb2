"""Convenience around the pipeline: prepare, export and lower in one call; run a `.pte`."""
