"""Per-label lists a transformers config leaves None that its model indexes by label
(PP-DocLayout V2's ``class_thresholds`` and ``class_order``): the sweep gives each
label an entry, as a checkpoint's config does for its labels.
"""

from __future__ import annotations

import contextlib
import functools
import re
from typing import Any

# A config docstring's field of floats or integers documented as one per label.
_PER_LABEL = re.compile(
    r"^\s*(\w+) \(`list\[(float|int)\]`[^)]*\):\s*\n[^\n]*\bfor each label", re.MULTILINE
)
# A score threshold of a sigmoid's output, for each label alike.
_THRESHOLD = 0.5


@functools.cache
def _per_label(config_class: type) -> dict[str, str]:
    """The per-label list fields ``config_class``'s docstring documents: name -> the
    element type (``float`` or ``int``)."""
    return dict(_PER_LABEL.findall(config_class.__doc__ or ""))


def fill_per_label(config: Any) -> None:
    """Set each per-label list ``config`` leaves None (`_per_label`) to one entry per
    label: a float (a threshold) `_THRESHOLD`, an integer (a label's order or priority)
    the label's own index."""
    labels = getattr(config, "num_labels", None)
    if not isinstance(labels, int) or labels < 1:
        return
    for name, kind in _per_label(type(config)).items():
        if vars(config).get(name, "absent") is None:
            value = [_THRESHOLD] * labels if kind == "float" else list(range(labels))
            with contextlib.suppress(Exception):
                setattr(config, name, value)
