"""The ``xnnfold`` command: ``demo``, ``export`` and ``codemod`` (``export`` also prints the
`xnnfold.explain` table: where each GEMM ran, and why).

Every subcommand imports its stage on first use, so ``xnnfold --help`` and ``xnnfold
codemod`` start without torch or executorch.
"""

from xnnfold.cli._main import main

__all__ = ["main"]
