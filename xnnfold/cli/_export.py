"""``xnnfold export MODULE:CALLABLE -o model.pte [--check]``: lower a model without a script.

Lowering a model with xnnfold takes a script (prepare, export, lower with the folding
partitioner, emit, write) and seeing which GEMMs stayed outside the delegate takes another
call. The command does both from a callable that builds the model: ``CALLABLE()`` returns
``(model, example_inputs)`` or ``(model, example_inputs, dynamic_shapes)``, the command
lowers it like `xnnfold.lower`, writes the `.pte`, and prints the `xnnfold.explain` table and
the size. ``--check`` makes a GEMM left outside a delegate an error, for CI.

The command writes the files itself, so it stores a tied table once by default
(``--tie-tables``): in ``model.ptd`` beside ``model.pte``, which it names as the data the
``.pte`` loads with. ``--no-tie-tables`` writes one self-contained ``.pte``. Files are
written by `xnnfold.save`: atomically, with the mode ``open(path, "wb")`` would give.

``MODULE`` is a dotted module importable from the current directory or a path to a ``.py``
file. A bad ``MODULE:CALLABLE`` or a callable that returns something else exits with code 2
and a one-line message; an exception raised by the user's own code prints its traceback from
the user's first frame, then the message.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import importlib.util
import inspect
import logging
import os
import sys
import traceback
from pathlib import Path
from types import ModuleType, TracebackType
from typing import Any, Final, Iterator, Optional, Sequence

from xnnfold._exit_codes import EXIT_FAILED, EXIT_OK, EXIT_USAGE

__all__ = ["add_export_parser", "load_spec", "run_export"]

_PREFIX: Final = "xnnfold export"
_RETURN_SHAPE: Final = "(model, example_inputs) or (model, example_inputs, dynamic_shapes)"
# Frames of the import machinery and of this module, skipped when showing a user error.
_OWN_FRAMES: Final = (
    __file__,
    importlib.__file__,
    "<frozen importlib._bootstrap>",
    "<frozen importlib._bootstrap_external>",
)
# Private module name for a .py file whose stem names an already imported, different module.
_FILE_MODULE_PREFIX: Final = "_xnnfold_export_"


class UsageError(Exception):
    """A bad ``MODULE:CALLABLE``, or a callable that returned the wrong thing (exit 2)."""


class UserCodeError(Exception):
    """The user's module or callable raised; ``__cause__`` is their exception (exit 2)."""


def add_export_parser(
    subparsers: argparse._SubParsersAction[Any],
    *,
    parents: Sequence[argparse.ArgumentParser] = (),
) -> None:
    """Add the ``export`` subcommand to the ``xnnfold`` parser."""
    parser = subparsers.add_parser(
        "export",
        parents=list(parents),
        help="lower MODULE:CALLABLE's model with the folding partitioner, write a .pte, "
        "print which GEMMs were delegated",
        description="Call CALLABLE() from MODULE, which returns (model, example_inputs) or "
        "(model, example_inputs, dynamic_shapes); prepare, export and lower the model with "
        "XnnpackFoldingPartitioner; write the .pte; print one row per GEMM (delegated, "
        "folded, why not) and the size.",
    )
    parser.add_argument(
        "spec",
        metavar="MODULE:CALLABLE",
        help="a dotted module importable from the current directory (models.vocoder:build) "
        "or a path to a .py file (path/to/model.py:build)",
    )
    parser.add_argument(
        "-o",
        "--output",
        required=True,
        type=Path,
        metavar="PTE",
        help="the .pte to write",
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help="exit with status 1, writing nothing, if any GEMM is left outside a delegate",
    )
    parser.add_argument(
        "--tie-tables",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="store a tied table (an embedding shared with a delegated lm_head) once, in a "
        ".ptd written beside the .pte and named after it, which the .pte then loads with "
        "(default: on; --no-tie-tables keeps the .pte self-contained, the table stored twice)",
    )
    parser.set_defaults(func=run_export)


def _split_spec(spec: str) -> tuple[str, str]:
    module, sep, attr = spec.rpartition(":")
    if not sep or not module or not all(p.isidentifier() for p in attr.split(".")):
        raise UsageError(
            f"expected MODULE:CALLABLE (e.g. models.vocoder:build or path/to/model.py:build), "
            f"got {spec!r}"
        )
    return module, attr


def _is_path(module: str) -> bool:
    return module.endswith(".py") or "/" in module or os.sep in module


@contextlib.contextmanager
def _on_sys_path(entry: str) -> Iterator[None]:
    """``entry`` first on ``sys.path`` while the command runs (the callable may import late)."""
    if entry in sys.path:
        yield
        return
    sys.path.insert(0, entry)
    try:
        yield
    finally:
        with contextlib.suppress(ValueError):
            sys.path.remove(entry)


def _import_file(path: Path) -> ModuleType:
    if not path.is_file():
        raise UsageError(f"no such file: {str(path)!r}")
    name = path.stem
    existing = sys.modules.get(name)
    if existing is not None and getattr(existing, "__file__", None) != str(path):
        name = _FILE_MODULE_PREFIX + name  # never shadow an imported module (torch.py, ...)
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise UsageError(f"cannot load {str(path)!r} as a Python module")
    module = importlib.util.module_from_spec(spec)
    # Registered before running, as `import` does: dataclasses and pickling look it up.
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException as error:
        sys.modules.pop(name, None)
        raise UserCodeError(f"importing {str(path)!r} raised") from error
    return module


def _import_dotted(name: str) -> ModuleType:
    if not all(part.isidentifier() for part in name.split(".")):
        raise UsageError(f"{name!r} is neither a dotted module name nor a path to a .py file")
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as error:
        missing = error.name or ""
        if name == missing or name.startswith(missing + "."):
            raise UsageError(
                f"cannot import module {name!r}: {error} (looked in the current directory "
                f"{os.getcwd()} and on sys.path)"
            ) from None
        raise UserCodeError(f"importing {name!r} raised") from error
    except Exception as error:
        raise UserCodeError(f"importing {name!r} raised") from error


def _resolve(module: ModuleType, attr: str, spec: str) -> Any:
    value: Any = module
    for part in attr.split("."):
        if not hasattr(value, part):
            own = sorted(
                n
                for n, v in vars(module).items()
                if callable(v)
                and not n.startswith("_")
                and getattr(v, "__module__", None) == module.__name__
            )
            raise UsageError(
                f"{spec!r}: {module.__name__!r} has no attribute {attr!r}; callables it "
                f"defines: {', '.join(own) or 'none'}"
            )
        value = getattr(value, part)
    if not callable(value):
        raise UsageError(
            f"{spec!r}: {attr!r} is a {type(value).__name__}, not a callable returning "
            f"{_RETURN_SHAPE}"
        )
    return value


def _describe(value: Any) -> str:
    if isinstance(value, tuple):
        return f"a tuple of {len(value)}: ({', '.join(type(v).__name__ for v in value)})"
    return f"a {type(value).__name__}"


def _call(factory: Any, spec: str) -> Any:
    with contextlib.suppress(TypeError, ValueError):
        signature = inspect.signature(factory)
        try:
            signature.bind()
        except TypeError:
            raise UsageError(
                f"{spec!r} takes required arguments {signature}; xnnfold export calls it with none"
            ) from None
    try:
        return factory()
    except Exception as error:
        raise UserCodeError(f"calling {spec!r} raised") from error


def load_spec(spec: str) -> tuple[Any, tuple[Any, ...], Optional[Any]]:
    """Import ``MODULE``, call ``CALLABLE()`` and check what it returned.

    ``MODULE``'s directory (a ``.py`` path) or the current directory (a dotted name) must
    already be on ``sys.path``: `run_export` puts it there.

    Returns:
        ``(model, example_inputs, dynamic_shapes)``, the last None when not returned.

    Raises:
        UsageError: bad spec, missing module, file or attribute, or a wrong return value.
        UserCodeError: the module or the callable raised.
    """
    import torch
    from torch import nn

    module_name, attr = _split_spec(spec)
    module = (
        _import_file(Path(module_name).expanduser().resolve())
        if _is_path(module_name)
        else _import_dotted(module_name)
    )
    result = _call(_resolve(module, attr, spec), spec)
    if not isinstance(result, tuple) or len(result) not in (2, 3):
        raise UsageError(f"{spec}() must return {_RETURN_SHAPE}, got {_describe(result)}")
    model, example_inputs = result[0], result[1]
    dynamic_shapes = result[2] if len(result) == 3 else None
    if not isinstance(model, nn.Module):
        raise UsageError(
            f"{spec}() returned a {type(model).__name__} as the model; expected a "
            "torch.nn.Module first in " + _RETURN_SHAPE
        )
    if not isinstance(example_inputs, tuple):
        hint = (
            "; for one tensor x return (model, (x,))"
            if isinstance(example_inputs, (torch.Tensor, list))
            else ""
        )
        raise UsageError(
            f"{spec}() returned example_inputs of type {type(example_inputs).__name__}; "
            f"expected a tuple of positional inputs{hint}"
        )
    return model, example_inputs, dynamic_shapes


def _user_traceback(error: BaseException) -> Optional[TracebackType]:
    """``error``'s traceback from the first frame outside importlib and this module."""
    tb = error.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename in _OWN_FRAMES:
        tb = tb.tb_next
    return tb or error.__traceback__


def _fail(message: str, code: int = EXIT_USAGE) -> int:
    print(f"{_PREFIX}: error: {message}", file=sys.stderr)
    return code


def run_export(args: argparse.Namespace) -> int:
    """Run ``xnnfold export`` with parsed ``args``; returns the exit status."""
    output: Path = args.output
    if output.is_dir():
        return _fail(f"-o {str(output)!r} is a directory; name the .pte file to write")
    if not output.parent.resolve().is_dir():
        return _fail(f"-o {str(output)!r}: directory {str(output.parent)!r} does not exist")
    try:
        module_name, _ = _split_spec(args.spec)
    except UsageError as error:
        return _fail(str(error))
    entry = (
        str(Path(module_name).expanduser().resolve().parent)
        if _is_path(module_name)
        else os.getcwd()
    )
    with _on_sys_path(entry):
        try:
            model, example_inputs, dynamic_shapes = load_spec(args.spec)
        except UsageError as error:
            return _fail(str(error))
        except UserCodeError as error:
            cause = error.__cause__
            assert cause is not None
            traceback.print_exception(type(cause), cause, _user_traceback(cause))
            return _fail(f"{error} {type(cause).__name__}: {cause}")
        return _lower_and_write(model, example_inputs, dynamic_shapes, args)


class _DropTiedTableWarning(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        from xnnfold.passes.partition._tied_tagging import TIED_TABLE_WARNING

        return record.msg is not TIED_TABLE_WARNING


@contextlib.contextmanager
def _without_tied_table_warning() -> Iterator[None]:
    """Leave out the partitioner's advice to write the ``.ptd`` while the command, which
    writes it, lowers."""
    from xnnfold.passes.partition._tied_tagging import logger

    drop = _DropTiedTableWarning()
    logger.addFilter(drop)
    try:
        yield
    finally:
        logger.removeFilter(drop)


def _lower_and_write(
    model: Any,
    example_inputs: tuple[Any, ...],
    dynamic_shapes: Optional[Any],
    args: argparse.Namespace,
) -> int:
    from xnnfold.lowering._lower import lower
    from xnnfold.lowering._save import save
    from xnnfold.passes.report._explain import explain
    from xnnfold.passes.report._summary import summarize
    from xnnfold.testing import _outside_lines

    if model.training:
        # An exported program is for inference; spectral_norm refuses training mode outright.
        print(
            f"{_PREFIX}: note: the model was in training mode; calling .eval()",
            file=sys.stderr,
        )
        model.eval()
    with _without_tied_table_warning():
        # This command writes the data file itself and says so below.
        edge = lower(
            model, example_inputs, dynamic_shapes=dynamic_shapes, tie_tables=args.tie_tables
        )
    report = explain(edge)
    summary = summarize(edge)
    print(report.table())
    print()
    outside = len(report.outside)
    if outside and args.check:
        lines = [*_outside_lines(report), f"{str(args.output)!r} not written."]
        return _fail("--check failed: " + "\n".join(lines), EXIT_FAILED)
    try:
        pte, *data = save(edge.to_executorch(), args.output)
    except OSError as error:
        return _fail(f"cannot write {str(args.output)!r}: {error}")
    delegated = sum(1 for row in report.rows if row.delegated)
    folded = sum(1 for row in report.rows if row.folded)
    print(
        f"wrote {pte}: {pte.stat().st_size:,} bytes; GEMMs delegated: {delegated} of "
        f"{len(report.rows)} ({folded} with computed weights folded); "
        f"delegates: {summary.delegates}; "
        f"ops outside delegates: {summary.outside_ops_text()}"
    )
    for path in data:
        # A tied table, stored once beside the .pte (docs/tied-tables.md).
        print(
            f"wrote {path}: {path.stat().st_size:,} bytes, the external data {pte.name} "
            f"loads with (data_path={str(path)!r}); keep the two files together"
        )
    if outside:
        print(
            f"{_PREFIX}: warning: {outside} GEMM(s) left outside a delegate (see the "
            "table); --check makes this an error",
            file=sys.stderr,
        )
    return EXIT_OK
