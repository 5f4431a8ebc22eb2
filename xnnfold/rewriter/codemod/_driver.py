"""Run the codemod's per-file rules over trees: walk, read, rewrite atomically, report.

The rules (`_rules.transform_source`) see one file's bytes at a time. A real tree
needs more than that: finding the Python files and leaving virtualenvs, build output and
version-control metadata alone; never editing one file twice through a symlink; leaving a
file that does not parse byte-for-byte untouched while saying why; replacing a file so
that an interrupted run can never leave it half-written; showing a faithful diff (CRLF and
the file's own encoding included); a ``--check`` gate for CI; a linter-style or JSON report;
and parallel workers whose output does not depend on their number. This module is that
driver; `run_codemod` is its API, and `xnnfold/cli/_codemod.py` its command line.

Walking (documented in ``xnnfold codemod --help``):
- a PATH that is a file is processed whatever its suffix (``.ipynb`` notebooks excepted);
  a directory is walked for ``*.py`` files in sorted order;
- inside a walk, hidden entries (name starting with ``.``), the directory names in
  `PRUNED_DIR_NAMES`, ``*.egg-info`` and any directory holding a ``pyvenv.cfg``
  (a virtualenv, whatever its name) are pruned; a PATH given explicitly is never pruned;
- symlinks met inside a walk are never followed, and are listed as skipped with the
  reason (target scanned under its own path, outside the scanned paths, a directory,
  dangling). Following them would either edit a file twice or edit files outside the
  tree, and replacing a file through ``os.replace`` would turn the link into a regular
  file. A PATH given explicitly as a symlink is followed (the user named it), and its
  target is rewritten in place, the link left intact;
- two paths reaching the same file (explicit symlink, hard link, overlapping PATHs) are
  processed once, under a path that is not a symlink if there is one, else the first in
  sorted order; the others are skipped. (A rewrite replaces the file, so other hard links
  keep the old content.)

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
import dataclasses
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

from xnnfold._exit_codes import EXIT_FAILED, EXIT_OK
from xnnfold.rewriter.codemod._api import CodemodOptions, FileOutcome, Finding, UnparseableSource

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

# Directory names pruned inside a walk (hidden ones, starting with ".", are pruned too):
# caches, build output, vendored environments. Virtualenvs of any name are recognised by
# their pyvenv.cfg instead of being listed here.
PRUNED_DIR_NAMES: Final[frozenset[str]] = frozenset(
    {
        "__pycache__",
        "__pypackages__",
        "_build",
        "build",
        "buck-out",
        "dist",
        "node_modules",
        "site-packages",
        "venv",
    }
)
_VENV_MARKER: Final = "pyvenv.cfg"
_NOTEBOOK_SUFFIX: Final = ".ipynb"
_PY_SUFFIX: Final = ".py"
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


# Show a progress bar on a TTY only for trees at least this large (--progress forces it).
PROGRESS_MIN_FILES: Final = 200
_PROGRESS_INTERVAL_S: Final = 0.1

STATUS_UNCHANGED: Final = "unchanged"
STATUS_REWRITTEN: Final = "rewritten"
STATUS_WOULD_REWRITE: Final = "would_rewrite"
STATUS_UNPARSEABLE: Final = "unparseable"
STATUS_ERROR: Final = "error"

_DEFAULT_OPTIONS: Final = CodemodOptions()  # frozen, so one shared default is safe


@dataclasses.dataclass(frozen=True)
class FileReport:
    """What happened to one scanned file.

    ``status`` is ``unchanged``, ``rewritten`` (bytes written), ``would_rewrite`` (a rewrite
    is pending: --diff, --check, --report), ``unparseable`` (left untouched, see ``reason``)
    or ``error`` (could not be read or written, or the rules failed; left untouched).
    ``diff`` is the unified diff in --diff mode.
    """

    path: str
    status: str
    findings: tuple[Finding, ...] = ()
    reason: Optional[str] = None
    diff: Optional[str] = None


@dataclasses.dataclass(frozen=True)
class SkippedPath:
    """A path the walk did not process (notebook, symlink, same file twice), and why."""

    path: str
    reason: str


@dataclasses.dataclass(frozen=True)
class CodemodSummary:
    """The outcome of one run, files and skips sorted by path whatever the worker count."""

    mode: str
    files: tuple[FileReport, ...]
    skipped: tuple[SkippedPath, ...]
    pruned_dirs: tuple[str, ...]
    prefiltered: int
    elapsed_s: float

    @property
    def unchanged(self) -> int:
        return sum(1 for f in self.files if f.status == STATUS_UNCHANGED)

    @property
    def scanned(self) -> int:
        return len(self.files)

    @property
    def changed(self) -> tuple[str, ...]:
        """Paths rewritten (write mode) or with a rewrite pending (other modes)."""
        return tuple(
            f.path for f in self.files if f.status in (STATUS_REWRITTEN, STATUS_WOULD_REWRITE)
        )

    @property
    def failed(self) -> tuple[FileReport, ...]:
        """Files left untouched because they could not be parsed, read, written or ruled on."""
        return tuple(f for f in self.files if f.status in (STATUS_UNPARSEABLE, STATUS_ERROR))

    @property
    def findings(self) -> tuple[tuple[str, Finding], ...]:
        return tuple((f.path, finding) for f in self.files for finding in f.findings)

    @property
    def written(self) -> frozenset[str]:
        """Paths whose rewrite was written: their findings say what happened, every
        other file's say what would (a failed write, --check, --report, --diff)."""
        return frozenset(f.path for f in self.files if f.status == STATUS_REWRITTEN)

    @property
    def exit_code(self) -> int:
        """1 if a file could not be processed, or in --check if a rewrite is pending; else 0."""
        if self.failed:
            return EXIT_FAILED
        if self.mode == "check" and self.changed:
            return EXIT_FAILED
        return EXIT_OK

    def to_json(self) -> dict[str, object]:
        changed_key = "rewritten" if self.mode == "write" else "would_rewrite"
        written = self.written
        result: dict[str, object] = {
            "mode": self.mode,
            "findings": [
                {
                    "path": path,
                    "line": f.line,
                    "col": f.col,
                    "code": f.code,
                    "message": f.text(written=path in written),
                    "rewritten": f.rewritten,
                }
                for path, f in self.findings
            ],
            changed_key: list(self.changed),
            "failed": [
                {"path": f.path, "status": f.status, "reason": f.reason} for f in self.failed
            ],
            "skipped": [{"path": s.path, "reason": s.reason} for s in self.skipped],
            "pruned_dirs": list(self.pruned_dirs),
            "summary": {
                "scanned": self.scanned,
                changed_key: len(self.changed),
                "unchanged": self.unchanged,
                "failed": len(self.failed),
                "skipped": len(self.skipped),
                "findings": len(self.findings),
                "prefiltered": self.prefiltered,
                "exit_code": self.exit_code,
                "elapsed_s": round(self.elapsed_s, 3),
            },
        }
        if self.mode == "diff":
            result["diffs"] = {f.path: f.diff for f in self.files if f.diff}
        return result


@dataclasses.dataclass(frozen=True)
class _Target:
    """A file to process: the path shown to the user and the path written to."""

    path: str
    write_path: str


class _UsageError(Exception):
    pass


# -- walking -------------------------------------------------------------------------------


def _identity(st: os.stat_result) -> tuple[int, int]:
    return (st.st_dev, st.st_ino)


def _is_pruned_dir(entry: os.DirEntry[str]) -> bool:
    name = entry.name
    if name.startswith(".") or name in PRUNED_DIR_NAMES or name.endswith(".egg-info"):
        return True
    return os.path.exists(os.path.join(entry.path, _VENV_MARKER))


def _collect(
    paths: Sequence[str],
) -> tuple[list[_Target], list[SkippedPath], list[str]]:
    """Expand PATH arguments into files to process, skipped paths and pruned directories."""
    files: dict[str, _Target] = {}  # display path -> target
    notebooks: list[str] = []
    links: list[str] = []  # symlinks met inside walks, classified once all files are known
    pruned: list[str] = []
    roots: list[str] = []

    def walk(directory: str) -> None:
        try:
            entries = sorted(os.scandir(directory), key=lambda e: e.name)
        except OSError as error:
            pruned.append(f"{directory} (cannot list: {error.strerror})")
            return
        for entry in entries:
            if entry.is_symlink():
                if not entry.name.startswith("."):
                    links.append(entry.path)
            elif entry.is_dir(follow_symlinks=False):
                if _is_pruned_dir(entry):
                    pruned.append(entry.path)
                else:
                    walk(entry.path)
            elif entry.name.startswith("."):
                continue
            elif entry.name.endswith(_PY_SUFFIX):
                files.setdefault(entry.path, _Target(entry.path, entry.path))
            elif entry.name.endswith(_NOTEBOOK_SUFFIX):
                notebooks.append(entry.path)

    for path in paths:
        if not os.path.exists(path):
            raise _UsageError(f"{path}: no such file or directory")
        if os.path.isdir(path):
            roots.append(os.path.realpath(path))
            walk(path)
        elif path.endswith(_NOTEBOOK_SUFFIX):
            notebooks.append(path)
        else:
            # An explicit symlink is followed; the replace must hit the target, not the link.
            write_path = os.path.realpath(path) if os.path.islink(path) else path
            files.setdefault(path, _Target(path, write_path))

    skipped = [
        SkippedPath(p, "notebook: .ipynb files are not rewritten (convert to .py first)")
        for p in dict.fromkeys(notebooks)
    ]
    # One file reached by two paths is processed once, under its own path rather than a
    # symlink's, else under the first path in sorted order.
    targets: list[_Target] = []
    seen: dict[tuple[int, int], str] = {}
    for display in sorted(files, key=lambda p: (files[p].write_path != p, p)):
        target = files[display]
        try:
            ident = _identity(os.stat(target.write_path))
        except OSError as error:
            skipped.append(SkippedPath(display, f"cannot stat: {error.strerror}"))
            continue
        if ident in seen:
            skipped.append(SkippedPath(display, f"same file as {seen[ident]}, processed once"))
            continue
        seen[ident] = display
        targets.append(target)

    for link in dict.fromkeys(links):
        reason = _symlink_reason(link, seen, roots)
        if reason is not None:
            skipped.append(SkippedPath(link, reason))
    skipped.sort(key=lambda s: s.path)
    return targets, skipped, sorted(pruned)


def _symlink_reason(
    link: str, seen: dict[tuple[int, int], str], roots: Sequence[str]
) -> Optional[str]:
    """Why a symlink met in a walk is skipped, or None if it is no Python file or directory."""
    target = os.readlink(link)
    try:
        st = os.stat(link)
    except OSError:
        return f"dangling symlink to {target}" if link.endswith(_PY_SUFFIX) else None
    if stat.S_ISDIR(st.st_mode):
        real = os.path.realpath(link)
        inside = any(real == root or real.startswith(root + os.sep) for root in roots)
        where = "scanned under its own path" if inside else "outside the scanned paths"
        return f"symlink to directory {target} ({where}); symlinks are not followed"
    if not (link.endswith(_PY_SUFFIX) or link.endswith(_NOTEBOOK_SUFFIX)):
        return None
    ident = _identity(st)
    if ident in seen:
        return f"symlink to {target}, scanned as {seen[ident]}; symlinks are not followed"
    return (
        f"symlink to {target} (outside the scanned paths); symlinks are not followed, "
        "pass the target itself to rewrite it"
    )


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
    target: _Target,
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


class _Progress:
    """A one-line progress bar on a stream, redrawn at most every 0.1 s."""

    def __init__(self, stream: TextIO, total: int) -> None:
        self._stream = stream
        self._total = total
        self._done = 0
        self._last = 0.0

    def advance(self) -> None:
        self._done += 1
        now = time.monotonic()
        if now - self._last >= _PROGRESS_INTERVAL_S or self._done == self._total:
            self._last = now
            width = 30
            filled = width * self._done // max(self._total, 1)
            self._stream.write(
                f"\r[{'#' * filled}{'.' * (width - filled)}] {self._done}/{self._total} files"
            )
            self._stream.flush()

    def close(self) -> None:
        self._stream.write("\n")
        self._stream.flush()


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
    work: Callable[[_Target], tuple[FileReport, bool]],
    targets: Sequence[_Target],
    *,
    workers: int,
    bar: Optional[_Progress],
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
        targets, skipped, pruned = _collect(paths)
    except _UsageError as error:
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
    bar = _Progress(stream, len(targets)) if progress and targets else None
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


def _plural(n: int, one: str, many: str) -> str:
    return f"{n} {one if n == 1 else many}"


def format_summary(summary: CodemodSummary) -> str:
    """The human summary printed on stderr at the end of a run."""
    verb = "rewritten" if summary.mode == "write" else "would change"
    counts = [
        f"{_plural(summary.scanned, 'file', 'files')} scanned",
        f"{len(summary.changed)} {verb}",
        f"{summary.unchanged} unchanged",
    ]
    if summary.failed:
        counts.append(f"{len(summary.failed)} left untouched (could not be processed)")
    if summary.skipped:
        counts.append(f"{len(summary.skipped)} skipped")
    lines = [
        f"xnnfold codemod ({summary.mode}): "
        + ", ".join(counts)
        + f"; {_plural(len(summary.findings), 'finding', 'findings')}; "
        f"{_plural(len(summary.pruned_dirs), 'directory', 'directories')} pruned; "
        f"{summary.elapsed_s:.1f} s"
    ]
    for report in summary.failed:
        lines.append(f"  not processed: {report.path}: {report.reason}")
    for skip in summary.skipped:
        lines.append(f"  skipped: {skip.path}: {skip.reason}")
    return "\n".join(lines)
