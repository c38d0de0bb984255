"""Liger-Kernel's Gemma-4 RMSNorm and GeGLU as a gemma4_conform backend (rms_norm, geglu).

What is wrapped (liger-kernel 0.8.5, see requirements.txt): exactly what
``liger_kernel.transformers.apply_liger_kernel_to_gemma4_text(rms_norm=True, geglu=True)`` runs:

- rms_norm, weighted: ``liger_kernel.ops.LigerRMSNormFunction`` with the arguments of
  ``LigerRMSNormForGemma4`` (and of the instance patch ``_patch_rms_norm_module(offset=0.0,
  casting_mode="gemma", in_place=False)``): offset 0.0 (Gemma-4 scales by ``w``, not ``1 + w``),
  casting_mode "gemma" (x and w upcast to fp32, one cast back), in_place False (dX is a new
  tensor, not written over dY), row_mode None.
- rms_norm, scale-free (weight None: the MoE router norm): Liger's Gemma-4 support has no kernel
  for it. ``LigerRMSNormForGemma4(with_scale=False).forward`` falls back to plain PyTorch, and the
  class-level swap routes HF's scale-free norms there, so that is what this backend calls
  (``backend()``). ``backend_noscale_kernel()`` instead sends it through the Triton kernel with
  W=None (``elementwise_affine=False``), a path Liger has but does not use for Gemma-4.
- geglu: ``liger_kernel.ops.LigerGELUMulFunction`` (tanh GELU times up; ``LigerGEGLUMLPForGemma4``
  applies it to gate_proj(x), up_proj(x)).

``liger_kernel.ops`` is the package-level name that Liger's own modules use; it resolves to the
Triton kernels in ``liger_kernel.ops.rms_norm`` / ``liger_kernel.ops.geglu`` on CUDA unless the
environment variable LIGER_KERNEL_IMPL selects another implementation (cutile, cutedsl, ...).
The description of the backend records which module was resolved.

The op functions (``rms_norm``, ``rms_norm_noscale_kernel``, ``geglu``, ``geglu_raw``) import
without gemma4_conform; only the factories (``backend`` and its variants) need it.
"""
from __future__ import annotations

import functools

import torch
from liger_kernel.ops import LigerGELUMulFunction, LigerRMSNormFunction
from liger_kernel.transformers.rms_norm import LigerRMSNormForGemma4

LIGER_KERNEL_VERSION = "0.8.5"

# The arguments apply_liger_kernel_to_gemma4_text gives Liger's RMSNorm (see the module docstring).
GEMMA4_OFFSET = 0.0
GEMMA4_CASTING_MODE = "gemma"
GEMMA4_IN_PLACE = False


@functools.lru_cache(maxsize=None)
def _scale_free_module(dim: int, eps: float) -> LigerRMSNormForGemma4:
    # Liger's own with_scale=False module (no parameters, so one per (dim, eps) serves every device
    # and dtype). Its forward is Liger's plain-PyTorch fallback: this is Liger's code, not ours.
    return LigerRMSNormForGemma4(dim, eps=eps, with_scale=False)


def rms_norm(x: torch.Tensor, weight, eps: float) -> torch.Tensor:
    """The contract's rms_norm as Liger's Gemma-4 support computes it."""
    if weight is None:
        return _scale_free_module(x.shape[-1], float(eps))(x)
    # No adaptation: x of any leading shape (Liger flattens to rows itself), the weight as given.
    return LigerRMSNormFunction.apply(x, weight, float(eps), GEMMA4_OFFSET, GEMMA4_CASTING_MODE, GEMMA4_IN_PLACE, None)


def rms_norm_noscale_kernel(x: torch.Tensor, weight, eps: float) -> torch.Tensor:
    """As rms_norm, but the scale-free norm through Liger's Triton kernel with W=None."""
    return LigerRMSNormFunction.apply(x, weight, float(eps), GEMMA4_OFFSET, GEMMA4_CASTING_MODE, GEMMA4_IN_PLACE, None)


def _check_geglu_shapes(gate: torch.Tensor, up: torch.Tensor) -> None:
    # Liger's kernel walks gate and up with one row stride (c.stride(-2)) after flattening both to
    # [-1, n_cols]: it has no broadcasting. The contract never broadcasts; say so clearly if it does.
    if gate.shape != up.shape:
        raise ValueError(f"liger geglu: gate {tuple(gate.shape)} and up {tuple(up.shape)} must have one shape")


def geglu_raw(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    """LigerGELUMulFunction exactly as LigerGEGLUMLP calls it, with no protection of the inputs.

    Its backward writes dgate and dup over the tensors it saved in forward, which are the caller's
    gate and up themselves when those are contiguous (ensure_contiguous keeps a contiguous tensor),
    and returns them as the gradients. Harmless in LigerGEGLUMLP (gate_proj(x) and up_proj(x) are
    temporaries), but a caller that reuses gate or up after backward reads gradients."""
    _check_geglu_shapes(gate, up)
    return LigerGELUMulFunction.apply(gate, up)


def _private_copy(t: torch.Tensor) -> torch.Tensor:
    # A differentiable copy that is contiguous, so ensure_contiguous keeps it and the kernel's
    # backward overwrites the copy, never the caller's tensor. Values and math are unchanged.
    return t.clone(memory_format=torch.contiguous_format)


def geglu(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    """LigerGELUMulFunction on private copies of gate and up.

    Adaptation (memory, not math): the kernel's backward overwrites its saved inputs with their
    gradients (see geglu_raw). The suite's op checks and determinism checks reuse their inputs, and
    the decoder's PLE gate passes tensors Liger never sees in HF, so the wrapper hands the kernel
    copies. backend_raw_geglu() runs without them."""
    _check_geglu_shapes(gate, up)
    return LigerGELUMulFunction.apply(_private_copy(gate), _private_copy(up))


def _capabilities(gc):
    # Triton on CUDA only (the kernels run on CPU only under TRITON_INTERPRET=1, for testing).
    # Both kernels accept fp32, bf16 and fp16 (rms_norm: gemma casting upcasts to fp32; geglu:
    # the GELU in fp32, the product in the input dtype). Head dims do not apply to these ops; the
    # hidden size is limited only by Triton's block size (65536 columns). Deterministic: no atomics,
    # RMSNorm's dW is reduced from per-program partials in a fixed order, geglu is elementwise.
    return gc.Capabilities(devices=("cuda",), dtypes=("f32", "bf16", "f16"), deterministic=True)


def _impl_note() -> str:
    return (f"liger-kernel {LIGER_KERNEL_VERSION}: rms_norm = {LigerRMSNormFunction.__module__}.LigerRMSNormFunction "
            f"(offset {GEMMA4_OFFSET}, casting_mode {GEMMA4_CASTING_MODE!r}, in_place {GEMMA4_IN_PLACE}); "
            f"geglu = {LigerGELUMulFunction.__module__}.LigerGELUMulFunction")


def backend():
    """Liger as apply_liger_kernel_to_gemma4_text uses it (scale-free norm: Liger's torch fallback)."""
    import gemma4_conform as gc

    return gc.Backend("liger-kernel", rms_norm=rms_norm, geglu=geglu, capabilities=_capabilities(gc),
                      description=_impl_note() + "; scale-free norm: LigerRMSNormForGemma4(with_scale=False) "
                      "(torch fallback); geglu inputs copied (the kernel's backward overwrites them)")


def backend_noscale_kernel():
    """As backend(), with the scale-free norm through Liger's Triton kernel (W=None) too."""
    import gemma4_conform as gc

    return gc.Backend("liger-kernel-noscale-kernel", rms_norm=rms_norm_noscale_kernel, geglu=geglu,
                      capabilities=_capabilities(gc),
                      description=_impl_note() + "; scale-free norm: LigerRMSNormFunction with W=None")


def backend_raw_geglu():
    """As backend(), with geglu exactly as LigerGEGLUMLP calls it (inputs overwritten in backward)."""
    import gemma4_conform as gc

    return gc.Backend("liger-kernel-raw-geglu", rms_norm=rms_norm, geglu=geglu_raw, capabilities=_capabilities(gc),
                      description=_impl_note() + "; geglu inputs NOT copied")


def backend_gemma3_offset():
    """Negative control: Liger's RMSNorm with offset 1.0, the (1 + w) setting of its Gemma 2/3
    support, on Gemma-4 (which scales by w). The suite must fail it: proof that the kernel, not a
    fallback, is what it judges."""
    import gemma4_conform as gc

    def norm(x, weight, eps):
        if weight is None:
            return rms_norm(x, None, eps)
        return LigerRMSNormFunction.apply(x, weight, float(eps), 1.0, GEMMA4_CASTING_MODE, GEMMA4_IN_PLACE, None)

    return gc.Backend("liger-kernel-gemma3-offset", rms_norm=norm, geglu=geglu, capabilities=_capabilities(gc),
                      description="negative control: LigerRMSNormFunction with offset 1.0 (Gemma 2/3) on Gemma-4")
