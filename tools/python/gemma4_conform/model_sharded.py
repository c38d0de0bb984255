"""The two runs conform-model --distributed compares, and how the module is sharded.

- The single-device run is computed before any process group exists and with the launcher's rank
  variables hidden (`single_process_env`): a module that behaves differently once distributed (loss
  normalisation written `if torch.distributed.is_initialized(): loss = loss / world_size`, which
  averages a second time what FSDP already averages) then differs from its sharded self. Computed
  inside the ranks with the group up, such a module was compared with itself and passed.
- The single-device run trains on every rank's sequence, one sequence at a time with the losses
  averaged and the gradients accumulated: the same mean as one batch of them (the sequences have the
  same length, so each contributes equally), and one sequence's activations at a time, which is what
  lets the fp32 truth of a real-width model fit on one GPU.
- A sharding strategy turns a loaded module into the sharded one (SHARDINGS, or MODULE:FUNCTION).
- `judge_sharded_step` gathers each parameter's gradient (DTensor.full_tensor(), on the device) and
  judges it at once against the single-device run's under compare_runs' rule (_core.RunComparison),
  so no rank ever holds every full gradient, on the device or the host.
"""
from __future__ import annotations

import contextlib
import dataclasses
import os
from typing import Callable, Optional

import torch

from .model_under_test import DTYPES, ModelError, ModelUnderTest, accepts, golden_names, resolve

CHECKPOINT_PREFIX = "_checkpoint_wrapped_module."  # what checkpoint_wrapper adds to parameter names
LR = 1e-2  # SGD between the compared steps: later steps see weights the earlier gradients moved

# What torchrun sets for a rank; none of it is visible while the single-device run is computed.
RANK_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE",
                  "ROLE_RANK", "ROLE_WORLD_SIZE", "ROLE_NAME")


@contextlib.contextmanager
def single_process_env():
    import torch.distributed as dist

    if dist.is_initialized():
        raise RuntimeError("the single-device run must be computed before init_process_group")
    saved = {k: os.environ.pop(k) for k in RANK_VARIABLES if k in os.environ}
    try:
        yield
    finally:
        os.environ.update(saved)


# --- sharding strategies -----------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Sharding:
    name: str
    shard: Callable  # shard(module, mesh, layers, dtype): fully_shard the decoder layers, then the root
    weights: Optional[str] = None  # the dtype the module is loaded in before sharding (None: --dtype)
    about: str = ""


def fsdp2(module, mesh, layers, dtype: torch.dtype) -> None:
    from torch.distributed.fsdp import fully_shard

    for layer in layers:
        fully_shard(layer, mesh=mesh)
    fully_shard(module, mesh=mesh)


def fsdp2_mixed_precision(module, mesh, layers, dtype: torch.dtype) -> None:
    """fp32 master weights sharded; FSDP casts them to --dtype for compute and reduces gradients
    in fp32 (torchtitan's default training setup)."""
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    policy = MixedPrecisionPolicy(param_dtype=dtype, reduce_dtype=torch.float32)
    for layer in layers:
        fully_shard(layer, mesh=mesh, mp_policy=policy)
    fully_shard(module, mesh=mesh, mp_policy=policy)


SHARDINGS = {s.name: s for s in (
    Sharding("fsdp2", fsdp2, about="fully_shard per decoder layer, then the root"),
    Sharding("fsdp2-mixed-precision", fsdp2_mixed_precision, weights="f32",
             about="fp32 master weights, compute in --dtype, gradients reduced in fp32 (needs --dtype bf16 or f16)"),
)}


def sharding_of(spec: str) -> Sharding:
    """A SHARDINGS name, or MODULE:FUNCTION with FUNCTION(module, mesh, layers, dtype) that shards
    the module in place (the module is loaded in --dtype)."""
    if spec in SHARDINGS:
        return SHARDINGS[spec]
    return Sharding(spec, resolve(spec, "--sharding"))


def decoder_layers(module: torch.nn.Module) -> torch.nn.ModuleList:
    for name, child in module.named_modules():
        if isinstance(child, torch.nn.ModuleList) and name.rsplit(".", 1)[-1] == "layers" and len(child):
            return child
    raise ModelError("the module has no non-empty nn.ModuleList named 'layers' (the decoder layers to shard)")


def sharded(model: ModelUnderTest, source, mesh, checkpoint: str, sharding: Sharding):
    """The source's weights loaded into a fresh module, checkpointed, sharded by `sharding`."""
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper

    loaded = model.load(source.config, source.weights, dtype=sharding.weights)
    module = loaded.module
    layers = decoder_layers(module)
    if checkpoint == "wrapper":
        for i in range(len(layers)):
            layers[i] = checkpoint_wrapper(layers[i])
    elif not hasattr(module, "gradient_checkpointing_enable"):
        raise ModelError("the module has no gradient_checkpointing_enable() (try --checkpoint wrapper)")
    else:
        module.gradient_checkpointing_enable()
    sharding.shard(module, mesh, layers, DTYPES[model.dtype])
    module.train()
    return loaded


# --- one training step --------------------------------------------------------------------------


def step_loss(module, ids: torch.Tensor) -> torch.Tensor:
    """The forward of one training step: the loss (the model's mean over the sequence's tokens)."""
    kwargs = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": ids}
    # Training keeps no KV cache: a recompute under checkpoint_wrapper would append to it again
    # (the model's own gradient checkpointing turns use_cache off for the same reason).
    if accepts(module, "use_cache"):
        kwargs["use_cache"] = False
    out = module(**kwargs)
    if getattr(out, "loss", None) is None:
        raise ModelError("forward(labels=...) returned no .loss")
    return out.loss


def sgd(module) -> None:
    with torch.no_grad():
        for p in module.parameters():
            if p.grad is not None:
                p.add_(p.grad, alpha=-LR)
    module.zero_grad(set_to_none=True)


def judged_parameters(module, layout: str, wanted: frozenset):
    """(grads/<golden name>, parameter) for every parameter the source has a weight for."""
    names = {n.replace(CHECKPOINT_PREFIX, ""): g.replace(CHECKPOINT_PREFIX, "")
             for n, g in golden_names(module, layout).items()}
    for name, param in module.named_parameters():
        golden = names.get(name.replace(CHECKPOINT_PREFIX, ""))
        if golden is not None and golden in wanted:
            yield f"grads/{golden}", param


# --- the single-device run -----------------------------------------------------------------------


def single_device_run(model: ModelUnderTest, source, ids: torch.Tensor, dtype: str, steps: int,
                      master: Optional[str] = None) -> list:
    """Each step's loss and gradients (on the host) of the module on this process's device alone:
    every row of `ids` in turn, losses averaged, gradients accumulated, then an SGD step. With
    master="f32" it trains the sharding's mixed-precision recipe on one device: fp32 master weights
    (buffers stay as loaded in fp32), parameters cast to `dtype` for compute, gradients accumulated
    and the SGD step taken in fp32, as FSDP2's MixedPrecisionPolicy(param_dtype, reduce_dtype=fp32)
    does. A recipe is one implementation: its rounding differs from a plain `dtype` run by more than
    the rule allows two runs of one implementation to differ."""
    with single_process_env():
        loaded = model.load(source.config, source.weights, dtype=master or dtype)
        module = loaded.module
        module.train()
        params = list(module.parameters())
        masters = [p.detach().clone() for p in params] if master else None
        if master:
            for p in params:
                p.data = p.data.to(DTYPES[dtype])
        out = []
        for _ in range(steps):
            total = torch.zeros((), dtype=torch.float32, device=model.device)
            summed = [None] * len(params)  # fp32 sums of the rows' gradients (with a master copy)
            for row in ids:
                loss = step_loss(module, row[None].to(model.device))
                (loss / len(ids)).backward()
                total += loss.detach().float()
                if master:
                    summed = [s if p.grad is None else p.grad.float() + (0 if s is None else s)
                              for p, s in zip(params, summed)]
                    module.zero_grad(set_to_none=True)
            grads = {id(p): (summed[i] if master else p.grad) for i, p in enumerate(params)}
            record = {"outputs/loss": (total / len(ids)).cpu()}
            for key, param in judged_parameters(module, loaded.layout, loaded.golden_weights):
                grad = grads[id(param)]
                record[key] = torch.zeros(param.shape) if grad is None else grad.detach().cpu()
            out.append(record)
            if master:
                with torch.no_grad():
                    for p, m, g in zip(params, masters, summed):
                        if g is not None:
                            m.add_(g, alpha=-LR)
                        p.data = m.to(DTYPES[dtype])
            else:
                sgd(module)
        del loaded, module, params, masters
    release_memory()
    return out


def agreement(single: dict, truth: dict) -> str:
    """How far a reduced-precision single-device step is from its fp32 run, gradient by gradient (the
    rule's baseline: where the two disagree, the bound is as wide as the gradient itself)."""
    cosines = {}
    for key, g in single.items():
        if key.startswith("grads/"):
            a, b = g.double().flatten(), truth[key].double().flatten()
            norms = float(a.norm() * b.norm())
            cosines[key[len("grads/"):]] = float(a @ b) / norms if norms else 1.0
    worst = min(cosines, key=cosines.get)
    ordered = sorted(cosines.values())
    return (f"gradient cosine with the fp32 run: median {ordered[len(ordered) // 2]:.4f}, min {cosines[worst]:.4f} "
            f"({worst}); {sum(c < 0.99 for c in ordered)} of {len(ordered)} below 0.99")


def release_memory() -> None:
    import gc

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


# --- the sharded run, judged ---------------------------------------------------------------------


def judge_sharded_step(loaded, loss: torch.Tensor, reference: dict, truth: Optional[dict], dtype: str) -> list:
    """compare_runs' rows (_core.Result) for one sharded step: `loss` (the ranks' mean) and every gradient, each
    gathered whole on the device, judged there against the single-device run's and freed."""
    from . import _core

    device = loss.device
    comparison = _core.RunComparison(dtype)

    def add(key: str, candidate) -> None:
        comparison.add(key, candidate, reference[key].to(device),
                       truth[key].to(device) if truth is not None else None)

    add("outputs/loss", loss)
    seen = {"outputs/loss"}
    for key, param in judged_parameters(loaded.module, loaded.layout, loaded.golden_weights):
        grad = param.grad  # a collective below: every rank walks the same parameters in the same order
        if grad is not None and hasattr(grad, "full_tensor"):
            grad = grad.full_tensor()
        if key in reference:
            add(key, torch.zeros(param.shape, device=device) if grad is None else grad)
            seen.add(key)
        del grad
    for key in reference.keys() - seen:
        comparison.add(key, None, reference[key])  # a gradient the sharded module does not have
    return comparison.rows()
