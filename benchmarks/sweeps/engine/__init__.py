"""The machinery the model-zoo sweeps share: a library adds how it finds, builds and feeds
its classes (`Library`), this package does the rest.

For each class a worker process builds the model and its inputs (`Library.build`),
``torch.export``s it (``strict=False``) and screens the program (`screen`): a candidate
has a GEMM-like op reading a tensor computed from constants. A candidate is lowered with
``XnnpackFoldingPartitioner`` and, where the policy asks, the stock
``XnnpackPartitioner`` (`lowering`), each timed, written with `xnnfold.save` (a tied
table's ``.ptd`` too) and run through executorch.runtime against eager, the programs
timed interleaved. Workers have a timeout per phase and a memory cap; results go to a
JSON-lines file a rerun resumes from (`driver`); `report` writes the markdown;
`command_line` is what every sweep script runs.

    from benchmarks.sweeps.engine import Library, main

    class Timm(Library): ...

    if __name__ == "__main__":
        raise SystemExit(main(Timm()))
"""

from __future__ import annotations

from benchmarks.sweeps.engine.command_line import main
from benchmarks.sweeps.engine.library import Built, Library, OutOfReach

__all__ = ["Built", "Library", "OutOfReach", "main"]
