"""Run the codemod's per-file rules over trees: walk, read, rewrite atomically, report.

The rules (`_rules.transform_source`) see one file's bytes at a time. A real tree
needs more than that: finding the Python files and leaving virtualenvs, build output and
version-control metadata alone; never editing one file twice through a symlink; leaving a
file that does not parse byte-for-byte untouched while saying why; replacing a file so
that an interrupted run can never leave it half-written; showing a faithful diff (CRLF and
the file's own encoding included); a ``--check`` gate for CI; a linter-style or JSON report;
and parallel workers whose output does not depend on their number. This module is that
driver; `run_codemod` is its API, and `xnnfold/cli/_codemod.py` its command line.

Walking the PATH arguments is `_file_walk`'s (its docstring says what is pruned and how
symlinks and hard links are handled); what a run reports is `_report`'s.

Speed: a file whose bytes hold none of the names the rules match (their `TRIGGER_WORDS`
and `TRIGGER_IDENTIFIERS`) and that Python compiles is counted as unchanged without being
parsed by libcst; anything else, including every file Python cannot compile, goes to the
rules. In ``--report`` and ``--check`` modes
the rules are asked only whether a rewrite is pending (``rewrite=False``), not for the new
bytes, which skips libcst's import rewriting. ``-j N`` spreads files over N processes in
chunks; results are sorted by path, so output does not depend on N.
"""

from __future__ import annotations

import ast
import concurrent.futures
import contextlib
import difflib
import functools
import io
import os
import re
import stat
import sys
import tempfile
import time
import tokenize
import warnings
from typing import Callable, Final, Iterable, Optional, Sequence, TextIO, Union

from xnnfold.rewriter.codemod._api import CodemodOptions, FileOutcome, UnparseableSource
from xnnfold.rewriter.codemod._file_walk import collect, PRUNED_DIR_NAMES, Target, UsageError
from xnnfold.rewriter.codemod._report import (
    CodemodSummary,
    FileReport,
    format_summary,
    Progress,
    PROGRESS_MIN_FILES,
    SkippedPath,
    STATUS_ERROR,
    STATUS_REWRITTEN,
    STATUS_UNCHANGED,
    STATUS_UNPARSEABLE,
    STATUS_WOULD_REWRITE,
)

__all__ = [
    "CodemodSummary",
    "FileReport",
    "MODES",
    "PRUNED_DIR_NAMES",
    "SkippedPath",
    "PROGRESS_MIN_FILES",
    "format_summary",
    "run_codemod",
    "trigger_pattern",
]

Transform = Callable[..., FileOutcome]

MODES: Final[tuple[str, ...]] = ("write", "diff", "check", "report")
FORMATS: Final[tuple[str, ...]] = ("text", "json")

_TMP_SUFFIX: Final = ".xnnfold-tmp"


def trigger_pattern(
    words: Optional[Iterable[Union[str, bytes]]] = None,
    identifiers: Optional[Iterable[Union[str, bytes]]] = None,
) -> re.Pattern[bytes]:
    """One regex that finds any of ``words`` (substrings) or ``identifiers`` (whole).

    By default the rules' own `TRIGGER_WORDS` and `TRIGGER_IDENTIFIERS`: every rule matches
    a qualified name or a legacy key, and the last component of a qualified name is always
    spelled in the file (``import x as y`` spells ``x``), so a file whose bytes contain
    none of them can produce no finding and need not be parsed (~0.1-0.4 s a file).
    """
    if words is None or identifiers is None:
        from xnnfold.rewriter.codemod import _names

        words = _names.TRIGGER_WORDS if words is None else words
        identifiers = _names.TRIGGER_IDENTIFIERS if identifiers is None else identifiers

    def alternatives(items: Iterable[Union[str, bytes]]) -> bytes:
        encoded = sorted(
            {i.encode() if isinstance(i, str) else i for i in items}, key=len, reverse=True
        )
        return b"|".join(re.escape(i) for i in encoded) or b"(?!)"

    return re.compile(
        b"(?:"
        + alternatives(words)
        + b")"
        + b"|(?<![A-Za-z0-9_])(?:"
        + alternatives(identifiers)
        + b")(?![A-Za-z0-9_])"
    )


_DEFAULT_OPTIONS: Final = CodemodOptions()  # frozen, so one shared default is safe


# -- one file ------------------------------------------------------------------------------


def _display_encoding(code: bytes) -> str:
    try:
        return tokenize.detect_encoding(io.BytesIO(code).readline)[0]
    except SyntaxError:
        return "utf-8"


def _unified_diff(path: str, old: bytes, new: bytes) -> str:
    """A unified diff decoded with the file's own encoding; line endings kept as they are."""
    encoding = _display_encoding(old)
    old_lines = old.decode(encoding, errors="replace").splitlines(keepends=True)
    new_lines = new.decode(encoding, errors="replace").splitlines(keepends=True)
    out = []
    for line in difflib.unified_diff(old_lines, new_lines, fromfile=path, tofile=path):
        out.append(line)
        # Mark a last line without newline the way diff(1) does, so patch(1) applies it.
        if not line.endswith(("\n", "\r")):
            out.append("\n\\ No newline at end of file\n")
    return "".join(out)


def _write_atomic(path: str, data: bytes, expected: os.stat_result) -> None:
    """Replace ``path`` by ``data`` through a temp file in its directory, keeping its mode.

    Refuses (OSError) if the file changed on disk since it was read.
    """
    directory = os.path.dirname(path) or "."
    fd, tmp = tempfile.mkstemp(
        prefix="." + os.path.basename(path) + ".", suffix=_TMP_SUFFIX, dir=directory
    )
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, stat.S_IMODE(expected.st_mode))
        now = os.stat(path)
        if (now.st_mtime_ns, now.st_size) != (expected.st_mtime_ns, expected.st_size):
            raise OSError(f"{path} changed on disk during the run; not rewritten")
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _compiles(code: bytes) -> bool:
    """Whether the running Python parses ``code`` (cheap: ~1 ms for a 100-line module)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # invalid escapes and the like are no concern here
            compile(code, "<codemod>", "exec", ast.PyCF_ONLY_AST, dont_inherit=True)
    except (SyntaxError, ValueError, UnicodeDecodeError, LookupError):
        return False
    return True


def _process(
    target: Target,
    *,
    transform: Transform,
    options: CodemodOptions,
    mode: str,
    prefilter: Optional[re.Pattern[bytes]],
    need_code: bool = True,
) -> tuple[FileReport, bool]:
    """Process one file; returns its report and whether the pre-filter skipped parsing it.

    ``need_code=False``: ``transform`` takes ``rewrite=False`` and may answer with
    ``pending`` instead of the new bytes (the real rules, in report and check modes).
    """
    path = target.path
    try:
        before = os.stat(target.write_path)
        with open(target.write_path, "rb") as handle:
            code = handle.read()
    except OSError as error:
        return FileReport(
            path, STATUS_ERROR, reason=f"cannot read: {error.strerror or error}"
        ), False
    if prefilter is not None and prefilter.search(code) is None and _compiles(code):
        # Nothing to rewrite and it parses: the rules would find nothing. A file that
        # Python 3.11 cannot compile still goes to the rules, which decide whether it is
        # unparseable or merely newer syntax.
        return FileReport(path, STATUS_UNCHANGED), True
    try:
        if need_code:
            outcome = transform(code, options=options)
        else:
            outcome = transform(code, options=options, rewrite=False)
    except UnparseableSource as error:
        return FileReport(path, STATUS_UNPARSEABLE, reason=error.reason), False
    except (UnicodeDecodeError, SyntaxError) as error:
        return FileReport(
            path, STATUS_UNPARSEABLE, reason=f"{type(error).__name__}: {error}"
        ), False
    except Exception as error:
        reason = f"internal error in the codemod rules: {type(error).__name__}: {error}"
        return FileReport(path, STATUS_ERROR, reason=reason), False
    findings = tuple(sorted(outcome.findings, key=lambda f: (f.line, f.col, f.code, f.message)))
    new = outcome.new_code
    if new is None and not need_code and outcome.pending:
        return FileReport(path, STATUS_WOULD_REWRITE, findings), False
    if new is None or new == code:
        return FileReport(path, STATUS_UNCHANGED, findings), False
    if mode == "write":
        try:
            _write_atomic(target.write_path, new, before)
        except OSError as error:
            reason = f"cannot write: {error.strerror or error}"
            return FileReport(path, STATUS_ERROR, findings, reason=reason), False
        return FileReport(path, STATUS_REWRITTEN, findings), False
    diff = _unified_diff(path, code, new) if mode == "diff" else None
    return FileReport(path, STATUS_WOULD_REWRITE, findings, diff=diff), False


# -- the run -------------------------------------------------------------------------------


def _real_transform() -> tuple[Transform, re.Pattern[bytes]]:
    # Imported lazily: the rules pull in libcst, which the CLI's --help does not need.
    from xnnfold.rewriter.codemod import _rules

    return _rules.transform_source, trigger_pattern()


def _rule_for(
    mode: str,
    transform: Optional[Transform],
    prefilter: Union[bool, None, re.Pattern[bytes]],
) -> tuple[Transform, Optional[re.Pattern[bytes]], bool]:
    """The per-file rule, the prefilter pattern (None: off) and whether the rule must
    build the new bytes, for `run_codemod`'s arguments."""
    # Report and check modes need only the findings and whether a rewrite is pending; the
    # real rules then skip building the new bytes (the import rewriting, half the cost
    # of a file with a rewrite). An injected transform is always asked for the bytes.
    need_code = True
    default_pattern: Optional[re.Pattern[bytes]]
    if transform is None:
        transform, default_pattern = _real_transform()
        on = prefilter is None or prefilter is True
        need_code = mode in ("write", "diff")
    else:
        on = prefilter is True
        # The rules' lists import libcst: only when asked for.
        default_pattern = trigger_pattern() if on else None
    pattern = prefilter if isinstance(prefilter, re.Pattern) else default_pattern if on else None
    return transform, pattern, need_code


def _run_all(
    work: Callable[[Target], tuple[FileReport, bool]],
    targets: Sequence[Target],
    *,
    workers: int,
    bar: Optional[Progress],
) -> list[tuple[FileReport, bool]]:
    """``work`` over every target, in this process or in ``workers`` processes."""
    results: list[tuple[FileReport, bool]] = []
    if workers <= 1:
        for target in targets:
            results.append(work(target))
            if bar:
                bar.advance()
    else:
        # Chunks amortise the inter-process round trip; several per worker keep them busy
        # to the end. map() yields in submission order, and the caller's sort makes the
        # outcome independent of scheduling anyway.
        chunksize = max(1, len(targets) // (workers * 8))
        with concurrent.futures.ProcessPoolExecutor(max_workers=workers) as pool:
            for result in pool.map(work, targets, chunksize=chunksize):
                results.append(result)
                if bar:
                    bar.advance()
    if bar:
        bar.close()
    return results


def run_codemod(
    paths: Sequence[str],
    *,
    options: CodemodOptions = _DEFAULT_OPTIONS,
    mode: str = "write",
    jobs: int = 1,
    progress: Optional[bool] = None,
    progress_stream: Optional[TextIO] = None,
    transform: Optional[Transform] = None,
    prefilter: Union[bool, None, re.Pattern[bytes]] = None,
) -> CodemodSummary:
    """Run the codemod rules over files and directories.

    Args:
        paths: files and directories (walked for ``*.py``; see the module docstring).
        options: what the rules may rewrite.
        mode: ``write`` (rewrite in place), ``diff`` (diffs, nothing written), ``check``
            (nothing written; exit code 1 if a rewrite is pending) or ``report`` (findings
            only, nothing written).
        jobs: worker processes (0 = one per CPU). Results do not depend on it.
        progress: draw a progress bar on ``progress_stream``: True always, False never,
            None when the stream is a TTY and there are at least 200 files.
        progress_stream: where the bar goes (default ``sys.stderr``).
        transform: the per-file rule, ``transform(code, *, options) -> FileOutcome``;
            default the real rules (``_rules.transform_source``). Must be picklable
            (a module-level function) when ``jobs != 1``.
        prefilter: files whose bytes this pattern does not match, and which Python
            compiles, are counted as unchanged without being given to the rules. None
            (default): on with the real rules (`trigger_pattern`), off with an injected
            ``transform``; True / False: on / off; or a pattern.

    Returns:
        A `CodemodSummary`, files sorted by path.

    Raises:
        ValueError: an unknown mode, a negative ``jobs`` or a PATH that does not exist.

    Example::

        summary = run_codemod(["src/"], mode="check")
        sys.exit(summary.exit_code)
    """
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}; got {mode!r}")
    if jobs < 0:
        raise ValueError(f"jobs must be 0 (one per CPU) or positive; got {jobs}")
    start = time.perf_counter()
    transform, pattern, need_code = _rule_for(mode, transform, prefilter)
    try:
        targets, skipped, pruned = collect(paths)
    except UsageError as error:
        raise ValueError(str(error)) from None

    work = functools.partial(
        _process,
        transform=transform,
        options=options,
        mode=mode,
        prefilter=pattern,
        need_code=need_code,
    )
    stream = sys.stderr if progress_stream is None else progress_stream
    if progress is None:
        progress = len(targets) >= PROGRESS_MIN_FILES and stream.isatty()
    bar = Progress(stream, len(targets)) if progress and targets else None
    workers = (os.cpu_count() or 1) if jobs == 0 else jobs
    results = _run_all(work, targets, workers=min(workers, max(len(targets), 1)), bar=bar)
    results.sort(key=lambda r: r[0].path)
    return CodemodSummary(
        mode=mode,
        files=tuple(r[0] for r in results),
        skipped=tuple(skipped),
        pruned_dirs=tuple(pruned),
        prefiltered=sum(1 for r in results if r[1]),
        elapsed_s=time.perf_counter() - start,
    )


# -- output --------------------------------------------------------------------------------
