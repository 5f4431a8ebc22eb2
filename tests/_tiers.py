"""Marks of a test case by tier, for parametrized sweeps whose full-tier slice is a subset.

The tiers themselves (which marker runs where) are in conftest.py; this is the one way a
parametrized case is left to the campaign tier."""

from __future__ import annotations

import pytest

__all__ = ["campaign_unless"]


def campaign_unless(kept: bool) -> list[pytest.MarkDecorator]:
    """No marks for a case the module's own tier keeps; ``campaign`` for one it leaves
    to the campaign tier."""
    return [] if kept else [pytest.mark.campaign]
