"""Mark a model's computed tensors so that the marks survive `torch.export`.

`torch.nn.utils.parametrize` (weight_norm, spectral_norm, orthogonal, user
parametrizations) and the legacy hook-based `torch.nn.utils.weight_norm` / `spectral_norm`
compute a module's weight on every forward. After export nothing says which nodes did that.
`prepare_for_xnnpack` wraps each such computation in `torch.fx.traceback.annotate`, so every
node it produces carries ``node.meta["custom"]["xnnfold_site"] = "<module path>.<tensor>"``
through `torch.export.export` and the `to_edge` decompositions. The folding partitioner
uses the mark to name what it folds and why it declines.

The model is changed in place and only by giving a parametrization list or a legacy hook
the class of a marking subclass, whose call computes the tensor inside its mark (a
``with`` block: two threads exporting at once never see each other's marks): parameters,
buffers, `state_dict()` keys and outputs stay the same, and the marks cost nothing outside
export.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any, cast, Final

import torch
import torch.fx.traceback as fx_traceback
from torch import nn
from torch.nn.utils import parametrize
from torch.nn.utils.spectral_norm import SpectralNorm as _LegacySpectralNorm
from torch.nn.utils.weight_norm import WeightNorm as _LegacyWeightNorm

from xnnfold._meta import SITE_META_KEY
from xnnfold._upstream import forward_pre_hooks_of
from xnnfold._upstream import (
    OrthogonalParametrization as _Orthogonal,
)
from xnnfold._upstream import (
    SpectralNormParametrization as _SpectralNorm,
)
from xnnfold._upstream import (
    WeightNormParametrization as _WeightNorm,
)

__all__ = [
    "FoldSite",
    "find_sites",
    "is_prepared",
    "prepare_for_xnnpack",
    "unprepare_for_xnnpack",
]

# Attribute on a ParametrizationList or legacy hook object holding its site name.
_SITE_ATTR: Final = "_xnnfold_site"

WEIGHT_NORM: Final = "weight_norm"
SPECTRAL_NORM: Final = "spectral_norm"
ORTHOGONAL: Final = "orthogonal"
LEGACY_WEIGHT_NORM: Final = "legacy_weight_norm"
LEGACY_SPECTRAL_NORM: Final = "legacy_spectral_norm"


@dataclass(frozen=True)
class FoldSite:
    """A tensor a model computes from its parameters on every forward.

    Attributes:
        module: dotted path of the owning module (``""`` for the root).
        tensor: the computed attribute, usually ``"weight"``.
        kind: ``weight_norm``, ``spectral_norm``, ``orthogonal``, ``legacy_weight_norm``,
            ``legacy_spectral_norm``, or ``parametrization:<ClassName>`` for user ones.
    """

    module: str
    tensor: str
    kind: str

    @property
    def name(self) -> str:
        """``"<module>.<tensor>"``: the mark carried by the exported nodes."""
        return f"{self.module}.{self.tensor}" if self.module else self.tensor

    def __str__(self) -> str:
        return f"{self.name} ({self.kind})"


def _parametrization_kind(plist: nn.ModuleList) -> str:
    kinds = []
    for p in plist:
        if isinstance(p, _WeightNorm):
            kinds.append(WEIGHT_NORM)
        elif isinstance(p, _SpectralNorm):
            kinds.append(SPECTRAL_NORM)
        elif isinstance(p, _Orthogonal):
            kinds.append(ORTHOGONAL)
        else:
            kinds.append(f"parametrization:{type(p).__name__}")
    return "+".join(kinds)


def _legacy_hooks(module: nn.Module) -> list[Any]:
    return [
        hook
        for hook in forward_pre_hooks_of(module)
        if isinstance(hook, (_LegacyWeightNorm, _LegacySpectralNorm))
    ]


def find_sites(model: nn.Module) -> list[FoldSite]:
    """Every parametrized or legacy hook-computed tensor of ``model``, in module order."""
    sites = []
    for path, module in model.named_modules():
        if parametrize.is_parametrized(module):
            for tensor, plist in module.parametrizations.items():
                sites.append(FoldSite(path, tensor, _parametrization_kind(plist)))
        for hook in _legacy_hooks(module):
            kind = (
                LEGACY_WEIGHT_NORM if isinstance(hook, _LegacyWeightNorm) else LEGACY_SPECTRAL_NORM
            )
            sites.append(FoldSite(path, hook.name, kind))
    return sites


# ---------------------------------------------------------------------------------------
# Marking. The marking classes enter `annotate` only while exporting (or compiling), so
# eager forwards pay one flag check. `preserve_node_meta` is entered too: non-strict export
# only copies the annotation onto nodes while it is on.


def _tracing() -> bool:
    # Not under dynamo (strict export, a torch.cond branch, torch.compile): it traces the
    # marking classes as Python, and `annotate` is none it can trace. The nodes go unmarked
    # there, which only leaves their site unnamed: folding does not depend on the mark.
    if torch.compiler.is_dynamo_compiling():
        return False
    return torch.compiler.is_exporting() or torch.compiler.is_compiling()


def _enter_mark(site: str) -> contextlib.ExitStack:
    stack = contextlib.ExitStack()
    stack.enter_context(fx_traceback.preserve_node_meta())
    stack.enter_context(fx_traceback.annotate({SITE_META_KEY: site}))
    return stack


def _training_error(site: str) -> ValueError:
    return ValueError(
        f"xnnfold: '{site}' uses spectral_norm in training mode, whose power iteration "
        "writes its u/v buffers on every forward, so its weight is not a constant and "
        "export would record buffer updates. Call model.eval() before "
        "prepare_for_xnnpack and torch.export.export."
    )


def _updates_buffers(plist: nn.ModuleList) -> bool:
    return any(isinstance(p, _SpectralNorm) and p.training for p in plist)


class _MarkedParametrizationList(parametrize.ParametrizationList):
    """A parametrization list computing its tensor inside its site mark."""

    def forward(self) -> torch.Tensor:
        site = getattr(self, _SITE_ATTR)
        # Strict export too (dynamo, where nothing is marked): its power iteration's
        # buffer updates would otherwise be dropped from the exported program.
        if torch.compiler.is_exporting() and _updates_buffers(self):
            raise _training_error(site)
        if not _tracing():
            return super().forward()
        with _enter_mark(site):
            return super().forward()


class _MarkedLegacyWeightNorm(_LegacyWeightNorm):
    """The legacy weight_norm hook, computing its weight inside a site mark."""

    def __call__(self, module: nn.Module, inputs: Any) -> None:
        if not _tracing():
            return super().__call__(module, inputs)
        with _enter_mark(getattr(self, _SITE_ATTR)):
            return super().__call__(module, inputs)


class _MarkedLegacySpectralNorm(_LegacySpectralNorm):
    """The legacy spectral_norm hook, computing its weight inside a site mark."""

    def __call__(self, module: nn.Module, inputs: Any) -> None:
        site = getattr(self, _SITE_ATTR)
        if torch.compiler.is_exporting() and module.training:
            raise _training_error(site)
        if not _tracing():
            return super().__call__(module, inputs)
        with _enter_mark(site):
            return super().__call__(module, inputs)


_MARKED_LEGACY: Final = {
    _LegacyWeightNorm: _MarkedLegacyWeightNorm,
    _LegacySpectralNorm: _MarkedLegacySpectralNorm,
}
_UNMARKED_LEGACY: Final = {v: k for k, v in _MARKED_LEGACY.items()}


def _mark_parametrization(plist: nn.Module, site: str) -> None:
    if type(plist) is parametrize.ParametrizationList:
        # A subclass, as for the legacy hooks: `parametrize` finds its lists with
        # isinstance, and remove_parametrizations must keep working. (A list of another
        # class, which `register_parametrization` never builds, stays unmarked: only its
        # site goes unnamed.)
        plist.__class__ = _MarkedParametrizationList
    setattr(plist, _SITE_ATTR, site)  # refreshed on every prepare: paths may change


def _mark_legacy(hook: Any, site: str) -> None:
    marked = _MARKED_LEGACY.get(type(hook))
    if marked is not None:
        # A subclass, not a wrapper: remove_weight_norm / remove_spectral_norm find their
        # hook with isinstance and must keep working.
        hook.__class__ = marked
    setattr(hook, _SITE_ATTR, site)


def prepare_for_xnnpack(model: nn.Module) -> nn.Module:
    """Mark every computed weight of ``model`` so that export records where it comes from.

    Idempotent and in place; outputs, parameters and ``state_dict()`` keys are unchanged.
    Use `find_sites` to list what was found.

    Args:
        model: the model to export, in eval mode when it uses spectral_norm.

    Returns:
        ``model`` itself.

    Raises:
        TypeError: ``model`` is not an ``nn.Module``.
        ValueError: a spectral_norm module is in training mode (its power iteration would
            update buffers during export); call ``model.eval()`` first.

    Example::

        model = prepare_for_xnnpack(model.eval())
        for site in find_sites(model):
            print(site)  # conv.weight (weight_norm)
        ep = torch.export.export(model, example_inputs)
    """
    if not isinstance(model, nn.Module):
        raise TypeError(
            f"prepare_for_xnnpack expects a torch.nn.Module, got {type(model).__name__}"
        )
    for site in find_sites(model):
        module = model.get_submodule(site.module)
        if site.kind.startswith("legacy_"):
            hook = next(h for h in _legacy_hooks(module) if h.name == site.tensor)
            if isinstance(hook, _LegacySpectralNorm) and module.training:
                raise _training_error(site.name)
            _mark_legacy(hook, site.name)
        else:
            parametrizations = cast(nn.ModuleDict, module.parametrizations)
            plist = cast(nn.ModuleList, parametrizations[site.tensor])
            if _updates_buffers(plist):
                raise _training_error(site.name)
            _mark_parametrization(plist, site.name)
    return model


def is_prepared(model: nn.Module) -> bool:
    """True when `prepare_for_xnnpack` has marked some computed tensor of ``model``."""
    for module in model.modules():
        if parametrize.is_parametrized(module) and any(
            type(plist) is _MarkedParametrizationList
            for plist in cast(nn.ModuleDict, module.parametrizations).values()
        ):
            return True
        if any(type(hook) in _UNMARKED_LEGACY for hook in _legacy_hooks(module)):
            return True
    return False


def unprepare_for_xnnpack(model: nn.Module) -> nn.Module:
    """Undo `prepare_for_xnnpack`: give back the classes it changed, remove its marks. In
    place; idempotent."""
    for _, module in model.named_modules():
        if type(module) is _MarkedParametrizationList:
            cast(Any, module).__class__ = parametrize.ParametrizationList
        if hasattr(module, _SITE_ATTR) and isinstance(module, nn.ModuleList):
            object.__delattr__(module, _SITE_ATTR)
        for hook in _legacy_hooks(module):
            original = _UNMARKED_LEGACY.get(type(hook))
            if original is not None:
                hook.__class__ = original
            if _SITE_ATTR in vars(hook):
                delattr(hook, _SITE_ATTR)
    return model
