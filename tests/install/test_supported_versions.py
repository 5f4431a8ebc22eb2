"""The tested releases are defined once, in `xnnfold._releases.TESTED_COMBINATIONS`.

The ranges the release check uses and the lower bounds of pyproject.toml's extras are derived
from it (and from `TESTED_TRANSFORMERS`), and the files that install, run or document the
combinations (tox.ini, .ci/run, docs/versions.md) list exactly its pairs: adding a release is
one line there, and this file names each place still to follow.
"""

from __future__ import annotations

import configparser
import re
from pathlib import Path

import tomllib

from xnnfold import _releases
from xnnfold._releases import (
    DEFAULT_COMBINATION,
    EXECUTORCH_RANGE,
    TESTED_COMBINATIONS,
    TORCH_RANGE,
    TRANSFORMERS_RANGE,
)

ROOT = Path(__file__).parents[2]
_RELEASE = r"\d+\.\d+\.\d+"


def test_a_range_runs_from_the_lowest_tested_release_to_the_minor_after_the_highest() -> None:
    # Compared as numbers: 2.9.1 is below 2.10.0, and 2.10 is followed by 2.11.
    assert _releases._range_of(frozenset({"2.10.0", "2.9.1", "2.10.2"})) == ("2.9.1", "2.11")


def test_the_default_stack_is_a_tested_combination() -> None:
    assert DEFAULT_COMBINATION in TESTED_COMBINATIONS


def test_pyproject_declares_the_lowest_tested_releases() -> None:
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    assert set(extras["xnnpack"]) == {
        f"torch>={TORCH_RANGE[0]}",
        f"executorch>={EXECUTORCH_RANGE[0]}",
    }
    assert set(extras["transformers"]) == {
        "xnnfold[xnnpack]",
        f"transformers>={TRANSFORMERS_RANGE[0]}",
    }


CI_SCRIPT = ROOT / ".ci" / "run"


def _pairs(variable: str) -> set[tuple[str, str]]:
    """The "torch:executorch" pairs of one of .ci/run's arrays."""
    (listed,) = re.findall(rf"^{variable}=\(([^)]*)\)", CI_SCRIPT.read_text(), flags=re.MULTILINE)
    return set(re.findall(rf'"({_RELEASE}):({_RELEASE})"', listed))


def test_ci_runs_the_full_suite_on_the_default_stack() -> None:
    script = CI_SCRIPT.read_text()
    full = set(re.findall(rf"lowering_venv \.ci-venv ({_RELEASE}) ({_RELEASE})", script))
    assert full == {DEFAULT_COMBINATION}


def test_ci_runs_the_fast_tier_on_every_other_tested_combination_not_retired() -> None:
    # A retired pair stays tested (the release check is quiet on it) and is no longer run:
    # docs/versions.md says which and why.
    fast, retired = _pairs("OTHER_COMBINATIONS"), _pairs("RETIRED_COMBINATIONS")
    assert fast & retired == set()
    assert fast | retired == TESTED_COMBINATIONS - {DEFAULT_COMBINATION}


def test_ci_tries_the_newest_releases_unpinned() -> None:
    # Stage 5: the three names alone, in one resolve, with the machine's torch cap lifted.
    script = CI_SCRIPT.read_text()
    (body,) = re.findall(r"^newest_venv\(\) \{.*?^\}", script, flags=re.MULTILINE | re.DOTALL)
    assert re.search(
        r"PIP_CONSTRAINT=/dev/null \S+ install --quiet torch executorch transformers$",
        body,
        flags=re.MULTILINE,
    ), body


def _expand(envlist: str) -> list[str]:
    """tox's envlist with its ``a{b,c}`` groups expanded (one group per name, as here)."""
    names = []
    for item in re.split(r",\s*(?![^{]*})", envlist.strip()):
        group = re.search(r"\{([^}]*)\}", item)
        if group is None:
            names.append(item)
        else:
            names += [
                item[: group.start()] + choice + item[group.end() :]
                for choice in group[1].split(",")
            ]
    return names


def test_tox_has_one_environment_per_tested_combination() -> None:
    tox = configparser.ConfigParser(interpolation=None)
    tox.read(ROOT / "tox.ini")
    # The factor each pin is conditioned on: "torch2150: torch==2.15.0" -> torch2150 -> 2.15.0.
    pins = dict(
        re.findall(
            r"^(\w+): (?:torch|executorch)==(\S+)$", tox["testenv"]["deps"], flags=re.MULTILINE
        )
    )
    pairs = []
    for name in _expand(tox["tox"]["envlist"]):
        factors = name.split("-")
        if all(factor in pins for factor in factors):
            torch_factor, executorch_factor = factors
            pairs.append((pins[torch_factor], pins[executorch_factor]))
    assert sorted(pairs) == sorted(TESTED_COMBINATIONS)


def test_docs_versions_tabulates_every_tested_combination() -> None:
    text = (ROOT / "docs" / "versions.md").read_text()
    rows = re.findall(rf"^\| ({_RELEASE})[^|]*\| ({_RELEASE}) \|", text, flags=re.MULTILINE)
    assert sorted(rows) == sorted(TESTED_COMBINATIONS)
