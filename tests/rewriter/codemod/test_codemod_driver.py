"""The codemod driver: walking, atomic writes, modes, reports, exit codes, workers.

Most tests inject a tiny rule (`fake_transform`: ``legacy_wn(`` -> ``new_wn(``, parsed
with libcst so that broken files are refused as the real rules refuse them), so they test
the driver alone and run in milliseconds. The `real rules` tests at the end run the
actual `_codemod_rules.transform_source` over the same awkward files.
"""

from __future__ import annotations

import io
import json
import os
import re
import stat
import subprocess
import sys
from pathlib import Path
from typing import Callable

import libcst
import pytest

from xnnfold.cli import main as cli_main
from xnnfold.cli._codemod import main
from xnnfold.rewriter.codemod._api import CodemodOptions, FileOutcome, Finding, UnparseableSource
from xnnfold.rewriter.codemod._driver import run_codemod, trigger_pattern

OLD = b"legacy_wn("
NEW = b"new_wn("


def fake_transform(code: bytes, *, options: CodemodOptions) -> FileOutcome:
    """``legacy_wn(`` -> ``new_wn(`` (when migrating), one finding per site."""
    try:
        libcst.parse_module(code)
    except (libcst.ParserSyntaxError, SyntaxError, UnicodeDecodeError) as error:
        raise UnparseableSource(f"{type(error).__name__}: {str(error).splitlines()[0]}") from error
    findings = []
    for number, line in enumerate(code.splitlines(), 1):
        col = line.find(OLD)
        if col >= 0:
            findings.append(
                Finding("XF001", number, col + 1, "legacy weight_norm", options.migrate_weight_norm)
            )
    new = code.replace(OLD, NEW) if options.migrate_weight_norm else None
    return FileOutcome(tuple(findings), new)


def appending_transform(code: bytes, *, options: CodemodOptions) -> FileOutcome:
    """Not idempotent on purpose: a file edited twice shows two markers."""
    return FileOutcome((Finding("XF002", 1, 1, "edited"),), code + b"# edited\n")


def options_transform(code: bytes, *, options: CodemodOptions) -> FileOutcome:
    """Reports the options it was given, to test the flag mapping."""
    return FileOutcome((Finding("XF003", 1, 1, repr(options)),), None)


def crashing_transform(code: bytes, *, options: CodemodOptions) -> FileOutcome:
    if b"crash" in code:
        raise RuntimeError("rule bug")
    return fake_transform(code, options=options)


# Every awkward kind of file the driver must cope with: name -> bytes.
SOURCES: dict[str, bytes] = {
    "pkg/plain.py": b"import torch\n\n\ndef f(x):\n    return x + 1\n",
    "pkg/site.py": b"import torch\n\nconv = legacy_wn(torch.nn.Conv1d(2, 2, 3))\n",
    "pkg/crlf.py": b"import torch\r\n\r\nconv = legacy_wn(torch.nn.Conv1d(2, 2, 3))\r\n",
    "pkg/tabs.py": b"class M:\n\tdef __init__(self):\n\t\tself.c = legacy_wn(conv)\n",
    "pkg/latin1.py": b"# -*- coding: latin-1 -*-\n# caf\xe9\nconv = legacy_wn(c)\n",
    # Python 3.12+ syntax: the running 3.11 cannot compile it, libcst parses it.
    "pkg/newer.py": b'type Alias = int\nname = f"{"x"}"\nconv = legacy_wn(c)\n',
    "pkg/no_newline.py": b"conv = legacy_wn(c)",
    "pkg/broken.py": b"def f(:\n    conv = legacy_wn(c)\n",
    "pkg/py2.py": b'print "hello"\nconv = legacy_wn(c)\n',
    "pkg/not_utf8.py": b"# caf\xe9\nconv = legacy_wn(c)\n",
    "pkg/notebook.ipynb": b'{"cells": [], "source": "legacy_wn(c)"}\n',
    "pkg/.hidden/h.py": b"legacy_wn(c)\n",
    "pkg/build/b.py": b"legacy_wn(c)\n",
    "pkg/__pycache__/c.py": b"legacy_wn(c)\n",
    "pkg/myenv/pyvenv.cfg": b"home = /usr/bin\n",
    "pkg/myenv/lib/v.py": b"legacy_wn(c)\n",
    "outside/target.py": b"conv = legacy_wn(c)\n",
    "outside/sub/o.py": b"conv = legacy_wn(c)\n",
}
BROKEN = ("pkg/broken.py", "pkg/py2.py", "pkg/not_utf8.py")
PRUNED = ("pkg/.hidden/h.py", "pkg/build/b.py", "pkg/__pycache__/c.py", "pkg/myenv/lib/v.py")
REWRITTEN = (
    "pkg/site.py",
    "pkg/crlf.py",
    "pkg/tabs.py",
    "pkg/latin1.py",
    "pkg/newer.py",
    "pkg/no_newline.py",
)


@pytest.fixture
def tree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for name, data in SOURCES.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    # A link to a file inside the tree, one to a file outside, one to a directory.
    os.symlink("site.py", tmp_path / "pkg/link_in.py")
    os.symlink(tmp_path / "outside/target.py", tmp_path / "pkg/link_out.py")
    os.symlink(tmp_path / "outside/sub", tmp_path / "pkg/linkdir")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def snapshot(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and not p.is_symlink()
    }


def run_cli(argv: list[str], transform: Callable[..., FileOutcome] = fake_transform) -> int:
    return main(argv, transform=transform)


def by_path(summary) -> dict[str, str]:
    return {f.path: f.status for f in summary.files}


# -- walking ---------------------------------------------------------------------------


def test_walk_scans_python_files_and_prunes_hidden_build_and_virtualenv_dirs(tree: Path) -> None:
    summary = run_codemod(["pkg"], transform=fake_transform, mode="report")
    expected = sorted(
        n for n in SOURCES if n.startswith("pkg/") and n.endswith(".py") and n not in PRUNED
    )
    assert [f.path for f in summary.files] == expected
    assert set(summary.pruned_dirs) == {"pkg/.hidden", "pkg/build", "pkg/__pycache__", "pkg/myenv"}


def test_pruned_dirs_are_not_edited(tree: Path) -> None:
    run_codemod(["pkg"], transform=fake_transform)
    for name in PRUNED:
        assert (tree / name).read_bytes() == SOURCES[name]


def test_explicit_pruned_dir_is_walked(tree: Path) -> None:
    summary = run_codemod(["pkg/build"], transform=fake_transform, mode="report")
    assert [f.path for f in summary.files] == ["pkg/build/b.py"]


def test_notebook_is_skipped_with_a_note(tree: Path) -> None:
    summary = run_codemod(["pkg"], transform=fake_transform)
    reasons = {s.path: s.reason for s in summary.skipped}
    assert "notebook" in reasons["pkg/notebook.ipynb"]
    assert (tree / "pkg/notebook.ipynb").read_bytes() == SOURCES["pkg/notebook.ipynb"]


@pytest.mark.parametrize(
    "link, words",
    [
        ("pkg/link_in.py", ["scanned as pkg/site.py"]),
        ("pkg/link_out.py", ["outside the scanned paths"]),
        ("pkg/linkdir", ["symlink to directory", "outside the scanned paths"]),
    ],
)
def test_symlinks_in_a_walk_are_skipped_with_their_reason(
    tree: Path, link: str, words: list[str]
) -> None:
    summary = run_codemod(["pkg"], transform=fake_transform)
    reasons = {s.path: s.reason for s in summary.skipped}
    assert all(word in reasons[link] for word in words), reasons[link]


def test_symlinked_targets_are_edited_once_or_not_at_all(tree: Path) -> None:
    run_codemod(["pkg"], transform=appending_transform)
    assert (tree / "pkg/site.py").read_bytes().count(b"# edited") == 1
    assert (tree / "outside/target.py").read_bytes() == SOURCES["outside/target.py"]
    assert (tree / "outside/sub/o.py").read_bytes() == SOURCES["outside/sub/o.py"]
    assert (tree / "pkg/link_in.py").is_symlink()


def test_explicit_symlink_argument_rewrites_its_target_and_keeps_the_link(tree: Path) -> None:
    run_codemod(["pkg/link_out.py"], transform=fake_transform)
    assert (tree / "pkg/link_out.py").is_symlink()
    assert (tree / "outside/target.py").read_bytes() == SOURCES["outside/target.py"].replace(
        OLD, NEW
    )


def test_same_file_through_two_arguments_is_processed_once(tree: Path) -> None:
    summary = run_codemod(["pkg/site.py", "pkg/link_in.py", "pkg"], transform=appending_transform)
    assert (tree / "pkg/site.py").read_bytes().count(b"# edited") == 1
    assert [f.path for f in summary.files].count("pkg/site.py") == 1
    assert any("same file as" in s.reason for s in summary.skipped)


# -- files that do not parse -------------------------------------------------------------


def test_unparseable_files_are_reported_with_a_reason(tree: Path) -> None:
    summary = run_codemod(["pkg"], transform=fake_transform)
    failed = {f.path: f for f in summary.failed}
    assert sorted(failed) == sorted(BROKEN)
    assert all(f.status == "unparseable" and f.reason for f in failed.values())


def test_unparseable_files_stay_byte_identical(tree: Path) -> None:
    run_codemod(["pkg"], transform=fake_transform)
    for name in BROKEN:
        assert (tree / name).read_bytes() == SOURCES[name]


@pytest.mark.skipif(
    sys.version_info >= (3, 12),
    reason="the case is 3.12's `type` statement, which this interpreter compiles (it runs "
    "on 3.10 and 3.11)",
)
def test_newer_syntax_than_the_interpreter_is_rewritten(tree: Path) -> None:
    with pytest.raises(SyntaxError):
        compile(SOURCES["pkg/newer.py"], "newer.py", "exec")
    summary = run_codemod(["pkg/newer.py"], transform=fake_transform)
    assert by_path(summary) == {"pkg/newer.py": "rewritten"}


def test_rule_crash_is_reported_and_other_files_processed(tree: Path) -> None:
    (tree / "pkg/crash.py").write_bytes(b"crash = legacy_wn(c)\n")
    summary = run_codemod(["pkg"], transform=crashing_transform)
    statuses = by_path(summary)
    assert statuses["pkg/crash.py"] == "error"
    assert "rule bug" in next(f.reason for f in summary.failed if f.path == "pkg/crash.py")
    assert statuses["pkg/site.py"] == "rewritten"
    assert summary.exit_code == 1


# -- writing ---------------------------------------------------------------------------


def test_write_mode_rewrites_exactly_the_sites(tree: Path) -> None:
    summary = run_codemod(["pkg"], transform=fake_transform)
    assert sorted(summary.changed) == sorted(REWRITTEN)
    for name in REWRITTEN:
        assert (tree / name).read_bytes() == SOURCES[name].replace(OLD, NEW)


@pytest.mark.parametrize(
    "name", ["pkg/crlf.py", "pkg/latin1.py", "pkg/tabs.py", "pkg/no_newline.py"]
)
def test_rewrite_keeps_line_endings_encoding_and_indentation(tree: Path, name: str) -> None:
    run_codemod([name], transform=fake_transform)
    data = (tree / name).read_bytes()
    assert data.count(b"\r\n") == SOURCES[name].count(b"\r\n")
    assert data.count(b"\t") == SOURCES[name].count(b"\t")
    assert (b"\xe9" in data) == (b"\xe9" in SOURCES[name])
    assert data.endswith(b"\n") == SOURCES[name].endswith(b"\n")


def test_second_run_changes_nothing(tree: Path) -> None:
    run_codemod(["pkg"], transform=fake_transform)
    before = snapshot(tree)
    summary = run_codemod(["pkg"], transform=fake_transform)
    assert summary.changed == ()
    assert snapshot(tree) == before


def test_files_without_a_rewrite_keep_their_mtime(tree: Path) -> None:
    old = 1_000_000_000
    for name in ("pkg/plain.py", *BROKEN):
        os.utime(tree / name, ns=(old, old))
    run_codemod(["pkg"], transform=fake_transform)
    for name in ("pkg/plain.py", *BROKEN):
        assert (tree / name).stat().st_mtime_ns == old


def test_atomic_write_keeps_mode_and_leaves_no_temp_files(tree: Path) -> None:
    os.chmod(tree / "pkg/site.py", 0o754)
    before = {p.name for p in (tree / "pkg").iterdir()}
    run_codemod(["pkg"], transform=fake_transform)
    assert {p.name for p in (tree / "pkg").iterdir()} == before
    assert stat.S_IMODE((tree / "pkg/site.py").stat().st_mode) == 0o754


def test_failed_write_leaves_file_and_no_temp_file(
    tree: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(src: str, dst: str) -> None:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(os, "replace", refuse)
    summary = run_codemod(["outside/sub"], transform=fake_transform)
    assert summary.failed[0].reason == "cannot write: Permission denied"
    assert [p.name for p in (tree / "outside/sub").iterdir()] == ["o.py"]
    assert (tree / "outside/sub/o.py").read_bytes() == SOURCES["outside/sub/o.py"]


# -- modes and output ------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["diff", "check", "report"])
def test_non_write_modes_write_nothing(tree: Path, mode: str) -> None:
    before = snapshot(tree)
    summary = run_codemod(["pkg"], transform=fake_transform, mode=mode)
    assert sorted(summary.changed) == sorted(REWRITTEN)
    assert snapshot(tree) == before


def test_diff_shows_crlf_and_the_declared_encoding(
    tree: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_cli(["--diff", "pkg/crlf.py", "pkg/latin1.py"])
    out = capsys.readouterr().out
    assert "-conv = legacy_wn(torch.nn.Conv1d(2, 2, 3))\r\n" in out
    assert "+conv = new_wn(torch.nn.Conv1d(2, 2, 3))\r\n" in out
    assert " # café\n" in out
    assert "--- pkg/latin1.py\n+++ pkg/latin1.py\n" in out


def test_diff_applies_with_patch(tree: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run_cli(["--diff", "pkg"])
    patch = capsys.readouterr().out
    subprocess.run(["patch", "-p0", "-s"], input=patch.encode(), check=True, cwd=tree)
    for name in REWRITTEN:
        if name != "pkg/latin1.py":  # shown decoded; patch(1) would write it as UTF-8
            assert (tree / name).read_bytes() == SOURCES[name].replace(OLD, NEW)


def test_report_prints_findings_like_a_linter(
    tree: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run_cli(["--report", "pkg/site.py", "pkg/tabs.py"]) == 0
    out = capsys.readouterr().out
    assert out == (
        "pkg/site.py:3:8: XF001 legacy weight_norm\npkg/tabs.py:3:12: XF001 legacy weight_norm\n"
    )


def test_summary_goes_to_stderr_with_skip_reasons(
    tree: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_cli(["--report", "pkg"])
    err = capsys.readouterr().err
    assert f"{len(REWRITTEN) + 4} files scanned, {len(REWRITTEN)} would change" in err
    assert "not processed: pkg/broken.py:" in err
    assert "skipped: pkg/notebook.ipynb: notebook" in err


@pytest.mark.parametrize(
    "paths, pending, expected",
    [
        (["pkg/site.py", "pkg/plain.py"], True, 1),
        (["pkg/plain.py"], False, 0),
        (["pkg/plain.py", "pkg/broken.py"], False, 1),
    ],
)
def test_check_exit_code(tree: Path, paths: list[str], pending: bool, expected: int) -> None:
    assert run_cli(["--check", *paths]) == expected


def test_check_passes_after_the_rewrite(tree: Path) -> None:
    run_cli(["pkg/site.py", "pkg/crlf.py"])
    assert run_cli(["--check", "pkg/site.py", "pkg/crlf.py"]) == 0


def test_json_output_parses(tree: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run_cli(["--report", "--format", "json", "pkg"])
    data = json.loads(capsys.readouterr().out)
    assert data["summary"]["would_rewrite"] == len(REWRITTEN)
    assert sorted(data["would_rewrite"]) == sorted(REWRITTEN)
    assert {f["path"] for f in data["failed"]} == set(BROKEN)
    assert {
        "path": "pkg/site.py",
        "line": 3,
        "col": 8,
        "code": "XF001",
        "message": "legacy weight_norm",
        "rewritten": True,
    } in data["findings"]


def test_parallel_jobs_give_the_same_result(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    outputs = []
    for jobs in (1, 2):
        root = tmp_path / f"j{jobs}"
        for name, data in SOURCES.items():
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            (root / name).write_bytes(data)
        for i in range(40):  # enough files for several chunks per worker
            (root / f"pkg/many/m{i:02d}.py").parent.mkdir(exist_ok=True)
            (root / f"pkg/many/m{i:02d}.py").write_bytes(b"x = legacy_wn(c)\n" * (i % 3))
        monkeypatch.chdir(root)
        summary = run_codemod(["pkg"], transform=fake_transform, jobs=jobs)
        result = summary.to_json()
        del result["summary"]["elapsed_s"]  # type: ignore[attr-defined]
        outputs.append((result, snapshot(root)))
    assert outputs[0] == outputs[1]


def test_progress_bar_when_asked(tree: Path) -> None:
    stream = io.StringIO()
    run_codemod(
        ["pkg"], transform=fake_transform, mode="report", progress=True, progress_stream=stream
    )
    assert stream.getvalue().rstrip().endswith(f"{len(REWRITTEN) + 4}/{len(REWRITTEN) + 4} files")


def test_no_progress_bar_off_a_tty(tree: Path) -> None:
    stream = io.StringIO()
    run_codemod(["pkg"], transform=fake_transform, mode="report", progress_stream=stream)
    assert stream.getvalue() == ""


@pytest.mark.parametrize(
    "flags, expected",
    [
        ([], CodemodOptions()),
        (["--no-migrate"], CodemodOptions(migrate_weight_norm=False)),
        (["--migrate-spectral-norm"], CodemodOptions(migrate_spectral_norm=True)),
        (["--no-export-wiring"], CodemodOptions(wire_export=False)),
        (["--force"], CodemodOptions(force=True)),
    ],
)
def test_flags_map_to_options(
    tree: Path, capsys: pytest.CaptureFixture[str], flags: list[str], expected: CodemodOptions
) -> None:
    run_cli(["--report", *flags, "pkg/plain.py"], transform=options_transform)
    assert capsys.readouterr().out == f"pkg/plain.py:1:1: XF003 {expected!r}\n"


@pytest.mark.parametrize(
    "argv",
    [
        ["missing.py"],
        ["--diff", "--check", "pkg"],
        ["--no-migrate", "--migrate-spectral-norm", "pkg"],
        ["-j", "-1", "pkg"],
        [],
    ],
)
def test_usage_errors_exit_2_and_change_nothing(tree: Path, argv: list[str]) -> None:
    before = snapshot(tree)
    with pytest.raises(SystemExit) as exit_info:
        run_cli(argv)
    assert exit_info.value.code == 2
    assert snapshot(tree) == before


def test_xnnfold_help_lists_codemod(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        cli_main(["--help"])
    assert exit_info.value.code == 0
    assert "codemod" in capsys.readouterr().out


def test_codemod_help_names_the_pruned_dirs_and_exit_codes(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit):
        cli_main(["codemod", "--help"])
    out = capsys.readouterr().out
    assert "site-packages" in out and "pyvenv.cfg" in out and "exit status" in out


# -- the pre-filter ----------------------------------------------------------------------

FAKE_TRIGGER = re.compile(re.escape(OLD))


def test_prefilter_keeps_findings_and_skips_parsing(tree: Path) -> None:
    plain = run_codemod(["pkg"], transform=fake_transform, mode="report")
    filtered = run_codemod(["pkg"], transform=fake_transform, mode="report", prefilter=FAKE_TRIGGER)
    assert filtered.to_json()["findings"] == plain.to_json()["findings"]
    assert filtered.prefiltered == 1  # pkg/plain.py


def test_prefilter_still_reports_unparseable_files(tree: Path) -> None:
    (tree / "pkg/broken_plain.py").write_bytes(b"def f(:\n")
    (tree / "pkg/newer_plain.py").write_bytes(b"type Alias = int\n")
    summary = run_codemod(
        ["pkg/broken_plain.py", "pkg/newer_plain.py"],
        transform=fake_transform,
        prefilter=FAKE_TRIGGER,
    )
    assert by_path(summary) == {
        "pkg/broken_plain.py": "unparseable",
        "pkg/newer_plain.py": "unchanged",
    }


def _rule_names() -> list[str]:
    """Every qualified name and key the real rules match, read from their private tables.

    Deliberately coupled: if the rules gain a table or rename one, this fails instead of
    the pre-filter silently hiding the new findings.
    """
    from xnnfold.rewriter.codemod import _names as rules

    return [
        *rules.LEGACY,
        *rules.PARAMETRIZATION_CODES,
        *rules.GEMMS,
        *rules.TORCH_EXPORT,
        rules.LOWER,
        rules.STOCK_PARTITIONER,
        *rules.LEGACY_KEYS,
        "x.state_dict",  # XNF403: loaders iterating over owner.state_dict()
    ]


@pytest.mark.parametrize("name", _rule_names())
def test_prefilter_matches_every_name_the_rules_match(name: str) -> None:
    """An `import ... as alias` still spells the last component, so it must be a trigger."""
    pattern = trigger_pattern()
    last = name.rsplit(".", 1)[-1].encode()
    assert pattern.search(b"from m import " + last + b" as alias\n")
    assert pattern.search(b"y = '" + last + b"'\n")


# -- the real rules --------------------------------------------------------------------

REAL: dict[str, bytes] = {
    "real/crlf_latin1_tabs.py": (
        b"# -*- coding: latin-1 -*-\r\n# caf\xe9\r\nimport torch\r\n"
        b"from torch.nn.utils import weight_norm\r\n\r\n"
        b"class M(torch.nn.Module):\r\n\tdef __init__(self):\r\n\t\tsuper().__init__()\r\n"
        b"\t\tself.c = weight_norm(torch.nn.Conv1d(2, 2, 3))\r\n"
    ),
    "real/plain.py": b"import torch\n\n\ndef f(x):\n    return torch.relu(x)\n",
    "real/attention.py": b"import torch\n\n\ndef f(q, k):\n    return torch.matmul(q, k)\n",
    "real/keys.py": (
        b"import torch\nfrom torch.nn.utils import weight_norm\n"
        b"g = sd['c.weight_g']\nc = weight_norm(torch.nn.Conv1d(2, 2, 3))\n"
    ),
    "real/broken.py": b"from torch.nn.utils import weight_norm\ndef f(:\n",
    "real/not_utf8.py": b"from torch.nn.utils import weight_norm\n# caf\xe9\n",
    "real/newer.py": b"import torch\ntype Alias = int\nc = torch.nn.utils.weight_norm(m)\n",
}


@pytest.fixture
def real_tree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for name, data in REAL.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(data)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_real_rules_migrate_keeping_crlf_cookie_and_tabs(real_tree: Path) -> None:
    summary = run_codemod(["real"])
    assert by_path(summary)["real/crlf_latin1_tabs.py"] == "rewritten"
    data = (real_tree / "real/crlf_latin1_tabs.py").read_bytes()
    assert b"from torch.nn.utils.parametrizations import weight_norm\r\n" in data
    assert data.count(b"\r\n") == data.count(b"\n") == REAL["real/crlf_latin1_tabs.py"].count(b"\n")
    assert b"# caf\xe9\r\n" in data and b"\t\tself.c = weight_norm(" in data


def test_real_rules_leave_broken_files_identical_and_say_why(real_tree: Path) -> None:
    summary = run_codemod(["real"])
    assert {f.path for f in summary.failed} == {"real/broken.py", "real/not_utf8.py"}
    assert all(f.reason for f in summary.failed)
    for name in ("real/broken.py", "real/not_utf8.py", "real/keys.py", "real/plain.py"):
        assert (real_tree / name).read_bytes() == REAL[name]


def test_real_rules_second_run_changes_nothing(real_tree: Path) -> None:
    first = run_codemod(["real"])
    assert set(first.changed) == {"real/crlf_latin1_tabs.py", "real/newer.py"}
    before = snapshot(real_tree)
    assert run_codemod(["real"]).changed == ()
    assert snapshot(real_tree) == before


def test_real_rules_prefilter_hides_no_finding(real_tree: Path) -> None:
    on = run_codemod(["real"], mode="report")
    off = run_codemod(["real"], mode="report", prefilter=False)
    assert on.prefiltered == 1  # real/plain.py
    assert on.to_json()["findings"] == off.to_json()["findings"]
    assert [(f.path, f.status) for f in on.files] == [(f.path, f.status) for f in off.files]


def test_real_rules_parallel_jobs_give_the_same_report(real_tree: Path) -> None:
    one = run_codemod(["real"], mode="report", jobs=1).to_json()
    two = run_codemod(["real"], mode="report", jobs=2).to_json()
    del one["summary"]["elapsed_s"], two["summary"]["elapsed_s"]  # type: ignore[attr-defined]
    assert one == two


def test_xnnfold_codemod_command_checks_with_the_real_rules(
    real_tree: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli_main(["codemod", "--check", "real/plain.py", "real/attention.py"]) == 0
    assert cli_main(["codemod", "--check", "real/crlf_latin1_tabs.py"]) == 1
    err = capsys.readouterr().err
    assert "would rewrite real/crlf_latin1_tabs.py" in err
    assert (real_tree / "real/crlf_latin1_tabs.py").read_bytes() == REAL["real/crlf_latin1_tabs.py"]


WIRED = (
    b"import torch\nfrom torch.nn.utils import weight_norm\n"
    b"from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner\n"
    b"from executorch.exir import to_edge_transform_and_lower\n"
    b"c = weight_norm(torch.nn.Conv1d(2, 2, 3))\n"
    b"ep = torch.export.export(c, (torch.randn(1, 2, 8),))\n"
    b"to_edge_transform_and_lower(ep, partitioner=[XnnpackPartitioner()])\n"
)


@pytest.mark.parametrize("mode", ["report", "check"])
def test_modes_that_write_nothing_say_what_would_happen(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], mode: str
) -> None:
    monkeypatch.chdir(tmp_path)
    Path("m.py").write_bytes(WIRED)
    main([f"--{mode}", "m.py"])
    out = capsys.readouterr().out
    assert "XNF101 legacy torch.nn.utils.weight_norm: would migrate to " in out
    assert "would wrap the model in prepare_for_xnnpack" in out
    assert "would be replaced by XnnpackFoldingPartitioner" in out
    assert "migrated to" not in out and "replaced by Xnnpack" not in out.replace("be replaced", "")
    assert Path("m.py").read_bytes() == WIRED


def test_write_mode_says_what_happened_with_the_same_codes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    Path("m.py").write_bytes(WIRED)
    main(["--report", "m.py"])
    pending = capsys.readouterr().out.splitlines()
    main(["m.py"])
    done = capsys.readouterr().out.splitlines()
    assert [line.split(" ", 2)[:2] for line in done] == [line.split(" ", 2)[:2] for line in pending]
    assert any("XNF101 legacy torch.nn.utils.weight_norm: migrated to " in line for line in done)
    assert not any("would" in line for line in done)


def test_json_report_says_would(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    Path("m.py").write_bytes(WIRED)
    main(["--report", "--format", "json", "m.py"])
    messages = [f["message"] for f in json.loads(capsys.readouterr().out)["findings"]]
    assert any(
        m.endswith("would migrate to torch.nn.utils.parametrizations.weight_norm") for m in messages
    )


def test_a_failed_write_reports_what_would_have_happened(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    Path("m.py").write_bytes(WIRED)

    def refuse(src: str, dst: str) -> None:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(os, "replace", refuse)
    main(["m.py"])
    out = capsys.readouterr().out
    assert "would migrate to " in out and "migrated to" not in out
    assert Path("m.py").read_bytes() == WIRED
