"""How the unit tier exports tiny programs and asks one rule about one GEMM in them.

Each `Probe` is a tiny module and the one GEMM in it that is judged. All
the probes a kind of judge reads are exported together, as the submodules of one bundle,
and lowered to the edge dialect once: `to_edge` costs most of a second per call, while
the rules cost milliseconds, and the probes cannot see one another (no GEMM, source or
intermediate is shared between two submodules). The bundle keeps the ops the stock
XNNPACK partitioner keeps from decomposition (``linear`` ...), so the GEMMs are the edge
ops the folding configs judge inside ``to_edge_transform_and_lower``.

The calls into xnnfold are the functions below, one per unit that gives codes:
`run_predicate` (`find_weight_computation`, as the configs and the ATen plan call it),
`written_elsewhere`, the folding configs' ``check_constraints`` (the argument rules), and
the partitioner's ``partition`` (the stock reason). A change of signature is one edit here.

Not in conftest.py, like tests/_lowering.py: pytest imports a conftest.py once under its
own module name, and the test module imports these names.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Callable, Optional, Protocol, Union

import torch
from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
from executorch.exir import EdgeCompileConfig, to_edge
from executorch.exir.backend.canonical_partitioners.config_partitioner import (
    format_target_name,
)
from torch import nn
from torch.export import ExportedProgram
from torch.fx import Node

from xnnfold._meta import DELEGATION_TAG_META_KEY
from xnnfold.passes import XnnpackFoldingPartitioner
from xnnfold.passes._marks import reason_of
from xnnfold.passes._options import FoldOptions
from xnnfold.passes.analysis import (
    AnalysisCache,
    find_weight_computation,
    gemm_positions,
    new_analysis_cache,
    Rejection,
    WeightComputation,
    written_elsewhere,
)
from xnnfold.passes.partition._folding_config import FoldingGEMMMixin

__all__ = [
    "ACCEPTED",
    "ARGUMENT_RULES",
    "Judge",
    "Judged",
    "NOTHING_TO_FOLD",
    "PARTITIONER",
    "PREDICATE",
    "Probe",
    "Programs",
    "WRITTEN_ELSEWHERE",
    "run_predicate",
]

# Verdicts besides a code: every rule the judge applies let the GEMM through, or the
# predicate found no computation (the argument is a plain parameter or absent).
ACCEPTED = "accepted"
NOTHING_TO_FOLD = "nothing to fold"

# The submodule that holds the bundle's probes, by name.
_CASES = "cases"


@dataclass(frozen=True)
class Probe:
    """A tiny module and what one of its GEMMs is asked with.

    Attributes:
        model: builds the module; its ``forward`` takes ``inputs`` and returns a tensor.
        inputs: the shapes of its inputs (random values of ``dtype``).
        dtype: the inputs' dtype.
        gemm: which of the module's GEMMs is judged, in program order (-1: the last).
        role: the GEMM argument judged, ``"weight"`` or ``"bias"``.
        options: the `FoldOptions` the predicate applies.
        written_buffers: buffers (FQNs within ``model``) another method of the program
            writes, for `written_elsewhere`.
        edit: applied to the judged GEMM after export, before any judge reads it, for
            what no module can express (a tag, a value a pass forgot to record).
    """

    model: Callable[[], nn.Module]
    inputs: tuple[tuple[int, ...], ...] = ((2, 4),)
    dtype: torch.dtype = torch.float32
    gemm: int = 0
    role: str = "weight"
    options: FoldOptions = field(default_factory=FoldOptions)
    written_buffers: frozenset[str] = frozenset()
    edit: Optional[Callable[[Node], None]] = None


@dataclass(frozen=True)
class Judged:
    """A probe's GEMM in the exported bundle."""

    ep: ExportedProgram
    gemm: Node
    probe: Probe
    # The probe module's FQN in the bundle.
    path: str

    @property
    def arg_index(self) -> int:
        positions = gemm_positions(self.gemm) or ()
        return positions[0 if self.probe.role == "weight" else 1]


class Judge(Protocol):
    """One unit that gives codes: its verdict on a probe is a code or `ACCEPTED`."""

    # Probes of judges with the same bundle name are exported together.
    bundle: str

    def prepare(self, ep: ExportedProgram) -> None:
        """Run once on the bundle before any verdict (e.g. partition it)."""

    def __call__(self, judged: Judged) -> str: ...


def run_predicate(
    ep: ExportedProgram,
    gemm: Node,
    arg_index: int,
    *,
    options: FoldOptions,
    cache: Optional[AnalysisCache] = None,
) -> Union[WeightComputation, Rejection, None]:
    """`find_weight_computation` on one argument, the way the folding configs call it
    (their GEMM layout, the partitioner's options), keeping its sweeps in ``cache`` (a
    fresh one by default)."""
    positions = gemm_positions(gemm)
    assert positions, f"'{gemm.name}' ({gemm.target}) is not a GEMM with a weight"
    return find_weight_computation(
        gemm,
        arg_index,
        ep,
        arg_positions=positions,
        options=options,
        cache=new_analysis_cache() if cache is None else cache,
    )


def _verdict(result: Union[WeightComputation, Rejection, None]) -> str:
    if result is None:
        return NOTHING_TO_FOLD
    return result.code.code if isinstance(result, Rejection) else ACCEPTED


class _Predicate:
    """XNF501-XNF508 and XNF516: `find_weight_computation`."""

    bundle = "rules"

    def prepare(self, ep: ExportedProgram) -> None:
        pass

    def __call__(self, judged: Judged) -> str:
        return _verdict(
            run_predicate(judged.ep, judged.gemm, judged.arg_index, options=judged.probe.options)
        )


class _WrittenElsewhere(_Predicate):
    """XNF509: `written_elsewhere` on what the predicate accepted (it reads a buffer
    another method writes: only the partitioner, seeing every method, knows)."""

    def __call__(self, judged: Judged) -> str:
        result = run_predicate(
            judged.ep, judged.gemm, judged.arg_index, options=judged.probe.options
        )
        written = {f"{judged.path}.{fqn}" for fqn in judged.probe.written_buffers}
        return _verdict(written_elsewhere(result, judged.ep, written) or result)


class _ArgumentRules(_Predicate):
    """XNF510-XNF515: the folding config's ``check_constraints``, as built by the
    partitioner (the argument problems its `match` returns)."""

    def __call__(self, judged: Judged) -> str:
        partitioner = XnnpackFoldingPartitioner(max_fold_nodes=judged.probe.options.max_fold_nodes)
        config = partitioner.target_partitioner_configs[
            format_target_name(judged.gemm.target.__name__)  # type: ignore[union-attr]
        ]
        assert isinstance(config, FoldingGEMMMixin), config
        match = config.match(judged.gemm, judged.ep)
        problem = match.findings.argument_problems.get(judged.gemm.name)
        return ACCEPTED if problem is None else problem.code.code


class _Partitioner:
    """XNF590 and XNF517: the code `XnnpackFoldingPartitioner.partition` records on a GEMM
    (with ``tie_tables=True``, the option XNF517 belongs to); `ACCEPTED` when it
    delegated the GEMM without a reason."""

    bundle = "partitioned"

    def prepare(self, ep: ExportedProgram) -> None:
        XnnpackFoldingPartitioner(tie_tables=True).partition(ep)

    def __call__(self, judged: Judged) -> str:
        reason = reason_of(judged.gemm)
        if reason is not None:
            return reason.code
        return ACCEPTED if DELEGATION_TAG_META_KEY in judged.gemm.meta else "not delegated"


PREDICATE: Judge = _Predicate()
WRITTEN_ELSEWHERE: Judge = _WrittenElsewhere()
ARGUMENT_RULES: Judge = _ArgumentRules()
PARTITIONER: Judge = _Partitioner()


class _Bundle(nn.Module):
    def __init__(self, probes: Mapping[str, Probe]) -> None:
        super().__init__()
        setattr(self, _CASES, nn.ModuleDict({name: p.model() for name, p in probes.items()}))

    def forward(self, inputs: dict[str, tuple[torch.Tensor, ...]]) -> tuple[torch.Tensor, ...]:
        cases = getattr(self, _CASES)
        return tuple(cases[name](*args) for name, args in inputs.items())


def _probe_gemm(ep: ExportedProgram, path: str, probe: Probe) -> Node:
    """The probe's judged GEMM: its ``probe.gemm``-th GEMM with a weight, found by the
    module path torch.export records on every node it traces."""
    gemms = [
        node
        for node in ep.graph.nodes
        if gemm_positions(node)
        and any(p == path for p, _ in (node.meta.get("nn_module_stack") or {}).values())
    ]
    assert gemms, f"no GEMM with a weight in '{path}' of the exported bundle"
    return gemms[probe.gemm]


def _program_key(probe: Probe) -> tuple[object, ...]:
    """Probes with equal keys are the same module in the program (the judge's settings
    may differ): each is exported once."""
    return (probe.model, probe.inputs, probe.dtype, probe.gemm, probe.edit)


class Programs:
    """The bundles of a set of probes, each exported and lowered to edge on first use."""

    def __init__(self, probes: Mapping[str, tuple[Probe, Judge]]) -> None:
        self._probes = dict(probes)
        # Probe name -> FQN of its module in its bundle (the first probe of its key).
        first: dict[tuple[object, ...], str] = {}
        self._paths = {
            name: f"{_CASES}.{first.setdefault((judge.bundle, *_program_key(probe)), name)}"
            for name, (probe, judge) in self._probes.items()
        }

    def judge(self, name: str) -> str:
        """The verdict of ``name``'s judge on ``name``'s probe."""
        probe, judge = self._probes[name]
        ep, gemm = self.gemm(name)
        return judge(Judged(ep, gemm, probe, self._paths[name]))

    def gemm(self, name: str) -> tuple[ExportedProgram, Node]:
        """The bundle holding ``name``'s probe, and the probe's judged GEMM."""
        probe, judge = self._probes[name]
        ep = self._bundle(judge.bundle)
        return ep, _probe_gemm(ep, self._paths[name], probe)

    @functools.cache  # noqa: B019 - one Programs per session; it holds its bundles anyway
    def _bundle(self, bundle: str) -> ExportedProgram:
        members = {
            self._paths[name].split(".", 1)[1]: (probe, judge)
            for name, (probe, judge) in self._probes.items()
            if judge.bundle == bundle
        }
        torch.manual_seed(0)
        model = _Bundle({name: probe for name, (probe, _) in members.items()}).eval()
        inputs = {
            name: tuple(torch.randn(shape, dtype=probe.dtype) for shape in probe.inputs)
            for name, (probe, _) in members.items()
        }
        aten = torch.export.export(model, (inputs,))
        kept, _ = XnnpackPartitioner().ops_to_not_decompose(aten)
        ep = to_edge(aten, compile_config=EdgeCompileConfig(preserve_ops=kept)).exported_program()
        for name, (probe, _) in members.items():
            if probe.edit is not None:
                probe.edit(_probe_gemm(ep, f"{_CASES}.{name}", probe))
        judges = {id(j): j for _, j in self._probes.values() if j.bundle == bundle}
        for judge in judges.values():
            judge.prepare(ep)
        return ep
