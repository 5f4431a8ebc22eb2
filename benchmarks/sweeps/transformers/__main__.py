"""``python -m benchmarks.sweeps.transformers``: the transformers sweep's command line (``--help``)."""

from __future__ import annotations

from benchmarks.sweeps.engine import main
from benchmarks.sweeps.transformers import library

if __name__ == "__main__":
    raise SystemExit(main(library.Transformers(), description=library.__doc__ or ""))
