"""transformers' own Gemma-4 as models under test (``python -m gemma4_conform conform-model``).

Each factory takes (config: dict, dtype: torch.dtype, device) and returns
``transformers.Gemma4ForCausalLM`` built from the config with random weights (the harness loads
the golden's), in the installed transformers' version:

    python -m gemma4_conform conform-model --factory transformers_models:eager
    python -m gemma4_conform conform-model --factory transformers_models:sdpa
    python -m gemma4_conform conform-model --factory transformers_models:flex_attention
    python -m gemma4_conform conform-model --factory transformers_models:liger      # Liger-Kernel's patch
    python -m gemma4_conform conform-model --factory transformers_models:axolotl_fused_attn  # axolotl's patch
    python -m gemma4_conform conform-model --factory transformers_models:from_config   # _from_config(torch_dtype=)
    python -m gemma4_conform conform-model --factory transformers_models:eager_dtype_name  # dtype: str ("f32")

The MoE experts run transformers' eager loop (see _model). ``liger`` applies ``liger_kernel.transformers.apply_liger_kernel_to_gemma4_text(model=...)`` with
its defaults (RMSNorm, GeGLU, fused linear cross-entropy; Liger's RoPE has no Gemma-4 path);
``axolotl_fused_attn`` applies axolotl's ``patch_gemma4_fused_attn(install_shared_kv_workaround=True)``,
as axolotl does with activation checkpointing on; both run Triton kernels: on another device
than CUDA they raise gemma4_conform.NotSupported, and the report says so.
"""
from __future__ import annotations

import torch
from gemma4_conform.model_under_test import DTYPES, NotSupported


def _text_config(config: dict, attn: str, experts: str = "eager"):
    import transformers

    # experts_implementation "eager": transformers' default grouped_mm needs 16-byte strides, which
    # the tiny goldens' bf16/f16 MoE experts lack ("strides should be multiple of 16 bytes"); the
    # released sizes have them. grouped_mm is judged in f32 by golden_check_transformers.
    return transformers.Gemma4TextConfig(**config, attn_implementation=attn, experts_implementation=experts)


def _model(config: dict, dtype: torch.dtype, device: str, attn: str, experts: str = "eager") -> torch.nn.Module:
    import transformers

    with torch.device(device):
        model = transformers.Gemma4ForCausalLM(_text_config(config, attn, experts))
    return model.to(dtype)


def eager(config: dict, dtype: torch.dtype, device: str) -> torch.nn.Module:
    return _model(config, dtype, device, "eager")


def sdpa(config: dict, dtype: torch.dtype, device: str) -> torch.nn.Module:
    return _model(config, dtype, device, "sdpa")


def flex_attention(config: dict, dtype: torch.dtype, device: str) -> torch.nn.Module:
    """transformers' FlexAttention path (torch.nn.attention.flex_attention, compiled by transformers).
    torch 2.11's FlexAttention has no backward on the CPU ("FlexAttention does not support backward
    on CPU"), and every check trains: not supported there."""
    if torch.device(device).type == "cpu":
        raise NotSupported("FlexAttention has no backward on the CPU (torch " + torch.__version__ + ")")
    # Its Triton lowering refuses head dims under 16 ("NYI: embedding dimension of the query, key, and
    # value must be at least 16", torch 2.11 on an H200): the tiny reference goldens' 8; Gemma-4's are 256/512.
    dims = [config.get("head_dim", 0), config.get("global_head_dim") or config.get("head_dim", 0)]
    if min(dims) < 16:
        raise NotSupported(f"FlexAttention's kernels need head dims >= 16; this golden has {min(dims)}")
    return _model(config, dtype, device, "flex_attention")


def from_config(config, dtype, device):
    """Written the PyTorch way, no annotations: the dtype goes straight to transformers as
    torch_dtype (with a dtype name, "f32", transformers would call getattr(torch, "f32") and fail)."""
    import transformers

    model = transformers.Gemma4ForCausalLM._from_config(_text_config(config, "sdpa"), torch_dtype=dtype)
    return model.to(device)


def eager_dtype_name(config: dict, dtype: str, device: str) -> torch.nn.Module:
    """A factory of the first contract, its dtype parameter annotated str: it gets "f32", "bf16" or
    "f16" (gemma4_conform.model_under_test.factory_dtype) and keeps working."""
    if not isinstance(dtype, str):
        raise TypeError(f"eager_dtype_name expects the dtype's name, got {dtype!r}")
    return _model(config, DTYPES[dtype], device, "eager")


def sdpa_grouped_mm(config: dict, dtype: torch.dtype, device: str) -> torch.nn.Module:
    """sdpa with transformers' default MoE experts (grouped_mm): for the released sizes (conform-model
    --distributed --geometry 26b-a4b), whose expert strides it needs; the eager loop over 128 experts
    is several times slower there."""
    return _model(config, dtype, device, "sdpa", experts="grouped_mm")


def _triton_device(device: str, what: str) -> None:
    # Triton's interpreter (TRITON_INTERPRET=1) is no way around it: torch.library.wrap_triton,
    # which axolotl's kernels go through, refuses interpreted kernels.
    if device != "cuda":
        raise NotSupported(f"{what} runs Triton kernels, which need a CUDA device (device {device})")


def liger(config: dict, dtype: torch.dtype, device: str) -> torch.nn.Module:
    _triton_device(device, "Liger-Kernel's apply_liger_kernel_to_gemma4_text")
    from liger_kernel.transformers import apply_liger_kernel_to_gemma4_text

    model = _model(config, dtype, device, "sdpa")
    apply_liger_kernel_to_gemma4_text(model=model)
    return model


def axolotl_fused_attn(config: dict, dtype: torch.dtype, device: str) -> torch.nn.Module:
    _triton_device(device, "axolotl's patch_gemma4_fused_attn")
    from axolotl.monkeypatch.models.gemma4.fused_attn import patch_gemma4_fused_attn

    patch_gemma4_fused_attn(install_shared_kv_workaround=True)  # class-level, idempotent per class attribute
    return _model(config, dtype, device, "eager")
