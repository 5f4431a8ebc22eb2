"""Run executorch's own XNNPACK tests with the stock partitioner and with xnnfold's.

executorch ships its XNNPACK tests in the wheel (executorch/backends/xnnpack/test). This
script runs a selection of them twice, once as shipped and once with
`XnnpackFoldingPartitioner` in place of `XnnpackPartitioner` everywhere the tests and
their tester reach it, and lists the tests whose outcome differs.

The swap is this file loaded as a pytest plugin (``-p upstream_suite``): before any test
module is imported it binds `XnnpackFoldingPartitioner` to the name `XnnpackPartitioner`
in executorch's partitioner module and in every executorch module already holding the
stock class, so ``from ...xnnpack_partitioner import XnnpackPartitioner`` in a test, the
tester's default partitioner and the XNNPACK recipes all build the folding one.

Usage (from the repository root; each run takes minutes, the default selection about 336
tests)::

    PYTHONPATH=$PWD python benchmarks/correctness/upstream_suite.py
    PYTHONPATH=$PWD python benchmarks/correctness/upstream_suite.py --paths ops/test_linear.py passes
    PYTHONPATH=$PWD python benchmarks/correctness/upstream_suite.py --only folding -k linear
    PYTHONPATH=$PWD python benchmarks/correctness/upstream_suite.py --keep /tmp/suite  # reports kept
    PYTHONPATH=$PWD python benchmarks/correctness/upstream_suite.py --compare /tmp/suite

Paths are relative to executorch's XNNPACK test directory. Arguments after ``--`` go to
pytest unchanged. Exit code 0 when both runs have the same outcome for every test, 1
otherwise.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ElementTree
from pathlib import Path
from typing import Optional

# The environment variable that turns the swap on when this file is loaded as a plugin.
SWAP_ENV = "XNNFOLD_UPSTREAM_SWAP"
DEFAULT_PATHS = ("test_xnnpack_partitioner.py", "ops", "passes")
MODES = ("stock", "folding")


def _swap() -> None:
    """Bind `XnnpackFoldingPartitioner` wherever executorch holds the stock class."""
    from executorch.backends.xnnpack.partition import xnnpack_partitioner

    from xnnfold import XnnpackFoldingPartitioner

    stock = xnnpack_partitioner.XnnpackPartitioner
    if stock is XnnpackFoldingPartitioner:
        return
    swapped = []
    for name, module in list(sys.modules.items()):
        if (
            name.startswith("executorch")
            and module is not None
            and getattr(module, "XnnpackPartitioner", None) is stock
        ):
            module.XnnpackPartitioner = XnnpackFoldingPartitioner  # type: ignore[attr-defined]
            swapped.append(name)
    print(f"upstream_suite: XnnpackFoldingPartitioner in {', '.join(swapped)}", file=sys.stderr)


def pytest_configure(config: object) -> None:
    """pytest hook: swap before collection imports the test modules."""
    if os.environ.get(SWAP_ENV) == "1":
        _swap()


def test_directory() -> Path:
    import executorch.backends.xnnpack as xnnpack

    return Path(xnnpack.__file__).parent / "test"


def run(mode: str, paths: list[Path], extra: list[str], report: Path) -> float:
    """Run pytest once in ``mode``; the outcomes go to the JUnit file ``report``."""
    env = dict(os.environ)
    here = str(Path(__file__).resolve().parent)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (here, env.get("PYTHONPATH")) if p)
    env[SWAP_ENV] = "1" if mode == "folding" else "0"
    command = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "-p",
        "upstream_suite",
        f"--junitxml={report}",
        *[str(p) for p in paths],
        *extra,
    ]
    start = time.perf_counter()
    # The working directory keeps pytest from reading this repository's configuration.
    subprocess.run(command, env=env, cwd=report.parent, check=False)
    return time.perf_counter() - start


def outcomes(report: Path) -> dict[str, tuple[str, str]]:
    """{test id: (outcome, first line of the message)} from a JUnit report."""
    found: dict[str, tuple[str, str]] = {}
    for case in ElementTree.parse(report).getroot().iter("testcase"):
        test_id = f"{case.get('classname')}::{case.get('name')}"
        outcome, message = "passed", ""
        for tag in ("failure", "error", "skipped"):
            element = case.find(tag)
            if element is not None:
                outcome = {"failure": "failed", "error": "error", "skipped": "skipped"}[tag]
                message = (element.get("message") or "").splitlines()[0:1]
                message = message[0][:200] if message else ""
                break
        found[test_id] = (outcome, message)
    return found


def summarize(results: dict[str, dict[str, tuple[str, str]]]) -> int:
    for mode, cases in results.items():
        counts: dict[str, int] = {}
        for outcome, _ in cases.values():
            counts[outcome] = counts.get(outcome, 0) + 1
        print(
            f"{mode}: {len(cases)} tests, "
            + ", ".join(f"{v} {k}" for k, v in sorted(counts.items()))
        )
    if len(results) < 2:
        return 0
    stock, folding = results["stock"], results["folding"]
    differ = sorted(
        test
        for test in stock.keys() | folding.keys()
        if stock.get(test, ("absent", ""))[0] != folding.get(test, ("absent", ""))[0]
    )
    print(f"{len(differ)} tests differ")
    for test in differ:
        before = stock.get(test, ("absent", ""))
        after = folding.get(test, ("absent", ""))
        print(f"  {test}: stock {before[0]}, folding {after[0]}: {after[1] or before[1]}")
    return 1 if differ else 0


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--paths",
        nargs="+",
        default=list(DEFAULT_PATHS),
        help="test files or directories, relative to executorch's XNNPACK test directory; "
        "each is one pytest run per mode (join several with commas for one run)",
    )
    parser.add_argument("--only", choices=MODES, help="run one mode only")
    parser.add_argument("--keep", type=Path, help="directory to keep the JUnit reports in")
    parser.add_argument("-k", dest="keyword", help="pytest -k expression")
    parser.add_argument(
        "--compare",
        type=Path,
        help="run nothing: compare the reports kept earlier in this directory (--keep)",
    )
    args, extra = parser.parse_known_args(argv)
    if args.compare is not None:
        kept: dict[str, dict[str, tuple[str, str]]] = {}
        for mode in MODES:
            for report in sorted(args.compare.glob(f"{mode}-*.xml")):
                kept.setdefault(mode, {}).update(outcomes(report))
        return summarize(kept)
    extra = [a for a in extra if a != "--"]
    if args.keyword:
        extra = ["-k", args.keyword, *extra]
    base = test_directory()
    results: dict[str, dict[str, tuple[str, str]]] = {}
    with tempfile.TemporaryDirectory(prefix="upstream_suite_") as scratch:
        where = (args.keep or Path(scratch)).resolve()
        where.mkdir(parents=True, exist_ok=True)
        # One pytest run per path and mode, the modes alternating: stopped early, both
        # modes have run the same tests.
        for index, path in enumerate(args.paths):
            for mode in MODES if args.only is None else (args.only,):
                report = where / f"{mode}-{index}.xml"
                seconds = run(mode, [base / part for part in path.split(",")], extra, report)
                print(f"{mode} {path}: {seconds:.0f} s", flush=True)
                if report.exists():
                    results.setdefault(mode, {}).update(outcomes(report))
    return summarize(results)


if __name__ == "__main__":
    sys.exit(main())
