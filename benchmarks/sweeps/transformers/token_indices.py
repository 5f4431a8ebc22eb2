"""Token indices of a transformers config made to fit its shrunk vocabulary
(`config_levels.at_level`): the answer tokens a classifier reads, the media
placeholder a model compares its input ids to.
"""

from __future__ import annotations

import contextlib
import re
from typing import Any

from benchmarks.sweeps.transformers.unset_fields import modeling_source

# A model's read of a token index with a fallback: ``getattr(config, "x_token_index", 3)``.
_TOKEN_FALLBACK = re.compile(r"""getattr\(config, ["'](\w+_token_index)["'], ([\d_]+)\)""")
# Words naming a media placeholder token.
_MEDIA = ("image", "video", "audio", "boi", "eoi", "boa", "eoa")
# Suffixes of a media placeholder token's index.
_MEDIA_TOKEN = ("_token_index", "_token_id")


def fit_answer_tokens(config: Any) -> None:
    """Token indices a classifier reads its answers' logits at (ShieldGemma 2's yes and
    no, which its model reads with a fallback where the config has none) within the
    shrunk vocabulary (`_vocabulary`), kept distinct (a media placeholder's index is the
    inputs' to agree with, and is kept)."""
    vocab = _vocabulary(config)
    source = modeling_source(type(config).__module__)
    fallbacks = {n: int(v) for n, v in _TOKEN_FALLBACK.findall(source)}
    names = [
        n
        for n, v in {**fallbacks, **vars(config)}.items()
        if n.endswith("_token_index")
        and not any(m in n for m in _MEDIA)
        and isinstance(v, int)
        and isinstance(vocab, int)
        and v >= vocab
    ]
    for offset, name in enumerate(names, start=1):
        with contextlib.suppress(Exception):
            setattr(config, name, vocab - offset)


def fit_media_tokens(config: Any) -> None:
    """A media placeholder token's index the config leaves None (BLIP-2's
    ``image_token_index``, which its model compares the input ids to) set to the last id
    of the vocabulary (`_vocabulary`) that no other special token holds: its checkpoints
    append the placeholder after the text's tokens."""
    text = getattr(config, "text_config", None)
    vocab = _vocabulary(config)
    if not isinstance(vocab, int):
        return
    fields = vars(config)
    names = [
        n
        for n, v in fields.items()
        if v is None and n.endswith(_MEDIA_TOKEN) and any(m in n for m in _MEDIA)
    ]
    taken = {
        v
        for n, v in {**vars(text or config), **fields}.items()
        if n.endswith("token_id") and isinstance(v, int)
    }
    free = (i for i in range(vocab - 1, -1, -1) if i not in taken)
    for name in names:
        with contextlib.suppress(Exception):
            setattr(config, name, next(free))


def _vocabulary(config: Any) -> Any:
    """The vocabulary size of ``config``, its own or its text config's."""
    own = getattr(config, "vocab_size", None)
    return own or getattr(getattr(config, "text_config", None), "vocab_size", None)
