"""memory_flatness for a whole model: training with activation checkpointing must not grow memory
from step to step (GEMMA4.md, "Known failure modes": a K/V container captured by a checkpoint
closure kept every step's K/V alive, +0.47 GiB/step, OOM at step 73 on 31B).

The rule is the suite's (conformance/checks_memory_flatness.cpp): N steps of forward + backward
with checkpointing on, gradients dropped (zero_grad(set_to_none=True)) and Python's cycle
collector run after each step, then the live bytes read: on the CPU through the suite's tracking
allocator (installed once per process; only differences count), on CUDA the caching allocator's
allocated bytes. The least-squares slope of live bytes against the step, after a warm-up of
max(3, N/10) steps, must stay under 1% of one step's shared K/V. A leak of the kind above retains at
least one step's shared K/V per step (a slope >= 100% of it); an honest model allocates the same
bytes every step, a slope of 0. The cycle collector runs because a cycle that Python frees later is
not a leak; a container that something still references is (the model and everything older than
the loop are frozen first, gc.freeze: what they reference stays reachable, as it should).

One step's shared K/V comes from the config, as transformers stores it: the last layer of each
type before the first KV-shared layer stores K and V of [B, Hkv, S, D] in the model's dtype.
"""
from __future__ import annotations

import dataclasses
import gc as python_gc
from typing import Optional

import torch

from . import _core
from .model_under_test import DTYPES, StepOptions, run_step


def shared_kv_bytes(config: dict, batch: int, seq: int, dtype: str) -> int:
    types = config["layer_types"]
    first_shared = len(types) - (config.get("num_kv_shared_layers") or 0)
    element = torch.tensor([], dtype=DTYPES[dtype]).element_size()
    total = 0
    for layer_type in set(types[first_shared:]):
        if layer_type not in types[:first_shared]:
            continue
        if layer_type == "full_attention":
            head_dim = config.get("global_head_dim") or config["head_dim"]
            kv_heads = config["num_key_value_heads"]
            if config.get("attention_k_eq_v") and config.get("num_global_key_value_heads"):
                kv_heads = config["num_global_key_value_heads"]
        else:
            head_dim, kv_heads = config["head_dim"], config["num_key_value_heads"]
        total += 2 * batch * kv_heads * seq * head_dim * element
    return total


def slope(x: list, y: list) -> float:
    mx, my = sum(x) / len(x), sum(y) / len(y)
    sxx = sum((a - mx) ** 2 for a in x)
    return sum((a - mx) * (b - my) for a, b in zip(x, y)) / sxx if sxx else 0.0


def live_bytes(device: str) -> int:
    if device == "cpu":
        return _core.tracked_cpu_live_bytes()
    torch.cuda.synchronize()
    return torch.cuda.memory_allocated()


def default_steps(device: str) -> int:
    return 50 if device == "cpu" else 200


@dataclasses.dataclass
class Flatness:
    slope: float   # bytes per step
    bound: float   # 1% of one step's shared K/V
    detail: str


def measure_flatness(model, golden, steps: int = 0) -> Optional[Flatness]:
    """N training steps of `model` (a ModelUnderTest) on the golden's config and weights; None when
    the config shares no K/V."""
    device, dtype = model.device, model.dtype
    steps = steps or default_steps(device)
    warmup = max(3, steps // 10)
    if steps < warmup + 3:
        raise ValueError(f"memory_flatness needs at least {warmup + 3} steps (--steps {steps})")
    # A sequence long enough that one step's K/V is many allocator granules (the suite's B=2, S=128).
    batch, seq = 2, 128
    g = torch.Generator().manual_seed(11)
    ids = torch.randint(0, golden.config["vocab_size"], (batch, seq), generator=g)
    inputs = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": ids.clone()}
    kv = shared_kv_bytes(golden.config, batch, seq, dtype)
    if kv == 0:
        return None
    bound = 0.01 * kv
    if device == "cpu":
        _core.install_tracking_cpu_allocator()
    loaded = model.load(golden.config, golden.weights)
    python_gc.collect()
    python_gc.freeze()  # the per-step collections below scan only what the steps create
    xs, ys = [], []
    for step in range(steps):
        run_step(loaded, inputs, device, StepOptions(checkpoint=True))
        loaded.module.zero_grad(set_to_none=True)
        python_gc.collect()
        if step >= warmup:
            xs.append(step)
            ys.append(live_bytes(device))
    s = slope(xs, ys)
    detail = (f"{steps} steps, slope over steps {warmup}..{steps - 1}; live bytes {ys[0]} -> {ys[-1]} "
              f"(range {max(ys) - min(ys)}); one step's shared K/V {kv} B (B={batch}, S={seq}, {dtype})")
    return Flatness(s, bound, detail)
