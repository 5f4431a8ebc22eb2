"""Differential test: generated programs, xnnfold against eager and the stock partitioner.

The problem: the hand-written cases and ``test_generated_models.py`` vary one thing at a
time, on default GEMM arguments; what they never draw (an ``addmm`` with ``beta != 1``, a
bias of shape ``(M, 1)``, a 700-node weight chain, ``.item()`` of a 0-d parameter, a table
one method gathers from and another multiplies by) is where the bugs are.

The approach: `tests.support.grammar` draws seeded program descriptions; each is
built, lowered with the stock ``XnnpackPartitioner`` and with
``XnnpackFoldingPartitioner``, and checked by the four oracles of
`tests.support.differential` (what each checks is in its docstring).

A failure message carries a pasteable reproducer: the description (``repr``), the
builder call and the check, after a small deterministic greedy shrink.
`benchmarks/correctness/differential_campaign.py` runs the same generator and oracles at scale.
"""

from __future__ import annotations

import functools
import logging
import warnings
from dataclasses import replace
from typing import Final, Iterator

import pytest

from tests._tiers import campaign_unless
from tests.support import reproducers
from tests.support.differential import check_program
from tests.support.grammar import (
    expected_gemms,
    generate_program,
    GenOptions,
    Program,
)
from tests.support.quantized_differential import check_quantized
from tests.support.shrinking import failure_report, reproducer

pytestmark = [pytest.mark.runtime, pytest.mark.slow]

SEED: Final = 20261201
# About 7 s per generated program on a quiet 2-core machine (stock and xnnfold lowering,
# every .pte run; 2-20 s); a long chain takes minutes (stock lowers a 700-node chain
# slowly). The full tier runs the first N_MODELS_FULL seeds but those drawing a long chain
# (tests/passes/partition/test_long_computations.py covers deep chains there); the campaign
# tier runs all N_MODELS, and benchmarks/correctness/differential_campaign.py thousands. Shrinking a
# failure re-checks it TEST_SHRINK_ATTEMPTS times more, so a failing run takes longer.
N_MODELS: Final = 32
N_MODELS_FULL: Final = 10
# Scenarios whose seeds run in the campaign tier only.
CAMPAIGN_SCENARIOS: Final = frozenset({"long_chain"})
# The pytest run keeps chains short enough to lower in seconds but past the ~600-node
# depth where recursive graph walks used to fail; the campaign goes to 1500 steps.
TEST_OPTIONS: Final = GenOptions(max_chain_steps=400, min_long_chain_steps=320)
# Greedy shrink attempts for a failing program (each attempt re-lowers it).
TEST_SHRINK_ATTEMPTS: Final = 4


@pytest.fixture(autouse=True)
def _quiet_xnnfold_warnings() -> Iterator[None]:
    """Generated programs decline GEMMs on purpose; their WARNINGs are not findings.
    Restored after each test, so other modules' log assertions still see them."""
    xnnfold_logger = logging.getLogger("xnnfold")
    level = xnnfold_logger.level
    xnnfold_logger.setLevel(logging.ERROR)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield
    xnnfold_logger.setLevel(level)


# --------------------------------------------------------------------------------------
# The test.


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """The seeded indexes of the two generated-program tests, those past the full tier's
    slice marked ``campaign``. The fast tier deselects this whole module, so it draws
    nothing at collection."""
    drawing = metafunc.config.getoption("--tier") != "fast"
    if metafunc.function is test_generated_program_passes_the_oracles:
        kept = [
            i < N_MODELS_FULL and not (drawing and _generated(i).scenario in CAMPAIGN_SCENARIOS)
            for i in range(N_MODELS)
        ]
    elif metafunc.function is test_quantized_generated_program_passes_the_oracles:
        kept = [i < N_QUANTIZED_FULL for i in range(N_QUANTIZED)]
    else:
        return
    metafunc.parametrize(
        "index", [pytest.param(i, marks=campaign_unless(k)) for i, k in enumerate(kept)]
    )


@functools.cache
def _generated(index: int) -> Program:
    """The program of seed ``index``, drawn once per process: collection reads its
    scenario, the test checks it."""
    return generate_program(SEED + index, TEST_OPTIONS)


def test_generated_program_passes_the_oracles(index: int) -> None:
    program = _generated(index)
    outcome = check_program(program)
    if outcome.failures:
        pytest.fail(
            f"{len(outcome.failures)} oracle failure(s) on a generated program "
            f"(notes: {outcome.notes}):\n\n"
            + failure_report(outcome, attempts=TEST_SHRINK_ATTEMPTS),
            pytrace=False,
        )


# --------------------------------------------------------------------------------------
# PT2E-quantized variants.

# Quantized programs: a subset of the seeds, one method each, no dynamic shapes; the
# full tier runs the first N_QUANTIZED_FULL (10-35 s each), the campaign tier all.
N_QUANTIZED: Final = 10
N_QUANTIZED_FULL: Final = 2
QUANTIZED_SEED: Final = SEED + 500_000
# Single-method scenarios (long chains are left to the fp32 tier: calibrating them adds
# minutes and nothing quantization-specific).
QUANTIZED_SCENARIOS: Final = (("chain", 0.7), ("addmm", 0.15), ("item", 0.15))


def quantizable_program(index: int) -> Program:
    options = replace(TEST_OPTIONS, scenarios=QUANTIZED_SCENARIOS)
    k = 0
    while True:
        program = generate_program(QUANTIZED_SEED + 1000 * index + k, options)
        methods_static = all(not m.dynamic for m in program.methods)
        if len(program.methods) == 1 and methods_static and program.methods[0].table is None:
            return program
        k += 1


def test_quantized_generated_program_passes_the_oracles(index: int) -> None:
    program = quantizable_program(index)
    outcome = check_quantized(program)
    if outcome.failures:
        pytest.fail(
            "\n\n".join(
                f"{f.oracle}: {f.message}\n"
                + reproducer(program, f).replace(
                    "outcome = check_program(program)", "outcome = check_quantized(program)"
                )
                for f in outcome.failures
            ),
            pytrace=False,
        )


# A campaign reproducer (seed 1, program 170): in `forward`, the addmm's bias computation
# keeps `stack` undecomposed (decided before `other` showed that it stores the packed
# source); the packed source then kept every GEMM on it from folding, so the scaled addmm
# was declined and the kept `stack` had no kernel. A GEMM with kept ops now folds even
# when sources are kept for other readers (correct, stored twice, with a WARNING).
def test_a_gemm_with_kept_ops_folds_when_another_method_stores_its_source() -> None:
    program = reproducers.kept_ops_beside_a_source_another_method_stores()
    outcome = check_program(program, ("b",))
    assert not outcome.failures, outcome.failures


# A campaign reproducer (seed 2, program 210): the addmm's bias is `mm(a, 3 - p)`, a GEMM
# whose own weight is marked too; folding the inner weight first erased nodes the bias
# computation still listed ("Expected a proper Tensor but got None"). Computations are
# now folded outermost first (tests/passes/partition/test_nested_gemms.py).
def test_a_gemm_inside_a_bias_computation_folds_outermost_first() -> None:
    program = reproducers.gemm_inside_a_bias_computation()
    outcome = check_program(program, ("b",))
    assert not outcome.failures, outcome.failures


# A campaign reproducer (seed 3, program 115): `forward`'s addmm has a bias per row, so
# it stays on portable with its computed weight and the packed source `s0` is stored;
# the cross-method record of stored constants did not count that declined GEMM as a
# reader, so `other` folded its slice of `s0` and the program stored both: 1,760 bytes
# over stock (oracle c). GEMMs that will not fold now count as readers that keep their
# sources (`stored_constants(ep, non_folding)`).
def test_a_declined_gemm_keeps_the_source_another_method_would_fold() -> None:
    program = reproducers.declined_gemm_shares_a_packed_source()
    outcome = check_program(program, ("a", "b", "c"))
    assert not outcome.failures, outcome.failures


# A campaign reproducer (seed 3, program 236): a conv_transpose2d whose stored kernel is
# also read by an elementwise op (`abs`) was delegated, and XNNPACK computed it wrongly
# (off by 5.3; the stock partitioner is wrong too, and here failed to run). A 2D kernel
# a non-convolution shares now stays on portable (tests/passes/partition/test_convolution_arguments.py).
def test_a_2d_kernel_a_non_convolution_shares_stays_on_portable() -> None:
    program = reproducers.shared_2d_kernel()
    outcome = check_program(program, ("a", "b", "d"))
    assert not outcome.failures, outcome.failures


# A campaign reproducer (seed 5, program 151): layers.1's weight is a low-rank product
# behind an identity permute (`.permute(0, 1)`); folding it would grow the program, so it
# was delegated with the weight computed at run time, and XNNPACK's ConvertToLinearPass
# read the permute as a transpose: a lowering error here, a silently wrong result for a
# square weight (tests/passes/partition/test_run_time_weights.py). Such a GEMM now stays on portable.
def test_a_run_time_weight_behind_an_identity_permute_stays_on_portable() -> None:
    program = reproducers.run_time_weight_behind_an_identity_permute()
    outcome = check_program(program)
    assert not outcome.failures, outcome.failures


# A campaign reproducer (seed 7, program 143): `other` keeps the packed source `s0` on
# portable (an addmm with a scalar bias reads a slice of it), so `forward`'s mm declined to
# fold its slice and took the weight at run time; but `forward`'s addmm must fold its own
# slice of `s0`, so its partition holds `s0`, and executorch gave the mm's delegate (where
# the stock configs had pulled the slice_copy) a copy of the whole source: +3,044 bytes
# over stock (oracle c). Such a GEMM folds: 29,972 bytes, stock 32,560.
def test_a_gemm_whose_source_another_partition_holds_folds_instead_of_a_copy() -> None:
    program = reproducers.source_another_partition_holds()
    outcome = check_program(program, ("a", "b", "c"))
    assert not outcome.failures, outcome.failures


# A campaign reproducer (seed 11, program 117), in the oracle: layers.0's low-rank weight
# grows when folded, so that convolution stays on portable and reads its bf16 bias `s2`
# there; layers.1's bias reads `s2` too, so it is declined, and layers.1 with it. The
# fold rule (`expected_gemms`) counted a portable GEMM's other arguments as folding.
def test_the_fold_rule_counts_what_a_portable_gemm_reads_as_kept() -> None:
    program = reproducers.portable_gemm_keeps_its_bias()
    assert [e.foldable for e in expected_gemms(program)] == [False, False]
    outcome = check_program(program)
    assert not outcome.failures, outcome.failures
