"""The model-level checks of ``conform-model``: one table (``model_checks()``) of named checks, each
under one of the suite's categories, run on a model under test and returning the report's rows
(``_core.Result``).

Every judgement is the C++ core's: a golden by ``gemma4_conform.judge`` (the calibrated rule of
golden/tolerance.h, don't-care positions included), one run against another by
``_core.compare_runs`` (the rule the suite's multithreaded_recompute uses: fp32 max-abs <= 1e-4 x
max|plain| and cosine >= 0.99999; bf16/f16 the FlashAttention rule with the plain run's own error
against the fp32 run as the baseline). Why each check exists: reference/GEMMA4.md, "Known failure
modes"; the bugs each one caught: README, "Judging a whole model".
"""
from __future__ import annotations

import dataclasses
import gc as python_gc
import threading
from pathlib import Path
from typing import Callable

import torch

from . import _core, judge, read_golden
from .model_memory import measure_flatness
from .model_under_test import ModelError, ModelUnderTest, NotSupported, StepOptions, accepts, one_line, run_step

# The rows and categories are the suite's (conformance/report.h): a check returns _core.Result rows
# (case, status, metric, value, bound, baseline, detail); the runner gives them the check's test and
# category.
Category, Result, Status = _core.Category, _core.Result, _core.Status


@dataclasses.dataclass
class Outcome:
    rows: list
    notes: list = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class ModelCheck:
    test: str                                  # "<group>/<name>": what --filter and JUnit name
    category: Category                         # the suite's category it belongs to (model_checks())
    run: Callable[["Context"], Outcome]


@dataclasses.dataclass
class Context:
    model: ModelUnderTest
    steps: int                                  # memory_flatness steps
    _plain: dict = dataclasses.field(default_factory=dict)
    _truth: dict = dataclasses.field(default_factory=dict)

    def plain(self, golden, weights=None, key="golden"):
        """The golden's plain training step (no checkpointing, calling thread), once per process."""
        if (golden.name, key) not in self._plain:
            loaded = self.model.load(golden.config, weights or golden.weights)
            self._plain[(golden.name, key)] = run_step(loaded, golden.inputs, self.model.device)
        return self._plain[(golden.name, key)]

    def truth(self, golden, weights=None, key="golden") -> dict:
        """bf16/f16: the same module in fp32 with the weights widened (the rule's truth); f32: none."""
        if self.model.dtype == "f32":
            return {}
        if (golden.name, key) not in self._truth:
            wide = {n: w.float() for n, w in (weights or golden.weights).items()}
            loaded = self.model.load(golden.config, wide, dtype="f32")
            self._truth[(golden.name, key)] = run_step(loaded, golden.inputs, self.model.device).tensors
        return self._truth[(golden.name, key)]


# --- turning judgements into rows -------------------------------------------------------------


def _golden_rows(verdict) -> Outcome:
    """A golden's verdict (gemma4_conform.judge) as the check's rows: its report (the one report's
    JSON, a row per dataset named by its test, the calibrated rule's metric, bound and both errors)
    with each dataset as the case. Datasets not checked (intermediates the module does not return;
    gradients of a forward-only judgement) are a note, not a row."""
    rows, not_checked = [], []
    for run in verdict.to_dict()["runs"]:
        for row in map(Result.from_dict, run["results"]):
            if row.status == Status.NOT_SUPPORTED:
                not_checked.append(row.test)
                continue
            row.case, row.test, row.category = row.test, "", None
            rows.append(row)
    notes = [f"{len(not_checked)} golden intermediates not checked (the module does not return them): "
             + ", ".join(not_checked[:3]) + (" ..." if len(not_checked) > 3 else "")] if not_checked else []
    return Outcome(rows, notes)


def _compare(candidate: dict, reference: dict, truth: dict, judged: dict, dtype: str, label: str = "") -> list:
    names = [n for n in reference if n in ("outputs/loss", "outputs/logits") or n.startswith("grads/")]
    pick = lambda d: {n: d[n] for n in names if n in d}  # noqa: E731
    rows = _core.compare_runs(pick(candidate), pick(reference), pick(truth), judged, dtype, False)
    for r in rows:
        r.case = label + r.case
    return rows


# --- the checks --------------------------------------------------------------------------------


def check_golden(golden) -> Callable[[Context], Outcome]:
    def run(ctx: Context) -> Outcome:
        step = ctx.plain(golden)
        outcome = _golden_rows(judge(golden, step.tensors))
        outcome.notes[:0] = step.notes
        return outcome
    return run


def check_finite_grads(golden) -> Callable[[Context], Outcome]:
    def run(ctx: Context) -> Outcome:
        step = ctx.plain(golden)
        loss = step.tensors["outputs/loss"]
        rows = [Result(case="outputs/loss", status=Status.PASS if torch.isfinite(loss).all() else Status.FAIL,
                       metric="non_finite", value=float((~torch.isfinite(loss)).sum()), detail=f"loss {loss.item():.6g}")]
        bad = {n: int((~torch.isfinite(g)).sum()) for n, g in step.grads.items() if g is not None}
        bad = {n: c for n, c in bad.items() if c}
        none = [n for n, g in step.grads.items() if g is None]
        detail = f"{len(step.grads)} parameters, {len(bad)} with non-finite gradients"
        if bad:
            detail += ": " + ", ".join(f"{n} ({c})" for n, c in list(bad.items())[:4])
        rows.append(Result(case="grads/*", status=Status.FAIL if bad else Status.PASS, metric="non_finite_values",
                           value=sum(bad.values()), detail=detail))
        notes = [f"{len(none)} parameters got no gradient: " + ", ".join(none[:3])] if none else []
        return Outcome(rows, notes)
    return run


def _run_checkpointed(ctx: Context, golden, options: StepOptions, weights=None):
    loaded = ctx.model.load(golden.config, weights or golden.weights)
    return run_step(loaded, golden.inputs, ctx.model.device, options)


def check_checkpointed(golden) -> Callable[[Context], Outcome]:
    """Checkpointed equals plain: the recompute re-runs the same ops on the same inputs."""
    def run(ctx: Context) -> Outcome:
        plain = ctx.plain(golden)
        step = _run_checkpointed(ctx, golden, StepOptions(checkpoint=True))
        return Outcome(_compare(step.tensors, plain.tensors, ctx.truth(golden), golden.judged, ctx.model.dtype))
    return run


def check_backward_thread(golden) -> Callable[[Context], Outcome]:
    """Checkpointed forward on this thread, backward (and so the recompute) called from a new Python
    thread: on the CPU the recompute runs there; on CUDA on autograd's device thread or there,
    never on the forward's thread."""
    def run(ctx: Context) -> Outcome:
        plain = ctx.plain(golden)
        step = _run_checkpointed(ctx, golden, StepOptions(checkpoint=True, backward_thread=True))
        rows = _compare(step.tensors, plain.tensors, ctx.truth(golden), golden.judged, ctx.model.dtype)
        return Outcome(rows, ["backward called from a new Python thread"])
    return run


def other_weights(weights: dict, seed: int = 23) -> dict:
    """A second model of the same shapes: every floating weight moved by 5% of its spread, so a
    K/V taken from the other model fits and runs, and only the numbers betray it."""
    g = torch.Generator().manual_seed(seed)
    out = {}
    for name, w in weights.items():
        if not w.is_floating_point():
            out[name] = w
            continue
        w32 = w.float()
        spread = w32.std().item() if w32.numel() > 1 else abs(w32.item())
        out[name] = (w32 + 0.05 * (spread or 1.0) * torch.randn(w32.shape, generator=g)).to(w.dtype)
    return out


def check_two_models(golden) -> Callable[[Context], Outcome]:
    """Two models (different weights) train at once in two threads with checkpointing; both forwards
    finish (a barrier) before either backward starts, so a store shared between them is overwritten
    between a forward and its recompute, deterministically."""
    def run(ctx: Context) -> Outcome:
        weights = {"a": golden.weights, "b": other_weights(golden.weights)}
        plain = {k: ctx.plain(golden, w, key=k) for k, w in weights.items()}
        truth = {k: ctx.truth(golden, w, key=k) for k, w in weights.items()}
        barrier = threading.Barrier(2, timeout=600)
        results, errors = {}, {}

        def train(key):
            try:
                options = StepOptions(checkpoint=True, between=barrier.wait)
                results[key] = _run_checkpointed(ctx, golden, options, weights[key])
            except threading.BrokenBarrierError:
                errors[key] = RuntimeError("stopped at the barrier: the other model's thread failed")
            except BaseException as e:
                barrier.abort()
                errors[key] = e

        threads = [threading.Thread(target=train, args=(k,), name=f"gemma4-conform-model-{k}") for k in weights]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        rows = []
        for key in weights:
            if key in errors:
                rows.append(Result(case=f"model {key}", status=Status.FAIL, detail=one_line(errors[key])))
                continue
            rows += _compare(results[key].tensors, plain[key].tensors, truth[key], golden.judged, ctx.model.dtype,
                             label=f"model {key}: ")
        return Outcome(rows)
    return run


def check_use_cache(golden) -> Callable[[Context], Outcome]:
    """use_cache=True and use_cache=False both give the golden's forward (transformers 5.5.1 gave
    KV-shared layers their own K/V without a cache)."""
    def run(ctx: Context) -> Outcome:
        rows, notes = [], []
        for flag in (True, False):
            loaded = ctx.model.load(golden.config, golden.weights)
            if not accepts(loaded.module, "use_cache"):
                return Outcome([Result(status=Status.NOT_SUPPORTED, detail="forward() takes no use_cache argument")])
            step = run_step(loaded, golden.inputs, ctx.model.device, StepOptions(backward=False, use_cache=flag))
            outcome = _golden_rows(judge(golden, step.tensors, forward_only=True))
            for r in outcome.rows:
                r.case = f"use_cache={flag}: {r.case}"
            rows += outcome.rows
            notes += outcome.notes[:1] if flag else []
        return Outcome(rows, notes)
    return run


def per_layer_config(config: dict) -> dict:
    """The other config serialization (GEMMA4.md, "Conventions that changed"): the global layers'
    geometry as per_layer_config entries instead of top-level global_head_dim and
    num_global_key_value_heads (the latter only on K=V models, as transformers reads it)."""
    out = dict(config)
    head_dim = out.pop("global_head_dim", None)
    kv_heads = out.pop("num_global_key_value_heads", None)
    override = {"head_dim": head_dim} if head_dim else {}
    if kv_heads and config.get("attention_k_eq_v"):
        override["num_key_value_heads"] = kv_heads
    out["per_layer_config"] = {str(i): dict(override) for i, t in enumerate(out["layer_types"])
                               if t == "full_attention"}
    return out


def check_serialization(golden) -> Callable[[Context], Outcome]:
    def run(ctx: Context) -> Outcome:
        try:
            loaded = ctx.model.load(per_layer_config(golden.config), golden.weights)
        except ModelError as e:
            return Outcome([Result(status=Status.NOT_SUPPORTED,
                                   detail=f"per_layer_config serialization not accepted: {e}")])
        step = run_step(loaded, golden.inputs, ctx.model.device)
        return _golden_rows(judge(golden, step.tensors))
    return run


def check_layout(golden) -> Callable[[Context], Outcome]:
    """The golden's weights offered in the layout the module does not save: a module that loads
    them must then compute the golden; one that refuses them is 'not supported'."""
    def run(ctx: Context) -> Outcome:
        try:
            loaded = ctx.model.load(golden.config, golden.weights, other_layout=True)
        except ModelError as e:
            return Outcome([Result(status=Status.NOT_SUPPORTED, detail=str(e))])
        step = run_step(loaded, golden.inputs, ctx.model.device)
        return _golden_rows(judge(golden, step.tensors))
    return run


def check_memory_flatness(golden) -> Callable[[Context], Outcome]:
    """The suite's rule (conformance/flatness.h); model_memory.py measures."""
    def run(ctx: Context) -> Outcome:
        row = measure_flatness(ctx.model, golden, ctx.steps)
        if row is None:
            return Outcome([Result(status=Status.NOT_SUPPORTED, detail="the config shares no K/V")])
        return Outcome([row])
    return run


# --- the table ---------------------------------------------------------------------------------


# The suite's categories conform-model has checks in: the table below adds checks of these only
# (the scoreboard's model rows show these columns).
MODEL_CATEGORIES = (Category.golden, Category.finite_grads, Category.multithreaded_recompute, Category.key_conventions,
                    Category.memory_flatness, Category.decode)


def model_goldens(dtype: str) -> list:
    """Every model golden of the dtype: ours (golden/reference/model) and transformers' (golden/transformers)."""
    model_groups = (_core.GoldenGroup.model, _core.GoldenGroup.transformers)
    return [read_golden(g.path) for g in _core.committed_goldens(dtype) if g.group in model_groups]


def kv_shared(golden) -> bool:
    return (golden.config.get("num_kv_shared_layers") or 0) > 0


def model_checks(dtype: str) -> list:
    """The checks, each under the suite category it belongs to (conformance/categories.cpp). The test
    names are the harness's own ("<group>/<check>"); where the group is a suite category, it is the
    check's category. The one group that is not:
    - use_cache/*: the golden forward with use_cache=True and False -> decode, the suite's category
      of the KV cache path (the cache a forward fills for decoding, and the K/V that KV-shared
      layers must take from the storing layers with a cache or without one).
    (conform-model --distributed: sharded-equals-single -> multithreaded_recompute, memory-flatness
    -> memory_flatness; model_distributed.CHECKS.)"""
    goldens = model_goldens(dtype)
    checks = []

    def add(category, test: str, run) -> None:
        assert category in MODEL_CATEGORIES, f"{test}: {category} is not in MODEL_CATEGORIES"
        checks.append(ModelCheck(test, category, run))

    for g in goldens:
        add(Category.golden, f"golden/{g.name}", check_golden(g))
    for g in goldens:
        add(Category.finite_grads, f"finite_grads/{g.name}", check_finite_grads(g))
    for g in goldens:
        add(Category.multithreaded_recompute, f"multithreaded_recompute/checkpointed/{g.name}", check_checkpointed(g))
    for g in filter(kv_shared, goldens):
        add(Category.multithreaded_recompute, f"multithreaded_recompute/backward-thread/{g.name}",
            check_backward_thread(g))
        add(Category.multithreaded_recompute, f"multithreaded_recompute/two-models/{g.name}", check_two_models(g))
    for g in goldens:
        if g.name in ("model/e2b", "model/26b-a4b", "transformers/e2b_like"):
            add(Category.key_conventions, f"key_conventions/per-layer-config/{g.name}", check_serialization(g))
            add(Category.key_conventions, f"key_conventions/other-layout/{g.name}", check_layout(g))
    for g in goldens:
        add(Category.decode, f"use_cache/{g.name}", check_use_cache(g))
    for g in filter(kv_shared, goldens):
        if g.name == "model/e2b":
            add(Category.memory_flatness, f"memory_flatness/{g.name}", check_memory_flatness(g))
    return checks


def run_check(check: ModelCheck, ctx: Context) -> Outcome:
    """A check's outcome; anything the module raises is a failure row with its one-line error."""
    try:
        outcome = check.run(ctx)
    except NotSupported as e:
        outcome = Outcome([Result(status=Status.NOT_SUPPORTED, detail=str(e))])
    except Exception as e:  # the module under test: every error is a result, never a crash
        outcome = Outcome([Result(status=Status.FAIL, detail=one_line(e))])
    finally:
        # What the check built is garbage now: collect it, then freeze the survivors (gc.freeze), so
        # that later collections, one per memory_flatness step among them, scan only new objects
        # (a full collection costs ~0.2 s once transformers is imported).
        python_gc.collect()
        python_gc.freeze()
    if not outcome.rows:
        outcome.rows.append(Result(status=Status.FAIL, detail="the check produced no result"))
    return outcome
