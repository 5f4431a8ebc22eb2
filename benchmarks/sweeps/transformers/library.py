"""Every model class of the installed transformers, swept for GEMMs with a computed weight.

For each public model class of ``transformers.models.*`` (read from each modeling file's
``__all__``): build it from its config (`config_levels.LEVELS`: every size shrunk; the
widths scaled down together; only the counts capped; the default), random weights,
``apply_weight_norm()`` where the class offers it; feed it inputs built from its
``forward``'s signature and its config (`_inputs`: the first candidate that runs
eagerly). The rest is the shared engine (benchmarks/sweeps/engine): export, screen, lower the
candidates with the folding partitioner and, for the first class of each modeling file
with a computed-weight GEMM, the stock one and transformers' exporter both ways
(``--compare-all``: every class), run against eager, time interleaved.

    nice -n 10 python -m benchmarks.sweeps.transformers --jobs 2 --screen-only
    nice -n 10 python -m benchmarks.sweeps.transformers --jobs 2   # lower the candidates
    nice -n 10 python -m benchmarks.sweeps.transformers --only UnivNetModel --fresh
    python -m benchmarks.sweeps.transformers --report   # the markdown, from the JSONL

A class no config level and no candidate input runs eagerly on, or that ``torch.export``
stops on, is out of reach: its result names the model's own error.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any, Optional

from benchmarks.sweeps.engine import Built, Library, OutOfReach
from benchmarks.sweeps.engine.lowering import gemm_counts, interleaved
from benchmarks.sweeps.engine.results import NOT_A_MODEL
from benchmarks.sweeps.engine.screen import compare, leaves
from benchmarks.sweeps.engine.table import row, table_head
from benchmarks.sweeps.transformers.class_fields import default_config, keep_class_fields
from benchmarks.sweeps.transformers.config_levels import at_level, LEVELS, SCALE
from benchmarks.sweeps.transformers.constant_arguments import bound, constants, object_arguments
from benchmarks.sweeps.transformers.inputs import candidate_inputs
from benchmarks.sweeps.transformers.unset_fields import construct

HERE = Path(__file__).resolve().parent
# Over this many parameters, a config level other than "shrunk" is not built.
MAX_PARAMETERS = 300_000_000


class Transformers(Library):
    """transformers' public model classes; the group of each is its modeling file."""

    title = "transformers' model classes"
    results = HERE / "results.jsonl"
    table = HERE / "results.md"
    command = "benchmarks.sweeps.transformers"
    build_facts = ("config", "derived")

    def discover(self) -> list[tuple[str, str]]:
        """(module, class name) of every public class of every modeling file, without
        importing transformers' models (the worker checks it is a model class)."""
        import transformers

        root = Path(transformers.__file__).parent / "models"
        found = []
        for path in sorted(root.glob("*/modeling_*.py")):
            tree = ast.parse(path.read_text())
            for node in tree.body:
                if not isinstance(node, ast.Assign) or not any(
                    isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets
                ):
                    continue
                try:
                    names = ast.literal_eval(node.value)
                except ValueError:
                    continue
                module = f"transformers.models.{path.parent.name}.{path.stem}"
                found += [
                    (module, name)
                    for name in names
                    if not name.endswith("PreTrainedModel") and not name.isupper()
                ]
        return found

    def build(self, group: str, name: str, *, facts: Optional[dict[str, Any]] = None) -> Built:
        import importlib

        import torch
        from transformers import PreTrainedModel

        try:
            cls = getattr(importlib.import_module(group), name, None)
        except Exception as error:
            raise OutOfReach("import", f"{type(error).__name__}: {error}") from error
        if not (isinstance(cls, type) and issubclass(cls, PreTrainedModel)):
            raise OutOfReach(NOT_A_MODEL, "")
        if cls.config_class is None:
            raise OutOfReach("build", "no config class")
        if cls.forward is torch.nn.Module.forward:
            raise OutOfReach("inputs", f"{name} defines no forward")
        # Why each level failed; the furthest stage's first error is the reason.
        failed: list[tuple[str, str]] = []
        # Each level, as given and derived; an earlier line's own only, where given.
        tries = [(level, derive) for level in LEVELS for derive in (False, True)]
        if facts and "config" in facts:
            tries = [(facts["config"], bool(facts.get("derived", False)))]
        for level, derive in tries:
            if derive and level == "default":
                continue
            stage = "build"
            try:
                torch.manual_seed(0)
                config = at_level(default_config(cls), level, derive=derive)
                keep_class_fields(cls, config)

                def shrink(sub: Any, level: str = level, derive: bool = derive) -> Any:
                    return at_level(sub, level, derive=derive)

                if level != "shrunk":
                    with torch.device("meta"):
                        size = sum(p.numel() for p in construct(cls, config, shrink).parameters())
                    if size > MAX_PARAMETERS:
                        failed.append((stage, f"{level} config: {size:,} parameters"))
                        continue
                model = construct(cls, config, shrink).float().eval()
                facts: dict[str, Any] = {"config": level}
                if derive:
                    facts["derived"] = True
                languages = getattr(config, "languages", None)
                if hasattr(model, "set_default_language") and languages:
                    # A model with per-language adapters (X-MOD) runs one at a time.
                    model.set_default_language(languages[0])
                if hasattr(model, "apply_weight_norm"):
                    model.apply_weight_norm()
                    facts["weight_norm_applied"] = True
                stage = "inputs"
                first = ""
                fixed = constants(model)
                runner = bound(model, fixed) if fixed else model
                if fixed:
                    facts["constants"] = fixed
                for candidate in candidate_inputs(model):
                    try:
                        with torch.no_grad():
                            output = runner(**candidate)
                    except Exception as error:
                        first = first or f"{type(error).__name__}: {error}"
                        continue
                    return Built(runner, candidate, leaves(output), facts)
                objects = object_arguments(model, first)
                if objects:
                    first = (
                        f"needs {', '.join(objects)}: not a tensor (another model's state "
                        f"or a structure of its own), which the sweep does not build; {first}"
                    )
                failed.append((stage, first or "no candidate inputs"))
            except Exception as error:
                failed.append((stage, f"{type(error).__name__}: {error}"))
        order = ("build", "inputs")
        stage, reason = max(failed, key=lambda f: (order.index(f[0]), -failed.index(f)))
        raise OutOfReach(stage, reason, tried=[f"{s}: {r}" for s, r in failed])

    def versions(self) -> str:
        """transformers', torch's and executorch's versions; torchvision's and timm's too
        where installed (the classes that wrap timm build only beside them)."""
        import torch
        import transformers

        found = [f"transformers {transformers.__version__}", f"torch {torch.__version__}"]
        found += [
            f"{package} {version}"
            for package in ("torchvision", "timm", "executorch")
            for version in [_installed_version(package)]
            if version is not None
        ]
        return ", ".join(part.split("+")[0] for part in found)

    def method(self) -> str:
        return (
            "Configs tried in turn (every size shrunk; the widths divided by "
            f"{SCALE} together; only the counts capped; the default; all but the first up to "
            f"{MAX_PARAMETERS:,} parameters), random weights, inputs from `forward`'s "
            "signature and the config."
        )

    def extra_path(self, built: Built, expected: list[Any]) -> Optional[dict[str, Any]]:
        """transformers' exporter, stock and with xnnfold: GEMMs, bytes, diff, latency."""
        model, inputs = built.model, built.inputs
        try:
            from transformers.exporters import ExecutorchConfig
            from transformers.exporters.exporter_executorch import ExecutorchExporter

            from xnnfold.integrations.transformers import export
        except ImportError as error:
            return {"error": f"{error}"}
        found: dict[str, Any] = {}
        runners: dict[str, Any] = {}
        for label, run in (
            (
                "stock",
                lambda: ExecutorchExporter().export(
                    model, dict(inputs), ExecutorchConfig(backend="xnnpack")
                ),
            ),
            ("xnnfold", lambda: export(model, dict(inputs))),
        ):
            try:
                exported = run()
                entry: dict[str, Any] = {
                    **gemm_counts(exported.program),
                    "bytes": len(exported.program.buffer),
                }
                entry["diff"], entry["scale"] = compare(leaves(exported(**inputs)), expected)
                runners[label] = exported
            except Exception as error:
                entry = {"error": f"{type(error).__name__}: {str(error).strip()[:200]}"}
            found[label] = entry
        calls = {label: lambda run=run: run(**inputs) for label, run in runners.items()}
        for label, ms in interleaved(calls).items():
            found[label]["ms"] = ms
        return found

    def extra_report(self, found: list[dict[str, Any]]) -> list[str]:
        lines = [
            "",
            "## Through transformers' exporter",
            "",
            '`ExecutorchExporter().export(model, inputs, ExecutorchConfig(backend="xnnpack"))` '
            "(stock) and `xnnfold.integrations.transformers.export` (xnnfold), run through the "
            "exporter's runner: the classes compared with stock (the exporter lowers with the "
            "same partitioners; its lowering time is not measured).",
            "",
            *table_head(self.noun),
        ]
        return lines + [row(r["class"], r["exporter"], []) for r in found if "exporter" in r]


def _installed_version(package: str) -> str | None:
    """``package``'s installed version, or None where it is not installed."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(package)
    except PackageNotFoundError:
        return None
