"""Standalone check of liger_backend.py and axolotl_backend.py, without gemma4_conform.

Each wrapped op's output and every input/weight gradient is compared with a plain-PyTorch
implementation of the contract (reference/layer_ops.h; the same math as reference/ops.cpp), in
the test dtype, and both are compared with the same contract evaluated in float64 on the same
(rounded) inputs, the "truth". Per tensor it prints

    |w-r|   max |wrapper - reference|              (both in the test dtype)
    err_w   max |wrapper - truth|
    err_r   max |reference - truth|                (the reference's own rounding)
    ratio   err_w / max(err_r, ulp floor)          ("!" when above 4: look closer)
    scale   max |truth|

and per case whether the inputs and upstream gradients are left untouched, and whether a second
run gives bitwise-equal results.

Run on CPU through Triton's interpreter (the third-party packages on PYTHONPATH, never in .venv):

    TRITON_INTERPRET=1 PYTHONPATH=/tmp/tp .venv/bin/python impl/third_party/check_wrappers.py

or on a CUDA machine without TRITON_INTERPRET (then no interpreter shims are installed).
Options: --dtypes f32,bf16[,f16]   --only liger|axolotl

Under TRITON_INTERPRET=1 the script patches Triton's interpreter (test harness only; the wrappers
and the packages are untouched; see _install_interpreter_shims): the interpreter of Triton 3.6
does not run these kernels as they are, and its bf16 arithmetic is not the GPU's.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
import types
from pathlib import Path

import torch
import torch.nn.functional as F

INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"
DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}
EPS = 1e-6

sys.path.insert(0, str(Path(__file__).resolve().parent))


# ---------------------------------------------------------------------------------------------
# Triton interpreter shims (TRITON_INTERPRET=1 only)
# ---------------------------------------------------------------------------------------------

def _install_interpreter_shims(kernel_modules):
    """Make Triton 3.6's interpreter run Liger's and axolotl's kernels with GPU semantics.

    1. Float scalar arguments: compiled Triton passes a Python float as an fp32 scalar; the
       interpreter passes the Python float itself, so Liger's `eps.to(tl.float32)` fails. Floats
       become fp32 scalars here.
    2. tensor.__index__: the interpreter does int(ndarray of shape (1,)), which NumPy 2.4 refuses
       (Liger's backward loops `for row_idx in range(row_start, row_end)`).
    3. bf16: the interpreter stores bf16 as uint16 and (a) rounds fp32 -> bf16 toward zero, (b)
       runs bf16 (op) bf16 on the raw uint16 bits (garbage: Liger's geglu multiplies two bf16
       rows). Here conversions round to nearest even (torch) and bf16 arithmetic is done in fp32
       and rounded once, as the GPU does.
    4. libdevice: `triton.language.extra.libdevice` has only stubs (returning None) under the
       interpreter; the kernels' module-level `rsqrt` / `tanh` become NumPy fp32 versions.
    5. torch.library.wrap_triton refuses the interpreter's InterpretedFunction (axolotl): it is an
       identity for eager calls, so it is replaced by one.
    6. The autotuner times configs through a GPU driver that does not exist: timing is skipped
       (the first config runs; num_warps/num_stages mean nothing to the interpreter).
    7. axolotl's backward sizes its grid with torch.cuda.get_device_properties(X.device).
       multi_processor_count, which fails for a CPU tensor: 4 "SMs" are reported for CPU devices.
    """
    import numpy as np
    import triton.language as tl
    import triton.runtime.autotuner as autotuner
    import triton.runtime.interpreter as ti

    TH = ti.TensorHandle

    orig_cvt = ti._implicit_cvt

    def implicit_cvt(arg):  # 1
        if isinstance(arg, float):
            return tl.tensor(TH(np.array([arg], dtype=np.float32), tl.float32), tl.float32)
        return orig_cvt(arg)

    ti._implicit_cvt = implicit_cvt

    orig_patch_tensor = ti._patch_lang_tensor

    def patch_tensor(tensor, scope):  # 2
        orig_patch_tensor(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(np.asarray(self.handle.data).reshape(-1)[0]))

    ti._patch_lang_tensor = patch_tensor

    def to_bf16_bits(a):  # fp32 ndarray -> bf16 bits (uint16), round to nearest even
        return torch.from_numpy(np.array(a, dtype=np.float32)).to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)

    def from_bf16_bits(u):
        return torch.from_numpy(np.array(u, dtype=np.uint16).view(np.int16)).view(torch.bfloat16).float().numpy()

    IB = ti.InterpreterBuilder
    orig_cast, orig_fp_to_fp, orig_binary = IB.cast_impl, IB.create_fp_to_fp, IB.binary_op

    def cast_impl(self, src, dst_type):  # 3a
        s, d = src.dtype.scalar, dst_type.scalar
        if s == tl.float32 and d == tl.bfloat16:
            return TH(to_bf16_bits(src.data), tl.bfloat16)
        if s == tl.bfloat16 and d == tl.float32:
            return TH(from_bf16_bits(src.data), tl.float32)
        return orig_cast(self, src, dst_type)

    def fp_to_fp(self, src, dst_type, rounding_mode):
        both = (tl.float32, tl.bfloat16)
        if src.dtype.scalar in both and dst_type.scalar in both and rounding_mode is None:
            return cast_impl(self, src, dst_type)
        return orig_fp_to_fp(self, src, dst_type, rounding_mode)

    def binary_op(self, lhs, rhs, op):  # 3b
        if lhs.dtype.scalar == tl.bfloat16 and rhs.dtype.scalar == tl.bfloat16:
            out = op(from_bf16_bits(lhs.data), from_bf16_bits(rhs.data))
            return TH(out, tl.int1) if out.dtype == np.bool_ else TH(to_bf16_bits(out), tl.bfloat16)
        return orig_binary(self, lhs, rhs, op)

    IB.cast_impl, IB.create_fp_to_fp, IB.binary_op = cast_impl, fp_to_fp, binary_op

    def fp32_unary(fn):  # 4
        def f(x):
            assert x.handle.dtype.scalar == tl.float32, f"libdevice shim: fp32 only, got {x.handle.dtype}"
            return tl.tensor(TH(fn(x.handle.data).astype(np.float32), tl.float32), x.type)
        return f

    for m in kernel_modules:
        if hasattr(m, "rsqrt"):
            m.rsqrt = fp32_unary(lambda a: np.float32(1) / np.sqrt(a))
        if hasattr(m, "tanh"):
            m.tanh = fp32_unary(np.tanh)
        if hasattr(m, "wrap_triton"):  # 5
            m.wrap_triton = lambda kernel: kernel

    autotuner.Autotuner._bench = lambda self, *args, config, **meta: [0.0, 0.0, 0.0]  # 6

    orig_props = torch.cuda.get_device_properties

    def device_properties(device=None):  # 7
        if device is not None and torch.device(device).type == "cpu":
            return types.SimpleNamespace(multi_processor_count=4)
        return orig_props(device)

    torch.cuda.get_device_properties = device_properties


# ---------------------------------------------------------------------------------------------
# The contract in plain PyTorch (reference/ops.cpp, reference/layer_ops.cpp)
# ---------------------------------------------------------------------------------------------

def ref_rms_norm(x, weight, eps):
    compute = torch.float64 if x.dtype == torch.float64 else torch.float32
    xc = x.to(compute)
    out = xc * torch.pow(xc.pow(2).mean(-1, keepdim=True) + eps, -0.5)
    if weight is not None:
        out = out * weight.to(compute)
    return out.to(x.dtype)


def ref_rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def ref_apply_rope(x, cos, sin):  # x [B, S, H, D]; cos, sin [S, D]
    return x * cos[:, None, :] + ref_rotate_half(x) * sin[:, None, :]


def ref_qk_norm_rope(q, k, v, q_norm, k_norm, rope, eps):
    q_out = ref_apply_rope(ref_rms_norm(q, q_norm, eps), rope.cos, rope.sin)
    if k is None:
        return q_out, None, None
    v_raw = k if v is None else v
    return (q_out, ref_apply_rope(ref_rms_norm(k, k_norm, eps), rope.cos, rope.sin).transpose(1, 2),
            ref_rms_norm(v_raw, None, eps).transpose(1, 2))


def ref_geglu(gate, up):
    return F.gelu(gate, approximate="tanh") * up


def rope_table(kind, head_dim, seq_len, dtype, device):
    """reference/ops.cpp rope_table: sliding 'default' (theta 1e4) or full 'proportional'
    (theta 1e6, partial_rotary_factor 0.25, zero inv_freq for the unrotated half-dims)."""
    f32 = dict(dtype=torch.float32, device=device)
    if kind == "default":
        inv_freq = 1.0 / torch.pow(1e4, torch.arange(0, head_dim, 2, **f32) / head_dim)
    else:
        rotated = int(0.25 * head_dim / 2)
        inv_freq = 1.0 / torch.pow(1e6, torch.arange(0, 2 * rotated, 2, **f32) / head_dim)
        inv_freq = torch.cat((inv_freq, torch.zeros(head_dim // 2 - rotated, **f32)))
    freqs = torch.outer(torch.arange(seq_len, **f32), inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    return types.SimpleNamespace(cos=emb.cos().to(dtype), sin=emb.sin().to(dtype))


# ---------------------------------------------------------------------------------------------
# Comparison machinery
# ---------------------------------------------------------------------------------------------

SUSPECT_RATIO = 4.0
findings = []


def _as_list(x):
    return list(x) if isinstance(x, (tuple, list)) else [x]


def run_op(fn, inputs, grad_outputs):
    """Forward and backward of fn(*inputs): (outputs, grads of the differentiable inputs)."""
    outs = _as_list(fn(*inputs))
    diff_inputs = [t for t in inputs if isinstance(t, torch.Tensor) and t.requires_grad]
    pairs = [(o, g) for o, g in zip(outs, grad_outputs) if o is not None]
    grads = torch.autograd.grad([o for o, _ in pairs], diff_inputs, [g for _, g in pairs], allow_unused=True)
    return [o.detach() if o is not None else None for o in outs], list(grads)


def leaf(t, requires_grad=True):
    """A new leaf with t's values and t's strides (a non-contiguous view stays non-contiguous)."""
    copy = torch.empty_strided(t.size(), t.stride(), dtype=t.dtype, device=t.device)
    return copy.copy_(t.detach()).requires_grad_(requires_grad)


def to_truth(args):
    out = []
    for a in args:
        if isinstance(a, torch.Tensor):
            out.append(leaf(a.double(), a.requires_grad))
        elif isinstance(a, types.SimpleNamespace):
            out.append(types.SimpleNamespace(cos=a.cos.double(), sin=a.sin.double()))
        else:
            out.append(a)
    return out


def fresh(args):
    out = []
    for a in args:
        out.append(leaf(a, a.requires_grad) if isinstance(a, torch.Tensor) else a)
    return out


def compare(op, case, dtype, wrapped, reference, args, out_names, in_names, grad_outputs):
    """Prints one block of rows; records suspect rows in `findings`."""
    snapshot = [a.detach().clone() if isinstance(a, torch.Tensor) else None for a in args]
    go_snapshot = [g.clone() for g in grad_outputs]
    w_args = fresh(args)
    w_out, w_grads = run_op(wrapped, w_args, grad_outputs)
    intact = all(s is None or torch.equal(s, a.detach()) for s, a in zip(snapshot, w_args))
    go_intact = all(torch.equal(s, g) for s, g in zip(go_snapshot, grad_outputs))
    w_out2, w_grads2 = run_op(wrapped, fresh(args), grad_outputs)
    deterministic = all((a is None and b is None) or torch.equal(a, b)
                        for a, b in zip(w_out + w_grads, w_out2 + w_grads2))
    r_out, r_grads = run_op(reference, fresh(args), grad_outputs)
    t_out, t_grads = run_op(reference, to_truth(args), [g.double() for g in grad_outputs])

    tensor_names = [f"out:{n}" for n in out_names] + [f"grad:{n}" for n in in_names]
    ulp = torch.finfo(dtype).eps
    print(f"\n{op} {case} [{str(dtype).replace('torch.', '')}]  inputs intact: {'yes' if intact else 'NO'}"
          f"  upstream grads intact: {'yes' if go_intact else 'NO'}  bitwise repeatable: {'yes' if deterministic else 'NO'}")
    if not intact or not go_intact or not deterministic:
        findings.append(f"{op} {case} {dtype}: inputs intact={intact}, upstream grads intact={go_intact}, "
                        f"repeatable={deterministic}")
    for name, w, r, t in zip(tensor_names, w_out + w_grads, r_out + r_grads, t_out + t_grads):
        if w is None and r is None:
            continue
        if w is None or r is None:
            print(f"  {name:14s} MISSING (wrapper {'None' if w is None else 'tensor'}, reference {'None' if r is None else 'tensor'})")
            findings.append(f"{op} {case} {dtype} {name}: missing")
            continue
        if w.shape != r.shape or w.dtype != r.dtype:
            print(f"  {name:14s} SHAPE/DTYPE wrapper {tuple(w.shape)} {w.dtype} vs reference {tuple(r.shape)} {r.dtype}")
            findings.append(f"{op} {case} {dtype} {name}: shape/dtype mismatch")
            continue
        w64, r64, t64 = w.double(), r.double(), t.double()
        d_wr = (w64 - r64).abs().max().item()
        err_w = (w64 - t64).abs().max().item()
        err_r = (r64 - t64).abs().max().item()
        scale = t64.abs().max().item()
        floor = ulp * max(scale, 1e-30) / 2
        ratio = err_w / max(err_r, floor)
        flag = "!" if ratio > SUSPECT_RATIO else " "
        print(f"  {name:14s} |w-r| {d_wr:9.3e}  err_w {err_w:9.3e}  err_r {err_r:9.3e}  ratio {ratio:6.2f}{flag} "
              f"scale {scale:8.3e}")
        if flag == "!":
            findings.append(f"{op} {case} {dtype} {name}: err_w {err_w:.3e} vs err_r {err_r:.3e} (ratio {ratio:.1f})")


def randn(*shape, dtype, device, gen, scale=1.0, shift=0.0):
    return (torch.randn(*shape, generator=gen, dtype=torch.float32) * scale + shift).to(device=device, dtype=dtype)


# ---------------------------------------------------------------------------------------------
# Cases
# ---------------------------------------------------------------------------------------------

def check_liger(dtypes, device):
    import liger_backend as lb

    print(f"\n==== {lb._impl_note()}")
    gen = torch.Generator().manual_seed(1234)
    for dtype in dtypes:
        large = [(2, 300, 1536), (1, 129, 5376)] if device == "cuda" else []  # released hidden sizes
        for shape in [(2, 7, 64), (1, 7, 256), (1, 7, 512), (3, 5, 33), (2, 37, 48)] + large:
            x = leaf(randn(*shape, dtype=dtype, device=device, gen=gen))
            w = leaf(randn(shape[-1], dtype=dtype, device=device, gen=gen, scale=0.5, shift=1.0))
            go = [randn(*shape, dtype=dtype, device=device, gen=gen)]
            name = "x".join(map(str, shape))
            compare("rms_norm", f"{name} weighted", dtype, lb.rms_norm, ref_rms_norm, [x, w, EPS], ["y"], ["x", "w"], go)
            compare("rms_norm", f"{name} scale-free (Liger torch fallback)", dtype, lb.rms_norm, ref_rms_norm,
                    [x, None, EPS], ["y"], ["x"], go)
            compare("rms_norm", f"{name} scale-free (Liger kernel, W=None)", dtype, lb.rms_norm_noscale_kernel,
                    ref_rms_norm, [x, None, EPS], ["y"], ["x"], go)
        # >= 32768 rows of <= 256 columns: Liger switches to its _block_rms_norm_* kernels (16 rows per
        # program; the backward strides over rows by programs * 16). Liger sizes the backward grid by
        # the SM count, and takes 1 for a CPU device: under the interpreter one program sums dW over
        # all 32768 rows in sequence, so fp32 grad:w is a few times the reference's error there (on
        # an H200, 132 partial sums, it is not).
        shape = (2, 16384, 48)
        x = leaf(randn(*shape, dtype=dtype, device=device, gen=gen))
        w = leaf(randn(shape[-1], dtype=dtype, device=device, gen=gen, scale=0.5, shift=1.0))
        go = [randn(*shape, dtype=dtype, device=device, gen=gen)]
        compare("rms_norm", "2x16384x48 weighted (block kernels)", dtype, lb.rms_norm, ref_rms_norm, [x, w, EPS], ["y"],
                ["x", "w"], go)
        compare("rms_norm", "2x16384x48 scale-free (Liger kernel, W=None; block kernels)", dtype,
                lb.rms_norm_noscale_kernel, ref_rms_norm, [x, None, EPS], ["y"], ["x"], go)
        large = [(1, 301, 1031), (2, 64, 6144)] if device == "cuda" else []  # the suite's CUDA case, a wide one
        for shape in [(2, 37, 48), (3, 7, 33), (1, 7, 256), (1, 7, 512)] + large:
            gate = leaf(randn(*shape, dtype=dtype, device=device, gen=gen, scale=2.0))
            up = leaf(randn(*shape, dtype=dtype, device=device, gen=gen))
            go = [randn(*shape, dtype=dtype, device=device, gen=gen)]
            name = "x".join(map(str, shape))
            compare("geglu", name, dtype, lb.geglu, ref_geglu, [gate, up], ["y"], ["gate", "up"], go)
        # LigerGELUMulFunction as LigerGEGLUMLP calls it: expected to overwrite gate and up.
        shape = (3, 7, 33)
        gate = leaf(randn(*shape, dtype=dtype, device=device, gen=gen, scale=2.0))
        up = leaf(randn(*shape, dtype=dtype, device=device, gen=gen))
        go = [randn(*shape, dtype=dtype, device=device, gen=gen)]
        compare("geglu_raw", "3x7x33 (no input copies)", dtype, lb.geglu_raw, ref_geglu, [gate, up], ["y"],
                ["gate", "up"], go)


def qkv_inputs(B, S, Hq, Hkv, D, kind, dtype, device, gen, noncontiguous=False):
    if noncontiguous:  # q, k, v as views of one fused projection [B, S, (Hq + 2 Hkv) D]
        fused = randn(B, S, (Hq + 2 * Hkv) * D, dtype=dtype, device=device, gen=gen, scale=3.0)
        q = fused[..., :Hq * D].unflatten(-1, (Hq, D))
        k = fused[..., Hq * D:(Hq + Hkv) * D].unflatten(-1, (Hkv, D))
        v = fused[..., (Hq + Hkv) * D:].unflatten(-1, (Hkv, D))
        q, k, v = (leaf(t) for t in (q, k, v))  # non-contiguous leaves
    else:
        q = leaf(randn(B, S, Hq, D, dtype=dtype, device=device, gen=gen, scale=3.0))
        k = leaf(randn(B, S, Hkv, D, dtype=dtype, device=device, gen=gen, scale=3.0)) if kind != "kv_shared" else None
        v = leaf(randn(B, S, Hkv, D, dtype=dtype, device=device, gen=gen, scale=3.0)) if kind == "normal" else None
    q_norm = leaf(randn(D, dtype=dtype, device=device, gen=gen, scale=0.5, shift=1.0))
    k_norm = leaf(randn(D, dtype=dtype, device=device, gen=gen, scale=0.5, shift=1.0)) if kind != "kv_shared" else None
    return q, k, v, q_norm, k_norm


def check_axolotl(dtypes, device):
    import axolotl_backend as ab

    print(f"\n==== axolotl {ab.AXOLOTL_VERSION}: axolotl.kernels.gemma4_fused_rope "
          "fused_rms_norm_rope / fused_rms_norm_noscale")
    gen = torch.Generator().manual_seed(4321)
    geometries = [  # B, S, Hq, Hkv, D, kind, rope type
        (2, 7, 4, 2, 16, "normal", "default"),
        (1, 7, 4, 2, 64, "normal", "default"),
        (2, 7, 4, 1, 64, "k_eq_v", "proportional"),
        (2, 7, 4, 0, 16, "kv_shared", "default"),
        (2, 37, 4, 2, 16, "normal", "default"),
        (2, 7, 8, 2, 256, "normal", "default"),
        (1, 7, 8, 2, 512, "normal", "proportional"),
        (1, 7, 8, 1, 512, "k_eq_v", "proportional"),
        (1, 7, 8, 0, 512, "kv_shared", "proportional"),
    ]
    if device == "cuda":  # the suite's CUDA op_sweep geometries
        geometries += [
            (2, 300, 8, 2, 256, "normal", "default"),
            (1, 129, 8, 2, 512, "normal", "proportional"),
            (1, 257, 8, 1, 512, "k_eq_v", "proportional"),
            (1, 257, 8, 0, 512, "kv_shared", "proportional"),
        ]
    for dtype in dtypes:
        for B, S, Hq, Hkv, D, kind, rope_kind in geometries + [(2, 7, 4, 2, 64, "noncontiguous", "default")]:
            noncontig = kind == "noncontiguous"
            q, k, v, q_norm, k_norm = qkv_inputs(B, S, Hq, Hkv, D, "normal" if noncontig else kind, dtype, device, gen,
                                                 noncontiguous=noncontig)
            rope = rope_table(rope_kind, D, S, dtype, device)
            go = [randn(B, S, Hq, D, dtype=dtype, device=device, gen=gen)]
            if k is not None:
                go += [randn(B, Hkv, S, D, dtype=dtype, device=device, gen=gen) for _ in range(2)]
            in_names = ["q"] + (["k"] if k is not None else []) + (["v"] if v is not None else []) + ["q_norm"] + \
                (["k_norm"] if k_norm is not None else [])
            case = f"B{B} S{S} Hq{Hq} Hkv{Hkv} D{D} {kind} {rope_kind}"
            compare("qk_norm_rope", case, dtype, ab.qk_norm_rope, ref_qk_norm_rope,
                    [q, k, v, q_norm, k_norm, rope, EPS], ["q", "k", "v"][:len(go)], in_names, go)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dtypes", default="f32,bf16")
    parser.add_argument("--only", choices=("liger", "axolotl"))
    args = parser.parse_args()
    dtypes = [DTYPES[d] for d in args.dtypes.split(",")]
    if INTERPRET:
        device = "cpu"
    elif torch.cuda.is_available():
        device = "cuda"
    else:
        sys.exit("check_wrappers.py: no CUDA device; run with TRITON_INTERPRET=1 for the CPU interpreter")

    # Import the kernels (through the wrappers) before the shims, which patch their modules.
    import liger_backend  # noqa: F401
    import axolotl_backend  # noqa: F401
    if INTERPRET:
        import importlib
        _install_interpreter_shims([importlib.import_module(m) for m in (
            "liger_kernel.ops.rms_norm", "liger_kernel.ops.geglu", "axolotl.kernels.gemma4_fused_rope")])

    import triton
    print(f"torch {torch.__version__}, triton {triton.__version__}, device {device}"
          f"{' (TRITON_INTERPRET=1, interpreter shims installed)' if INTERPRET else ''}")
    start = time.time()
    if args.only in (None, "liger"):
        check_liger(dtypes, device)
    if args.only in (None, "axolotl"):
        check_axolotl(dtypes, device)
    print(f"\n{len(findings)} finding(s) in {time.time() - start:.0f}s" + (":" if findings else ""))
    for f in findings:
        print("  - " + f)


if __name__ == "__main__":
    main()
