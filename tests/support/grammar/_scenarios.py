"""The scenarios a program is drawn from (a chain, addmm, a shared pool, several methods,
a tied embedding, a long chain, ``.item()`` scalars), and `generate_program`, which
redraws until a description builds with finite values."""

from __future__ import annotations

import math
import random
from dataclasses import replace
from typing import Union

from tests.support.grammar._build import build_program
from tests.support.grammar._constants import FC_KINDS, GEMM_KINDS, GenOptions, SHARED_MIN_NUMEL
from tests.support.grammar._description import (
    Chain,
    DegenerateProgram,
    Expr,
    ItemScale,
    Method,
    Narrow,
    Program,
    Reshape,
    ScalarOp,
    Src,
    Transpose,
    Unary,
)
from tests.support.grammar._evaluate import expr_shape
from tests.support.grammar._generator import _Gen
from tests.support.grammar._walk import program_exprs, sources_of


def _side_use(gen: _Gen, names: list[str]) -> Expr:
    src = Src(gen.rng.choice(names))
    return Unary(gen.rng.choice(("abs", "neg", "sin")), src) if gen.rng.random() < 0.5 else src


def _weight_sources(method: Method) -> list[str]:
    # A module call's sources live in its module, out of reach of other reads.
    return sorted(
        {n for layer in method.layers if not layer.module for n in sources_of(layer.weight)}
    )


def _scenario(gen: _Gen, scenario: str) -> tuple[Method, ...]:
    rng = gen.rng
    if scenario == "chain":
        gen.reuse = 0.15 if rng.random() < 0.3 else 0.0
        method = gen.chain_method("forward")
        names: Union[list[str], tuple[str, ...]]  # "pool" and "multi" rebind it to a tuple
        names = _weight_sources(method)
        if names and rng.random() < 0.15:
            method = replace(method, side=(_side_use(gen, names),))
        return (method,)
    if scenario == "addmm":
        return (gen.chain_method("forward", kinds=["addmm"] * rng.randint(1, 2)),)
    if scenario == "item":
        method = gen.chain_method("forward", kinds=[rng.choice(GEMM_KINDS)])
        layer = method.layers[0]
        if layer.module:
            layer = replace(layer, module=False)
        weight: Expr = ItemScale(layer.weight, gen.scalar_source())
        bias = ItemScale(layer.bias, gen.scalar_source()) if layer.bias is not None else None
        return (replace(method, layers=(replace(layer, weight=weight, bias=bias),)),)
    if scenario == "long_chain":
        method = gen.chain_method("forward", kinds=[rng.choice(GEMM_KINDS)], dynamic=False)
        layer = method.layers[0]
        lo, hi = gen.options.min_long_chain_steps, gen.options.max_chain_steps
        steps = int(math.exp(rng.uniform(math.log(lo), math.log(max(lo, hi)))))
        shape = expr_shape(layer.weight, {s.name: s for s in gen.sources})
        weight = Chain(gen.source(shape, kind="param", dtype="float32", param="none"), steps)
        return (replace(method, layers=(replace(layer, weight=weight, module=False),)),)
    if scenario in ("pool", "multi"):
        # One large flat source cut into several GEMM weights, in one or two methods; now
        # and then also read by a non-GEMM op, which must stop every fold from it.
        dim = rng.choice((16, 32))
        pool = gen.source(
            (SHARED_MIN_NUMEL * rng.choice((1, 2)),), kind="param", dtype="float32", param="none"
        )
        names = ("forward", "other") if scenario == "multi" else ("forward",)
        methods = []
        offset = 0
        for name in names:
            kinds = [rng.choice(FC_KINDS) for _ in range(rng.randint(1, 2))]
            method = gen.chain_method(name, kinds=kinds, cin=dim)
            layers = []
            for layer in method.layers:
                shape = expr_shape(layer.weight, {s.name: s for s in gen.sources})
                n = math.prod(shape)
                if rng.random() < 0.3 or offset + n > math.prod(pool_shape(gen, pool)):
                    offset = 0  # pieces may overlap: still foldable when sizes allow
                piece: Expr = Reshape(Narrow("narrow", pool, 0, offset, n), shape)
                offset += n
                if rng.random() < 0.5:
                    piece = ScalarOp("mul", piece, rng.choice((0.5, 2.0)))
                layers.append(replace(layer, weight=piece, module=False))
            methods.append(replace(method, layers=tuple(layers)))
        if rng.random() < 0.3:
            k = rng.randrange(len(methods))
            methods[k] = replace(methods[k], side=(pool,))
        return tuple(methods)
    if scenario == "tied":
        vocab, dim = rng.choice(((64, 16), (128, 16), (64, 32)))
        table = gen.source((vocab, dim), kind="param", dtype="float32", param="none")
        length = rng.randint(2, 6)
        dynamic = rng.random() < 0.2
        # A dynamic batch needs an example batch of at least 2 (export specializes 1).
        embed = Method(
            "embed",
            "embed",
            dim,
            (length,),
            rng.randint(2, 3) if dynamic else rng.randint(1, 2),
            table=table,
            dynamic=dynamic,
        )
        kind = rng.choice(("matmul_t", "linear", "mm", "addmm", "matmul"))
        logits = gen.chain_method("logits", kinds=[kind], cin=dim)
        layer = logits.layers[0]
        weight = table if kind in ("matmul_t", "linear") else Transpose(table, -1, -1)
        if rng.random() < 0.4:
            weight = ScalarOp("mul", weight, rng.choice((0.5, 2.0)))
        layer = replace(
            layer,
            weight=weight,
            out_ch=vocab,
            module=False,
            bias=None
            if layer.kind != "addmm"
            else Src(
                gen.source(
                    {"N": (vocab,), "1N": (1, vocab), "scalar": ()}.get(layer.bias_shape, (vocab,)),
                    kind="param",
                    dtype="float32",
                    param="none",
                ).name
            ),
            bias_shape=layer.bias_shape if layer.bias_shape in ("N", "1N", "scalar") else "N",
        )
        logits = replace(logits, layers=(layer,))
        if rng.random() < 0.25:
            # Both uses in one method.
            return (replace(logits, side=(table,)),)
        return (embed, logits) if rng.random() < 0.5 else (logits, embed)
    raise ValueError(f"unknown scenario {scenario!r}")


def pool_shape(gen: _Gen, pool: Src) -> tuple[int, ...]:
    return next(s.shape for s in gen.sources if s.name == pool.name)


def _draw(seed: int, options: GenOptions) -> Program:
    rng = random.Random(seed)
    gen = _Gen(rng, options)
    names = [s for s, _ in options.scenarios]
    weights = [w for _, w in options.scenarios]
    scenario = rng.choices(names, weights)[0]
    methods = _scenario(gen, scenario)
    used = {
        n
        for m in methods
        for _, _, _, e in program_exprs(Program(0, "", (), (m,)))
        for n in sources_of(e)
    }
    sources = tuple(s for s in gen.sources if s.name in used)
    return Program(seed, scenario, sources, methods)


def _module_sources_shared(program: Program) -> bool:
    """A source a module call holds (its own parameter) read by another expression too:
    the builder cannot express that, so such a draw is replaced."""
    owned: set[str] = set()
    for method in program.methods:
        for layer in method.layers:
            if layer.module:
                owned |= sources_of(layer.weight) | (
                    sources_of(layer.bias) if layer.bias else set()
                )
    readers: dict[str, int] = {}
    for _, _, _, e in program_exprs(program):
        for name in sources_of(e) & owned:
            readers[name] = readers.get(name, 0) + 1
    return any(count > 1 for count in readers.values())


# GenOptions is a frozen dataclass: a shared default is safe.
def generate_program(seed: int, options: GenOptions = GenOptions()) -> Program:  # noqa: B008
    """The program drawn for ``seed`` (deterministic). A draw whose values are not finite
    is replaced by the next draw of the same seed's stream."""
    for attempt in range(100):
        program = _draw(seed * 1000 + attempt, options)
        program = replace(program, seed=seed * 1000 + attempt)
        if _module_sources_shared(program):
            continue
        try:
            build_program(program)
        except (DegenerateProgram, RuntimeError, ValueError, IndexError, KeyError):
            # Not finite, or a draw the builder cannot express (a view of a strided
            # tensor): the next draw of the same stream.
            continue
        return program
    raise DegenerateProgram(f"no finite program for seed {seed}")
