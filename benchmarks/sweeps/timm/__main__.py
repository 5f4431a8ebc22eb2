"""``python -m benchmarks.sweeps.timm``: the timm sweep's command line (``--help``)."""

from __future__ import annotations

from benchmarks.sweeps.engine import main
from benchmarks.sweeps.timm import library

if __name__ == "__main__":
    raise SystemExit(main(library.Timm(), description=library.__doc__ or ""))
