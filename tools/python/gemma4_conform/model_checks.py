"""The model-level checks of ``conform-model``: one table (``model_checks()``) of named checks, each
run on a model under test and returning result rows with the suite's schema.

Every judgement is the C++ core's: a golden by ``gemma4_conform.judge`` (the calibrated rule of
golden/tolerance.h, don't-care positions included), one run against another by
``_core.compare_runs`` (the rule the suite's multithreaded_recompute uses: fp32 max-abs <= 1e-4 x
max|plain| and cosine >= 0.99999; bf16/f16 the FlashAttention rule with the plain run's own error
against the fp32 run as the baseline). Why each check exists: reference/GEMMA4.md, "Known failure
modes"; the bugs each one caught: README, "Judging a whole model".
"""
from __future__ import annotations

import dataclasses
import enum
import gc as python_gc
import threading
from pathlib import Path
from typing import Callable, Optional

import torch

from . import _core, judge, read_golden
from .model_memory import measure_flatness
from .model_under_test import ModelError, ModelUnderTest, NotSupported, StepOptions, accepts, one_line, run_step


class Category(enum.Enum):
    GOLDEN = "golden"
    FINITE_GRADS = "finite_grads"
    MULTITHREADED_RECOMPUTE = "multithreaded_recompute"
    KEY_CONVENTIONS = "key_conventions"
    USE_CACHE = "use_cache"
    MEMORY_FLATNESS = "memory_flatness"


class Status(enum.Enum):
    PASS = "pass"
    FAIL = "fail"
    NOT_SUPPORTED = "not_supported"


@dataclasses.dataclass
class Row:
    """One result, as the C++ suite's JSON report has it (conformance/check.h, Result)."""

    case: str
    status: Status
    metric: str = ""
    value: float = 0.0
    bound: float = 0.0
    baseline: Optional[float] = None
    detail: str = ""

    def to_dict(self, test: str, category: Category) -> dict:
        d = {"test": test, "category": category.value, "case": self.case, "status": self.status.value,
             "metric": self.metric, "value": self.value, "bound": self.bound, "detail": self.detail}
        if self.baseline is not None:
            d["baseline"] = self.baseline
        return d


@dataclasses.dataclass
class Outcome:
    rows: list
    notes: list = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class ModelCheck:
    category: Category
    name: str                                  # unique within the category
    run: Callable[["Context"], Outcome]

    @property
    def test(self) -> str:
        return f"{self.category.value}/{self.name}"


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
    rows, not_checked = [], []
    for r in verdict.to_dict()["rows"]:
        if r["status"] == "not_checked":
            not_checked.append(r["tensor"])
            continue
        if "problem" in r:
            rows.append(Row(r["tensor"], Status.FAIL, detail=r["problem"]))
            continue
        rms_bound = r.get("rms_bound", 0)  # fp32 judges max-abs and cosine only
        rms = rms_bound > 0 and r["rms"] / rms_bound > r["max_abs"] / max(r["max_bound"], 1e-300)
        metric = "rms" if rms else "max_abs"
        detail = f"cosine {r['cosine']:.7g}" + (" (floor 0.99999)" if r["rule"] == "fp32" else "")
        baseline = None
        if r["rule"] == "family":
            baseline = r["baseline_rms"] if rms else r["baseline_max_abs"]
            detail += (f"; max {r['max_abs']:.2e}/{r['max_bound']:.2e}, rms {r['rms']:.2e}/{rms_bound:.2e}; "
                       f"baseline max {r['baseline_max_abs']:.2e} rms {r['baseline_rms']:.2e}")
        if r["non_finite"]:
            detail += f"; {r['non_finite']} values not finite"
        status = Status.PASS if r["status"] == "pass" else Status.FAIL
        rows.append(Row(r["tensor"], status, metric, r[metric], r[metric.replace("max_abs", "max") + "_bound"],
                        baseline, detail))
    notes = [f"{len(not_checked)} golden intermediates not checked (the module does not return them): "
             + ", ".join(not_checked[:3]) + (" ..." if len(not_checked) > 3 else "")] if not_checked else []
    return Outcome(rows, notes)


def _compare(candidate: dict, reference: dict, truth: dict, judged: dict, dtype: str, label: str = "") -> list:
    names = [n for n in reference if n in ("outputs/loss", "outputs/logits") or n.startswith("grads/")]
    pick = lambda d: {n: d[n] for n in names if n in d}  # noqa: E731
    rows = []
    for r in _core.compare_runs(pick(candidate), pick(reference), pick(truth), judged, dtype, False):
        rows.append(Row(label + r["case"], Status(r["status"]), r["metric"], r["value"], r["bound"], r["baseline"],
                        r["detail"]))
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
        rows = [Row("outputs/loss", Status.PASS if torch.isfinite(loss).all() else Status.FAIL, "non_finite",
                    float((~torch.isfinite(loss)).sum()), 0, detail=f"loss {loss.item():.6g}")]
        bad = {n: int((~torch.isfinite(g)).sum()) for n, g in step.grads.items() if g is not None}
        bad = {n: c for n, c in bad.items() if c}
        none = [n for n, g in step.grads.items() if g is None]
        detail = f"{len(step.grads)} parameters, {len(bad)} with non-finite gradients"
        if bad:
            detail += ": " + ", ".join(f"{n} ({c})" for n, c in list(bad.items())[:4])
        rows.append(Row("grads/*", Status.FAIL if bad else Status.PASS, "non_finite_values", sum(bad.values()), 0,
                        detail=detail))
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
                rows.append(Row(f"model {key}", Status.FAIL, detail=one_line(errors[key])))
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
                return Outcome([Row("", Status.NOT_SUPPORTED, detail="forward() takes no use_cache argument")])
            step = run_step(loaded, golden.inputs, ctx.model.device, StepOptions(backward=False, use_cache=flag))
            outcome = _golden_rows(judge(golden, step.tensors, forward_only=True))
            rows += [dataclasses.replace(r, case=f"use_cache={flag}: {r.case}") for r in outcome.rows]
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
            return Outcome([Row("", Status.NOT_SUPPORTED, detail=f"per_layer_config serialization not accepted: {e}")])
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
            return Outcome([Row("", Status.NOT_SUPPORTED, detail=str(e))])
        step = run_step(loaded, golden.inputs, ctx.model.device)
        return _golden_rows(judge(golden, step.tensors))
    return run


def check_memory_flatness(golden) -> Callable[[Context], Outcome]:
    """model_memory.py has the rule and why."""
    def run(ctx: Context) -> Outcome:
        f = measure_flatness(ctx.model, golden, ctx.steps)
        if f is None:
            return Outcome([Row("", Status.NOT_SUPPORTED, detail="the config shares no K/V")])
        return Outcome([Row("live bytes after each step", Status.PASS if f.slope < f.bound else Status.FAIL,
                            "slope_bytes_per_step", f.slope, f.bound, detail=f.detail)])
    return run


# --- the table ---------------------------------------------------------------------------------


def model_goldens(dtype: str) -> list:
    """Every model golden of the dtype: ours (golden/reference/model) and transformers' (golden/transformers)."""
    root = Path(_core.data_dir()) / "golden"
    paths = sorted((root / "reference" / "model").glob(f"*.{dtype}.h5")) + \
        sorted((root / "transformers").glob(f"*/golden.{dtype}.h5"))
    return [read_golden(p) for p in paths]


def kv_shared(golden) -> bool:
    return (golden.config.get("num_kv_shared_layers") or 0) > 0


def model_checks(dtype: str) -> list:
    goldens = model_goldens(dtype)
    checks = []
    for g in goldens:
        checks.append(ModelCheck(Category.GOLDEN, g.name, check_golden(g)))
    for g in goldens:
        checks.append(ModelCheck(Category.FINITE_GRADS, g.name, check_finite_grads(g)))
    for g in goldens:
        checks.append(ModelCheck(Category.MULTITHREADED_RECOMPUTE, f"checkpointed/{g.name}", check_checkpointed(g)))
    for g in filter(kv_shared, goldens):
        checks.append(ModelCheck(Category.MULTITHREADED_RECOMPUTE, f"backward-thread/{g.name}", check_backward_thread(g)))
        checks.append(ModelCheck(Category.MULTITHREADED_RECOMPUTE, f"two-models/{g.name}", check_two_models(g)))
    for g in goldens:
        if g.name in ("model/e2b", "model/26b-a4b", "transformers/e2b_like"):
            checks.append(ModelCheck(Category.KEY_CONVENTIONS, f"per-layer-config/{g.name}", check_serialization(g)))
            checks.append(ModelCheck(Category.KEY_CONVENTIONS, f"other-layout/{g.name}", check_layout(g)))
    for g in goldens:
        checks.append(ModelCheck(Category.USE_CACHE, g.name, check_use_cache(g)))
    for g in filter(kv_shared, goldens):
        if g.name == "model/e2b":
            checks.append(ModelCheck(Category.MEMORY_FLATNESS, g.name, check_memory_flatness(g)))
    return checks


def run_check(check: ModelCheck, ctx: Context) -> Outcome:
    """A check's outcome; anything the module raises is a failure row with its one-line error."""
    try:
        outcome = check.run(ctx)
    except NotSupported as e:
        outcome = Outcome([Row("", Status.NOT_SUPPORTED, detail=str(e))])
    except Exception as e:  # the module under test: every error is a result, never a crash
        outcome = Outcome([Row("", Status.FAIL, detail=one_line(e))])
    finally:
        # What the check built is garbage now: collect it, then freeze the survivors (gc.freeze), so
        # that later collections, one per memory_flatness step among them, scan only new objects
        # (a full collection costs ~0.2 s once transformers is imported).
        python_gc.collect()
        python_gc.freeze()
    if not outcome.rows:
        outcome.rows.append(Row("", Status.FAIL, detail="the check produced no result"))
    return outcome
