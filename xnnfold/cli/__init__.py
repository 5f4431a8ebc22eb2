"""The ``xnnfold`` command: ``demo``, ``export``, ``explain`` and ``codemod``.

Every subcommand imports its stage on first use, so ``xnnfold --help`` and ``xnnfold
codemod`` start without torch or executorch.
"""

from xnnfold.cli._main import main

__all__ = ["main"]
