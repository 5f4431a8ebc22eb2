"""The exit codes of every `xnnfold` command, with no dependency at all.

The codemod's driver (which imports neither torch nor executorch) and the command line
both answer with these, so ``xnnfold codemod --check`` and ``xnnfold export --check``
mean the same thing by each code.
"""

from __future__ import annotations

from typing import Final

__all__ = ["EXIT_FAILED", "EXIT_OK", "EXIT_USAGE"]

EXIT_OK: Final = 0
# A check found something: a rewrite is pending, a GEMM was left outside a delegate, a
# file could not be rewritten.
EXIT_FAILED: Final = 1
# The command could not run: bad arguments, a missing install (argparse's own code).
EXIT_USAGE: Final = 2
