"""Every model class of the installed transformers, swept for GEMMs with a computed weight.

For each public model class of ``transformers.models.*`` (read from each modeling file's
``__all__``): build it from its config (`LEVELS`: every size shrunk; the widths scaled
down together; only the counts capped; the default), random weights,
``apply_weight_norm()`` where the class offers it; feed it inputs built from its
``forward``'s signature and its config (`_inputs`: the first candidate that runs
eagerly). The rest is the shared machinery (benchmarks/_sweep): export, screen, lower the
candidates with the folding partitioner and, for the first class of each modeling file
with a computed-weight GEMM, the stock one and transformers' exporter both ways
(``--compare-all``: every class), run against eager, time interleaved.

    nice -n 10 python benchmarks/transformers_sweep.py --jobs 2 --screen-only
    nice -n 10 python benchmarks/transformers_sweep.py --jobs 2   # lower the candidates
    nice -n 10 python benchmarks/transformers_sweep.py --only UnivNetModel --fresh
    python benchmarks/transformers_sweep.py --report   # the markdown, from the JSONL

A class no config level and no candidate input runs eagerly on, or that ``torch.export``
stops on, is out of reach: its result names the model's own error.
"""

from __future__ import annotations

import ast
import contextlib
from pathlib import Path
from typing import Any, Optional

from _sweep import Built, Library, main, OutOfReach
from _sweep._lowering import gemm_counts, interleaved
from _sweep._report import row, table_head
from _sweep._results import NOT_A_MODEL
from _sweep._screen import compare, leaves
from _transformers_inputs import candidate_inputs

HERE = Path(__file__).resolve().parent
# Over this many parameters, a config level other than "shrunk" is not built.
MAX_PARAMETERS = 300_000_000

# Integer config fields, by name: the cap each is shrunk to.
_EXACT_CAPS = {
    "vocab_size": 256,
    "num_hidden_layers": 2,
    "num_layers": 2,
    "n_layer": 2,
    "n_layers": 2,
    "encoder_layers": 1,
    "decoder_layers": 1,
    "num_encoder_layers": 1,
    "num_decoder_layers": 1,
    "num_attention_heads": 2,
    "num_heads": 2,
    "n_head": 2,
    "n_heads": 2,
    "encoder_attention_heads": 2,
    "decoder_attention_heads": 2,
    "num_key_value_heads": 1,
    "head_dim": 16,
    "hidden_size": 32,
    "d_model": 32,
    "n_embd": 32,
    "embed_dim": 32,
    "dim": 32,
    "intermediate_size": 64,
    "ffn_dim": 64,
    "encoder_ffn_dim": 64,
    "decoder_ffn_dim": 64,
    "d_ff": 64,
    "n_inner": 64,
    "image_size": 64,
    "num_experts": 2,
    "n_routed_experts": 2,
    "num_local_experts": 2,
    "num_experts_per_tok": 1,
    "upsample_initial_channel": 32,
    "max_position_embeddings": 512,
}
# Suffixes of integer or integer-list fields that size channels (or group them).
_CHANNEL_SUFFIXES = (
    "_hidden_size",
    "_channels",
    "_dim",
    "_dims",
    "_dimension",
    "hidden_sizes",
    "_size_list",
    "_groups",
)
_NOT_CHANNELS = ("kernel", "stride", "patch", "pad", "dilation", "head_dim", "mel", "in_dim")
# Fields that count (layers, vocabularies, experts, positions): the only ones capped at
# the "counts" level, which keeps every width the model's code may rely on.
_COUNT_CAPS = {
    **{n: v for n, v in _EXACT_CAPS.items() if "layer" in n or "experts" in n},
    "vocab_size": 256,
    "max_position_embeddings": 512,
    # Layers that reuse an earlier layer's keys and values (Gemma 3n): none of two.
    "num_kv_shared_layers": 0,
}
# Widths the "scaled" level divides, together, by `_SCALE` (heads and counts kept, so
# every ratio and divisibility among them holds).
_WIDTHS = frozenset(
    {
        "hidden_size",
        "d_model",
        "n_embd",
        "embed_dim",
        "dim",
        "intermediate_size",
        "ffn_dim",
        "encoder_ffn_dim",
        "decoder_ffn_dim",
        "d_ff",
        "n_inner",
        "head_dim",
        "d_kv",
        "moe_intermediate_size",
        "shared_expert_intermediate_size",
        "upsample_initial_channel",
    }
)
_SCALE = 4
# Further widths the "scaled" level divides: attention's per-head sizes and low ranks
# (multi-head latent attention's ``qk_rope_head_dim``, ``kv_lora_rank``, ...).
_SCALED_SUFFIXES = ("head_dim", "_rank", "intermediate_size", "_hidden_size")
# The configs tried in turn while the class fails to build or run eagerly.
LEVELS = ("shrunk", "scaled", "counts", "default")


def _is_count(name: str, value: Any) -> bool:
    return name in _COUNT_CAPS or (
        isinstance(value, int) and ("layers" in name or name == "depth" or name.endswith("_depth"))
    )


def _level_value(level: str, name: str, value: Any) -> Any:
    """``value`` of config field ``name`` at ``level``."""
    if isinstance(value, bool) or level == "default":
        return value
    if _is_count(name, value) and isinstance(value, int):
        return min(value, _COUNT_CAPS.get(name, 2))
    if name in ("depths", "encoder_depths", "decoder_depths") and isinstance(value, (list, tuple)):
        return type(value)(min(v, 1) if isinstance(v, int) else v for v in value)
    channels = name.endswith(_CHANNEL_SUFFIXES) and not any(w in name for w in _NOT_CHANNELS)
    if level == "scaled":
        if name in _WIDTHS or channels or name.endswith(_SCALED_SUFFIXES):
            return _scaled(value)
        return value
    if level != "shrunk":
        return value
    if name in _EXACT_CAPS and isinstance(value, int):
        return min(value, _EXACT_CAPS[name])
    if channels and isinstance(value, int) and value > 32:
        return 32
    if channels and isinstance(value, (list, tuple)) and all(isinstance(v, int) for v in value):
        return type(value)(min(v, 32) for v in value)
    return value


def _scaled(value: Any) -> Any:
    if isinstance(value, int) and value % _SCALE == 0 and value >= 4 * _SCALE:
        return value // _SCALE
    if isinstance(value, (list, tuple)) and value and all(isinstance(v, int) for v in value):
        return type(value)(_scaled(v) for v in value)
    return value


def _own_backbone(config: Any) -> Any:
    """A backbone config that asks for timm (DETR and its kin take one by default) as
    transformers' ResNet with the same stages out: the other backbone the model's config
    offers, which needs no timm (timm's torchvision does not load beside CPU torch)."""
    from transformers import ResNetConfig

    indices = getattr(config, "out_indices", None) or [1, 2, 3, 4]
    return ResNetConfig(
        num_channels=getattr(config, "num_channels", 3),
        out_features=[f"stage{i}" for i in indices],
    )


# Fields some configs leave None by default, which their models need set: the value
# each gets (a config built from its class's defaults is otherwise not buildable).
_REQUIRED = {
    "vocab_size": 256,
    "mask_token_id": 1,
    "pad_token_id": 0,
    "prediction_length": 4,
    "context_length": 8,
    "decoder_hidden_size": 32,
    "decoder_depth": 1,
    "decoder_num_heads": 2,
    "n_routed_experts": 2,
    "n_shared_experts": 1,
    "num_experts_per_tok": 1,
}


def _complete(config: Any) -> None:
    """Set the fields `_REQUIRED` names that ``config`` leaves None, and a None
    ``head_dim`` to the hidden size over the heads, as the models that read it assume."""
    fields = vars(config)
    for name, value in _REQUIRED.items():
        if name in fields and fields[name] is None:
            with contextlib.suppress(Exception):
                setattr(config, name, value)
    hidden, heads = fields.get("hidden_size"), fields.get("num_attention_heads")
    if "head_dim" in fields and fields["head_dim"] is None and hidden and heads:
        with contextlib.suppress(Exception):
            config.head_dim = hidden // heads


def _fit_layer_types(config: Any) -> None:
    """A per-layer ``layer_types`` list longer than the capped layer count: each type
    kept once (a model that checks which layer types produce and use a cache needs every
    type), the layer count raised to the number of types where it is smaller."""
    types, layers = getattr(config, "layer_types", None), getattr(config, "num_hidden_layers", None)
    if not isinstance(types, list) or not isinstance(layers, int) or len(types) <= layers:
        return
    distinct = list(dict.fromkeys(types))
    count = max(layers, len(distinct))
    with contextlib.suppress(Exception):
        config.num_hidden_layers = count
        config.layer_types = distinct + distinct[-1:] * (count - len(distinct))


def _at_level(config: Any, level: str) -> Any:
    """``config`` with its fields (and its sub-configs') set for ``level``."""
    _complete(config)
    backbone = getattr(config, "backbone_config", None)
    if getattr(backbone, "model_type", None) == "timm_backbone":
        config.backbone_config = _own_backbone(backbone)
    for name, value in list(vars(config).items()):
        if name.startswith("_"):
            continue
        if hasattr(value, "to_dict") and hasattr(value, "model_type"):
            setattr(config, name, _at_level(value, level))
            continue
        new = _level_value(level, name, value)
        if new != value:
            # A property without a setter keeps its value.
            with contextlib.suppress(Exception):
                setattr(config, name, new)
    _fit_layer_types(config)
    vocab = getattr(config, "vocab_size", None)
    for name in ("pad_token_id", "bos_token_id", "eos_token_id", "decoder_start_token_id"):
        token = getattr(config, name, None)
        if isinstance(vocab, int) and isinstance(token, int) and token >= vocab:
            setattr(config, name, vocab - 1)
    if hasattr(config, "use_cache"):
        config.use_cache = False
    return config


class Transformers(Library):
    """transformers' public model classes; the group of each is its modeling file."""

    title = "transformers' model classes"
    results = HERE / "transformers_sweep_results.jsonl"
    table = HERE / "transformers_sweep_results.md"

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

    def build(self, group: str, name: str) -> Built:
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
        for level in LEVELS:
            stage = "build"
            try:
                torch.manual_seed(0)
                config = _at_level(cls.config_class(), level)
                if level != "shrunk":
                    with torch.device("meta"):
                        size = sum(p.numel() for p in cls(config).parameters())
                    if size > MAX_PARAMETERS:
                        failed.append((stage, f"{level} config: {size:,} parameters"))
                        continue
                model = cls(config).float().eval()
                facts: dict[str, Any] = {"config": level}
                languages = getattr(config, "languages", None)
                if hasattr(model, "set_default_language") and languages:
                    # A model with per-language adapters (X-MOD) runs one at a time.
                    model.set_default_language(languages[0])
                if hasattr(model, "apply_weight_norm"):
                    model.apply_weight_norm()
                    facts["weight_norm_applied"] = True
                stage = "inputs"
                first = ""
                for candidate in candidate_inputs(model):
                    try:
                        with torch.no_grad():
                            output = model(**candidate)
                    except Exception as error:
                        first = first or f"{type(error).__name__}: {error}"
                        continue
                    return Built(model, candidate, leaves(output), facts)
                failed.append((stage, first or "no candidate inputs"))
            except Exception as error:
                failed.append((stage, f"{type(error).__name__}: {error}"))
        order = ("build", "inputs")
        stage, reason = max(failed, key=lambda f: (order.index(f[0]), -failed.index(f)))
        raise OutOfReach(stage, reason, tried=[f"{s}: {r}" for s, r in failed])

    def versions(self) -> str:
        import torch
        import transformers

        from xnnfold._releases import installed_version

        return (
            f"transformers {transformers.__version__}, torch {torch.__version__.split('+')[0]}, "
            f"executorch {installed_version('executorch')}"
        )

    def method(self) -> str:
        return (
            "Configs tried in turn (every size shrunk; the widths divided by "
            f"{_SCALE} together; only the counts capped; the default; all but the first up to "
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


if __name__ == "__main__":
    raise SystemExit(main(Transformers()))
