"""What a codemod run reports: one `FileReport` per file processed, the `SkippedPath`s,
the run's `CodemodSummary` (its exit code and JSON form), the progress bar on a TTY
(`Progress`), and the human summary printed at the end (`format_summary`)."""

from __future__ import annotations

import dataclasses
import time
from typing import Final, Optional, TextIO

from xnnfold._exit_codes import EXIT_FAILED, EXIT_OK
from xnnfold.rewriter.codemod._api import Finding

# Show a progress bar on a TTY only for trees at least this large (--progress forces it).
PROGRESS_MIN_FILES: Final = 200
_PROGRESS_INTERVAL_S: Final = 0.1

STATUS_UNCHANGED: Final = "unchanged"
STATUS_REWRITTEN: Final = "rewritten"
STATUS_WOULD_REWRITE: Final = "would_rewrite"
STATUS_UNPARSEABLE: Final = "unparseable"
STATUS_ERROR: Final = "error"


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


class Progress:
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
