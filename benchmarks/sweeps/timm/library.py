"""Every architecture of the installed timm, swept for GEMMs with a computed weight.

Each name of ``timm.list_models()`` is built with random weights (``pretrained=False``)
and fed one image: the smallest square of `SIDES` below its pretrained config's
``input_size`` that runs eagerly, else that size (the only one where the config says
``fixed_input_size``). An architecture over `MAX_PARAMETERS` parameters is built with
``depth=2`` where its constructor takes one (the giant ViTs), as the worker's memory cap
allows no more; one whose constructor does not is built whole. The rest is the shared
engine (benchmarks/sweeps/engine): export, screen, lower the candidates with the stock and the
folding partitioner, run against eager, time interleaved. timm's weight-standardized
convolutions (``StdConv2d``, ``ScaledStdConv2d``: BiT/ResNetV2, NFNet, NF-ResNet/RegNet,
the hybrid ViTs' stems) compute their weight in ``forward``.

    nice -n 10 python -m benchmarks.sweeps.timm --jobs 2 --screen-only
    nice -n 10 python -m benchmarks.sweeps.timm --jobs 2   # lower the candidates
    nice -n 10 python -m benchmarks.sweeps.timm --only nfnet_l0 --fresh
    python -m benchmarks.sweeps.timm --report   # the markdown, from the JSONL

timm imports torchvision: run it where torch and torchvision are a matching pair (the
results were made with torch 2.14.1 and torchvision 0.29.1, benchmarks/README.md).
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any, Optional

from benchmarks.sweeps.engine import Built, Library, OutOfReach
from benchmarks.sweeps.engine.screen import leaves

HERE = Path(__file__).resolve().parent
# Square sides tried before the pretrained config's own size, smallest first: 64 keeps a
# 2x2 map after timm's usual stride of 32.
SIDES = (64, 96, 128, 160, 192)
# Over this many parameters, the architecture is built with ``depth=2`` where it can be.
MAX_PARAMETERS = 300_000_000
# Over this many, an architecture that cannot be built shallower is not built at all: its
# weights alone would fill a worker's address space (`engine.worker.WORKER_MEMORY`).
MAX_WHOLE_PARAMETERS = 1_000_000_000


class Timm(Library):
    """timm's registered architectures; the group of each is its model module."""

    title = "timm's architectures"
    noun, nouns = "architecture", "architectures"
    results = HERE / "results.jsonl"
    table = HERE / "results.md"
    command = "benchmarks.sweeps.timm"
    stock_for_every_class = True
    group_heads_first = False

    def discover(self) -> list[tuple[str, str]]:
        import timm
        from timm.models._registry import _model_to_module

        return [(f"timm.models.{_model_to_module[name]}", name) for name in timm.list_models()]

    def build(self, group: str, name: str, *, facts: Optional[dict[str, Any]] = None) -> Built:
        import timm
        import torch

        facts: dict[str, Any] = {}
        try:
            with torch.device("meta"):
                size = sum(p.numel() for p in timm.create_model(name).parameters())
            torch.manual_seed(0)
            model = None
            if size > MAX_PARAMETERS:
                # A constructor that takes no ``depth=2`` (or whose other per-block
                # arguments then disagree) is built whole, if the memory cap allows.
                with contextlib.suppress(Exception):
                    model = timm.create_model(name, pretrained=False, depth=2)
                    facts.update(depth=2, parameters_at_full_depth=size)
            if model is None and size > MAX_WHOLE_PARAMETERS:
                raise OutOfReach(
                    "build",
                    f"{size:,} parameters, more than a worker's memory holds, and its "
                    "constructor builds no shallower copy with depth=2",
                )
            if model is None:
                model = timm.create_model(name, pretrained=False)
            model.eval()
        except OutOfReach:
            raise
        except Exception as error:
            raise OutOfReach("build", f"{type(error).__name__}: {error}") from error
        config = model.pretrained_cfg
        channels, height, width = config.get("input_size", (3, 224, 224))
        sides = (
            [] if config.get("fixed_input_size") else [s for s in SIDES if s < min(height, width)]
        )
        shapes = [(channels, s, s) for s in sides] + [(channels, height, width)]
        generator = torch.Generator().manual_seed(1)
        if len(shapes) == 1:
            # The only size: export alone tells whether the model runs on it.
            return Built(model, {"x": torch.randn(1, *shapes[0], generator=generator)}, None, facts)
        first = ""
        for shape in shapes:
            image = torch.randn(1, *shape, generator=generator)
            try:
                with torch.no_grad():
                    output = model(image)
            except Exception as error:
                first = first or f"{type(error).__name__}: {error}"
                continue
            return Built(model, {"x": image}, leaves(output), facts)
        raise OutOfReach("inputs", first)

    def versions(self) -> str:
        import timm
        import torch
        import torchvision

        return (
            f"timm {timm.__version__}, torch {torch.__version__.split('+')[0]}, torchvision "
            f"{torchvision.__version__.split('+')[0]}, executorch "
            f"{_installed_version('executorch')}"
        )

    def method(self) -> str:
        return (
            "Random weights (`pretrained=False`); one image, the smallest square of "
            f"{', '.join(map(str, SIDES))} pixels below the pretrained config's `input_size` "
            "that runs eagerly, else that size; `depth=2` for an architecture over "
            f"{MAX_PARAMETERS:,} parameters."
        )


def _installed_version(package: str) -> str | None:
    """``package``'s installed version, or None where it is not installed."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(package)
    except PackageNotFoundError:
        return None
