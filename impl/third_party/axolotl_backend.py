"""axolotl's fused Triton q/k RMSNorm + RoPE and scale-free v norm as a gemma4_conform backend
(qk_norm_rope).

What is wrapped (axolotl 0.19.0, see requirements.txt): the module
``axolotl.kernels.gemma4_fused_rope``, which axolotl's Gemma-4 attention patch
(``axolotl.monkeypatch.models.gemma4.fused_attn.patch_gemma4_fused_attn``) calls:

- q and k: ``fused_rms_norm_rope(x, weight, cos, sin, eps, unit_offset=False)``, one kernel for
  RMSNorm (fp32, scale ``w``: unit_offset False, as the Gemma-4 patch leaves it) and RoPE
  (rotate_half convention) with a single rounding to the input dtype; its backward is a second
  kernel that also returns the weight gradient.
- v: ``fused_rms_norm_noscale(x, eps)``, RMSNorm without a weight.

The sequence is the one of ``fused_attn.py``: q -> norm+rope; on KV-shared layers nothing more;
otherwise k -> norm+rope, v (the raw k on K=V layers, where v_proj is None) -> scale-free norm,
k and v transposed to [B, Hkv, S, D]. axolotl covers the whole op, so nothing is filled in with
plain PyTorch.

Import: ``axolotl/__init__.py`` only reads the package version and ``axolotl/kernels/__init__.py``
is empty, so importing the kernel module by its package name pulls in only torch, triton and
liger_kernel (``liger_kernel.ops.utils``, ``liger_kernel.utils``: axolotl reuses Liger's
calculate_settings, compare_version, torch_to_triton_dtype, is_npu_available), plus packaging
through Liger. Do not also load the file by path: it registers torch.library ops
(``axolotl::fused_rms_norm_rope_fwd``, ...) at import, and a second copy fails to register them.

``qk_norm_rope`` imports without gemma4_conform; only ``backend()`` needs it.
"""
from __future__ import annotations

import torch
from axolotl.kernels.gemma4_fused_rope import fused_rms_norm_noscale, fused_rms_norm_rope

AXOLOTL_VERSION = "0.19.0"


def _rope_tables(rope):
    # Layout adaptation: the suite's tables are [S, D] (cat(freqs, freqs), rotate_half layout,
    # model dtype), which is HF's convention too; the kernel wants (B or 1, S, n_rot) and broadcasts
    # a batch dim of 1 itself. n_rot = D: the full tables are passed, so proportional RoPE's
    # unrotated dims arrive as cos 1 / sin 0 exactly as HF hands them to axolotl (the kernel's own
    # partial-rotary mode, n_rot < D, assumes a rotated prefix, which is not Gemma-4's layout).
    return rope.cos.unsqueeze(0), rope.sin.unsqueeze(0)


def qk_norm_rope(q: torch.Tensor, k, v, q_norm: torch.Tensor, k_norm, rope, eps: float):
    """The contract's qk_norm_rope through axolotl's kernels (see the module docstring)."""
    cos, sin = _rope_tables(rope)
    eps = float(eps)  # the kernels' torch.library schema takes a Python float
    # q [B, S, Hq, D] in and out: the kernel keeps the input layout (axolotl transposes afterwards
    # for its attention; the contract wants q untransposed).
    q_out = fused_rms_norm_rope(q, q_norm, cos, sin, eps=eps)
    if k is None:  # a KV-shared layer: q only (axolotl reads k/v from the shared store)
        return q_out, None, None
    v_raw = k if v is None else v  # K=V layers: the value is the raw key projection, as in fused_attn.py
    # The contract's [B, Hkv, S, D] for k and v: the same transpose(1, 2) views axolotl makes.
    k_out = fused_rms_norm_rope(k, k_norm, cos, sin, eps=eps).transpose(1, 2)
    v_out = fused_rms_norm_noscale(v_raw, eps=eps).transpose(1, 2)
    return q_out, k_out, v_out


def backend():
    import gemma4_conform as gc

    # Triton on CUDA only (the backward also calls torch.cuda.get_device_properties). fp32, bf16
    # and fp16 (torch_to_triton_dtype has exactly those; math in fp32). Any even head dim (RoPE
    # needs n_rot = D even; one row of D columns per program, D <= 65536), so no head-dim list.
    # Deterministic within a process: no atomics; dW is reduced from per-program partials in a
    # fixed order. The backward kernel is autotuned on n_cols (12 num_warps/num_stages configs),
    # and a different pick in another process may round the row reductions differently.
    caps = gc.Capabilities(devices=("cuda",), dtypes=("f32", "bf16", "f16"), deterministic=True)
    return gc.Backend("axolotl-fused-qk-norm-rope", qk_norm_rope=qk_norm_rope, capabilities=caps,
                      description=f"axolotl {AXOLOTL_VERSION}: axolotl.kernels.gemma4_fused_rope."
                      "fused_rms_norm_rope (q, k; unit_offset=False) and fused_rms_norm_noscale (v)")


def backend_unit_offset():
    """Negative control: the same kernels with unit_offset=True, the (1 + w) norm of Gemma 2/3, on
    Gemma-4 (which scales by w). The suite must fail it: proof that axolotl's kernel is what it judges."""
    import gemma4_conform as gc

    def qk(q, k, v, q_norm, k_norm, rope, eps):
        cos, sin = _rope_tables(rope)
        q_out = fused_rms_norm_rope(q, q_norm, cos, sin, eps=float(eps), unit_offset=True)
        if k is None:
            return q_out, None, None
        v_raw = k if v is None else v
        k_out = fused_rms_norm_rope(k, k_norm, cos, sin, eps=float(eps), unit_offset=True).transpose(1, 2)
        return q_out, k_out, fused_rms_norm_noscale(v_raw, eps=float(eps)).transpose(1, 2)

    caps = gc.Capabilities(devices=("cuda",), dtypes=("f32", "bf16", "f16"))
    return gc.Backend("axolotl-unit-offset", qk_norm_rope=qk, capabilities=caps,
                      description="negative control: fused_rms_norm_rope with unit_offset=True (Gemma 2/3) on Gemma-4")
