"""memory_flatness for a whole model: training with activation checkpointing must not grow memory
from step to step (GEMMA4.md, "Known failure modes": a K/V container captured by a checkpoint
closure kept every step's K/V alive, +0.47 GiB/step, OOM at step 73 on 31B).

The rule is the suite's, in C++ (conformance/flatness.h, through _core): N steps (50 CPU, 200
CUDA), a warm-up of max(3, N/10) steps and as many witnesses at the end; the least-squares slope of
the floor (each step's least live bytes from that step on: a leak raises it, a buffer alive at one
reading does not) under 1% of one step's shared K/V, counted from the config (shared_kv_bytes).
This module measures: N steps of forward + backward with checkpointing on, gradients dropped
(zero_grad(set_to_none=True)) and Python's cycle collector run after each step, then the live
bytes read: on the CPU through the suite's tracking allocator (installed once per process; only differences count), on CUDA the
caching allocator's allocated bytes. The cycle collector runs because a cycle that Python frees
later is not a leak; a container that something still references is (the model and everything
older than the loop are frozen first, gc.freeze: what they reference stays reachable, as it should).
conform-model --distributed measures each rank the same way (live_bytes_per_step).
"""
from __future__ import annotations

import gc as python_gc
from typing import Callable, Optional

import torch

from . import _core
from .model_under_test import StepOptions, run_step


def track_live_bytes(device: str) -> None:
    """Before the module is built: on the CPU, the suite's tracking allocator from now on."""
    if device.startswith("cpu"):
        _core.install_tracking_cpu_allocator()


def live_bytes(device: str) -> int:
    if device.startswith("cpu"):
        return _core.tracked_cpu_live_bytes()
    torch.cuda.synchronize()
    return torch.cuda.memory_allocated()


def live_bytes_per_step(train_step: Callable[[], None], device: str, steps: int) -> list:
    """The live bytes after each of `steps` calls of train_step (a forward + backward that drops its
    gradients), the cycle collector run before each reading; what exists now is frozen first, so the
    per-step collections scan only what the steps create."""
    python_gc.collect()
    python_gc.freeze()
    out = []
    for _ in range(steps):
        train_step()
        python_gc.collect()
        out.append(live_bytes(device))
    return out


def measure_flatness(model, golden, steps: int = 0) -> Optional[_core.Result]:
    """The rule's row for N training steps of `model` (a ModelUnderTest) on the golden's config and
    weights; None when the config shares no K/V."""
    device, dtype = model.device, model.dtype
    steps = steps or _core.flatness_default_steps(device)
    _core.require_flatness_steps(steps)
    # A sequence long enough that one step's K/V is many allocator granules (the suite's B=2, S=128).
    batch, seq = 2, 128
    kv = _core.shared_kv_bytes(golden.config, batch, seq, dtype)
    if kv == 0:
        return None
    g = torch.Generator().manual_seed(11)
    ids = torch.randint(0, golden.config["vocab_size"], (batch, seq), generator=g)
    inputs = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": ids.clone()}
    track_live_bytes(device)
    loaded = model.load(golden.config, golden.weights)

    def train_step() -> None:
        run_step(loaded, inputs, device, StepOptions(checkpoint=True))
        loaded.module.zero_grad(set_to_none=True)

    row = _core.judge_flatness(live_bytes_per_step(train_step, device, steps), kv)
    row.detail += f" (B={batch}, S={seq}, {dtype})"
    return row
