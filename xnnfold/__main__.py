"""``python -m xnnfold`` is the ``xnnfold`` command."""

import sys

from xnnfold.cli import main

sys.exit(main())
