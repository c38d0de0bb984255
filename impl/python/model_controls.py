"""Models under test for conform-model's own tests: transformers' Gemma4ForCausalLM (the installed
5.17) with exactly one thing changed, each a pre-fix pattern of the shared-KV side channel that bit
users (GEMMA4.md, "Known failure modes"), plus factories that break the harness contract.

Side-channel controls (the check that must catch each; all else must pass):
- checkpoint_closure: the K/V container crosses the checkpoint boundary as a kwarg (the
  partial that GradientCheckpointingLayer hands to torch.utils.checkpoint captures it) and outlives
  the step: one store per model, passed to every forward, keeping what is written to it. Numerics
  are right; every step's K/V stays referenced -> memory_flatness.
- thread_local_store: the decoder layer's call takes the dict out of its kwargs and parks it in a
  threading.local, the attention reads it from there (the first fix proposed for the leak,
  axolotl PR #3611). A checkpoint recompute on another thread finds nothing: "'NoneType' object is
  not subscriptable" -> multithreaded_recompute/backward-thread.
- process_wide_store: the same through one module-level dict (axolotl 0.17.0's
  _GEMMA4_SHARED_KV_STORE): visible on every thread, but one model's recompute reads the K/V of
  whichever model ran its forward last -> multithreaded_recompute/two-models.

Numeric controls: attention_scale (the scores scaled by head_dim^-0.5) fails golden; nan_grad (a
NaN in one gradient) fails finite_grads.

The patches are per instance (a subclass made for each model's layers, a bound forward per
attention module), so models built by other factories in the same process are untouched.
"""
from __future__ import annotations

import os
import threading
import time
from collections import UserDict

import torch
import transformers_models  # impl/third_party

# --- the side-channel controls -----------------------------------------------------------------


class KeepingStore(UserDict):
    """A shared-KV dict that keeps everything ever written to it (a store reused across steps)."""

    def __init__(self):
        super().__init__()
        self.written = []

    def __setitem__(self, key, value):
        self.written.append(value)
        super().__setitem__(key, value)


def checkpoint_closure(config: dict, dtype: torch.dtype, device: str) -> torch.nn.Module:
    model = transformers_models.sdpa(config, dtype, device)
    decoder, store = model.model, KeepingStore()
    plain_forward = decoder.forward

    def forward(*args, **kwargs):
        kwargs["shared_kv_states"] = store  # Gemma4TextModel passes it to every layer as a kwarg
        return plain_forward(*args, **kwargs)

    decoder.forward = forward
    return model


def _side_channel(model: torch.nn.Module, put, get) -> torch.nn.Module:
    """Routes shared_kv_states around the layer's kwargs: put(dict) in the layer call, get() in attention."""
    for layer in model.model.layers:
        base = type(layer)

        def call(self, *args, _base=base, **kwargs):
            put(kwargs.pop("shared_kv_states", None))
            return _base.__call__(self, *args, **kwargs)

        layer.__class__ = type(f"SideChannel{base.__name__}", (base,), {"__call__": call})
        attention_forward = layer.self_attn.forward

        def forward(*args, _forward=attention_forward, **kwargs):
            kwargs["shared_kv_states"] = get()
            return _forward(*args, **kwargs)

        layer.self_attn.forward = forward
    return model


def thread_local_store(config: dict, dtype: torch.dtype, device: str) -> torch.nn.Module:
    local = threading.local()
    return _side_channel(transformers_models.sdpa(config, dtype, device),
                         put=lambda d: setattr(local, "store", d), get=lambda: getattr(local, "store", None))


_PROCESS_STORE: dict = {"store": None}  # one for every model in the process


def process_wide_store(config: dict, dtype: torch.dtype, device: str) -> torch.nn.Module:
    return _side_channel(transformers_models.sdpa(config, dtype, device),
                         put=lambda d: _PROCESS_STORE.__setitem__("store", d), get=lambda: _PROCESS_STORE["store"])


# --- numeric bugs: the golden and finite_grads checks must catch them ----------------------------


def attention_scale(config: dict, dtype: torch.dtype, device: str) -> torch.nn.Module:
    """Scores scaled by head_dim^-0.5, the usual convention; Gemma-4 uses 1.0 (q and k are
    RMS-normalised) -> golden/* (and use_cache/*, which judge the same forward)."""
    model = transformers_models.sdpa(config, dtype, device)
    for layer in model.model.layers:
        layer.self_attn.scaling = layer.self_attn.head_dim ** -0.5
    return model


def window_off_by_one(config: dict, dtype: torch.dtype, device: str) -> torch.nn.Module:
    """Sliding layers built with a window one key wider than the checkpoint's (the +1 family of
    sglang #26147): the scoreboard's broken adapter -> golden/* on every model with a sliding layer."""
    return transformers_models.eager({**config, "sliding_window": config["sliding_window"] + 1}, dtype, device)


def nan_grad(config: dict, dtype: torch.dtype, device: str) -> torch.nn.Module:
    """A backward that leaves NaN in one weight's gradient (the final norm's), the forward untouched
    -> finite_grads/* (and golden/*, whose rule refuses non-finite values)."""
    model = transformers_models.sdpa(config, dtype, device)
    model.model.norm.weight.register_hook(lambda g: g * float("nan"))
    return model


# --- contract breakers: the harness must report them, never crash ---------------------------------


def raises(config: dict, dtype: torch.dtype, device: str):
    raise ValueError(f"this factory supports no config (hidden_size {config['hidden_size']})")


def not_a_module(config: dict, dtype: torch.dtype, device: str):
    return {"logits": None}


def _on_forward(action):
    def factory(config: dict, dtype: torch.dtype, device: str) -> torch.nn.Module:
        model = transformers_models.eager(config, dtype, device)
        if config.get("num_kv_shared_layers"):  # only the KV-shared goldens: the other checks go on
            plain = model.forward

            def forward(*args, **kwargs):
                action()
                return plain(*args, **kwargs)

            model.forward = forward
        return model
    return factory


# A model that kills its process (as a segfaulting kernel would) or never returns, on KV-shared configs.
crashes_on_kv_shared = _on_forward(os.abort)
hangs_on_kv_shared = _on_forward(lambda: time.sleep(3600))


def raises_on_rank1(config: dict, dtype: torch.dtype, device: str) -> torch.nn.Module:
    """Under torchrun: rank 1's forward raises, rank 0's runs (its collectives then wait for rank 1)
    -> conform-model --distributed reports rank 1's error and ends within its timeouts."""
    model = transformers_models.sdpa(config, dtype, device)
    if os.environ.get("RANK") == "1":
        def forward(*args, **kwargs):
            raise RuntimeError("rank 1's forward fails")

        model.forward = forward
    return model


def loss_times_world_when_sharded(config: dict, dtype: torch.dtype, device: str) -> torch.nn.Module:
    """Once sharded (an FSDP2 module), the loss is multiplied by the world size: the port of DDP code
    that undoes a mean it expects the gradient reduction not to take (FSDP2 does take it). One
    device is untouched -> conform-model --distributed's sharded-equals-single (loss and gradients
    2x on 2 ranks)."""
    from torch.distributed.fsdp import FSDPModule

    model = transformers_models.sdpa(config, dtype, device)
    plain = model.forward

    def forward(*args, **kwargs):
        out = plain(*args, **kwargs)
        if isinstance(model, FSDPModule) and out.loss is not None:
            out.loss = out.loss * int(os.environ.get("WORLD_SIZE", "1"))
        return out

    model.forward = forward
    return model


def loss_over_world_when_distributed(config: dict, dtype: torch.dtype, device: str) -> torch.nn.Module:
    """Once a process group exists, the loss is divided by the world size: loss-normalisation code
    (`if torch.distributed.is_initialized(): loss = loss / world_size`) that averages a second time
    what FSDP's gradient reduction already averages. Judged against a single-device run computed
    inside the ranks with the group up, it is compared with itself and passes; against a truly
    single-device run it fails sharded-equals-single (loss and gradients halved on 2 ranks)."""
    import torch.distributed as dist

    model = transformers_models.sdpa(config, dtype, device)
    plain = model.forward

    def forward(*args, **kwargs):
        out = plain(*args, **kwargs)
        if dist.is_initialized() and out.loss is not None:
            out.loss = out.loss / dist.get_world_size()
        return out

    model.forward = forward
    return model


def killed_on_rank1(config: dict, dtype: torch.dtype, device: str) -> torch.nn.Module:
    """Under torchrun: rank 1's process is killed by SIGKILL in its first sharded forward (as the
    kernel's OOM killer or a crashing kernel would) -> conform-model --distributed still writes its
    report, with rank 1 "did not report"."""
    import signal

    model = transformers_models.sdpa(config, dtype, device)
    if os.environ.get("RANK") == "1":
        def forward(*args, **kwargs):
            os.kill(os.getpid(), signal.SIGKILL)

        model.forward = forward
    return model


# --- sharding strategies (--sharding model_controls:NAME) ------------------------------------------


def sum_reduced_sharding(module, mesh, layers, dtype) -> None:
    """FSDP2 whose gradient reduction sums where it should average: every gradient is world-size
    times too large. Seen in public: PyTorch's FSDP2 on gloo summed instead of averaging
    (pytorch/pytorch#162338, fixed by reducing with SUM then dividing), and DINOv3's FSDP2 training
    summed its gradients (facebookresearch/dinov3#250) -> sharded-equals-single's gradients."""
    from gemma4_conform.model_sharded import fsdp2

    fsdp2(module, mesh, layers, dtype)
    for m in module.modules():
        if hasattr(m, "set_gradient_divide_factor"):  # every FSDP2 module (the layers and the root)
            # A divide factor of 1 with plain SUM collectives (gloo has no pre-multiplied sum): the sum.
            m.set_gradient_divide_factor(1.0)
            m.set_force_sum_reduction_for_comms(True)
