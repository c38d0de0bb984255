#!/usr/bin/env python3
"""The weights a quantized GGUF file holds, as the Hugging Face checkpoint they were made from,
dequantized to fp32: what the reference must run to judge a quantized implementation on the
weights it actually loads (issue "Quantized Gemma-4"; golden/FORMAT.md, "Quantized subjects").

    python golden/generators/gguf_dequantized.py CHECKPOINT --float MODEL.f32.gguf \
        --quantized MODEL.Q4_0.gguf --out DIR

writes DIR/model.safetensors (every checkpoint tensor, fp32, replaced by the dequantized values of
the GGUF tensor made from it), DIR/config.json (and inputs.safetensors where the checkpoint has
them: a golden/transformers/ case stays a case) and DIR/quantization.json (per tensor: its GGUF
name and type, how far quantization moved it (max |w - q| against max |w|, NMSE) and that against
the most a correct quantizer to its type can move it (`type_bound`; exit 1 naming the tensors that
moved further: a tensor zeroed, scaled or foreign to the checkpoint), and whether it was left
unquantized: stored in a float type in a file that declares a quantized one (general.file_type),
though llama.cpp's quantizer quantizes such a tensor (a weight of two or more dimensions, none of the
names it keeps as they are: norms, MoE routers, ...) and its rows are whole 32-element blocks (exit
1 too: NVIDIA/Model-Optimizer #1173's fused experts the quantizer skipped).
Then
`checkpoint_goldens.py DIR` makes the goldens the quantized implementation is judged against.

Names. A converter (llama.cpp's convert_hf_to_gguf.py) renames tensors, may reshape them, and adds
some of its own (llama.cpp's rope_freqs); it does not change the values of a tensor it stores in
F32. So the F32 GGUF of the same checkpoint, converted the same way, is the bridge: each of its
tensors holds exactly the values of one checkpoint tensor (several where the checkpoint holds equal
tensors), and the quantized GGUF (llama-quantize of that F32 file, or the converter's own
--outtype q8_0) holds the same names. Matching by value rather than by a name table keeps this
independent of the converter's naming, which changes between releases; a converter that changed a
tensor's values (a norm stored as 1 + w) leaves that checkpoint tensor unmatched, and that is an
error naming it, never a silent float weight in the reference.

Only numpy, safetensors and gguf (gguf-py, whose quants module dequantizes every GGML type; PyPI
`gguf`, the same code as llama.cpp's gguf-py).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np


@dataclass
class GgufTensor:
    name: str
    ggml_type: str  # GGMLQuantizationType name: F32, F16, Q8_0, Q4_K, ...
    values: np.ndarray  # fp32, flattened in the file's row-major order
    shape: tuple[int, ...] = ()  # ggml's order: shape[0] is the row length


@dataclass
class TensorRecord:
    """One checkpoint tensor of the dequantized checkpoint, and what quantization did to it."""
    checkpoint_name: str
    stored_name: str  # the file's name for it (a GGUF tensor's, an MLX checkpoint key)
    stored_type: str  # how the file stores it: a GGML type (F32, Q8_0, Q4_K), "mlx affine 4-bit g64"
    max_abs_change: float  # max |w - dequantized|
    max_abs: float  # max |w|
    nmse: float  # sum (w - dequantized)^2 / sum w^2 (0 for an all-zero w)
    bound_ratio: float | None  # the largest |w - q| over its bound (type_bound); None: no bound for the type
    left_unquantized: bool = False  # a float type where the file's declared quantization applies (left_unquantized)


# The most a correct quantizer moves an element, per block of 32 consecutive elements of a row
# (ggml's QK8_0 = QK4_0 = 32), from the block's largest magnitude a (llama.cpp's reference
# quantizers, ggml-quants.c; gguf-py's are the same arithmetic):
#   Q8_0: d = a / 127 stored in f16, q = round(x / d): half a step, plus |q| <= 127 times d's f16
#         rounding r(d): d / 2 + 127 r(d).
#   Q4_0: d = -m / 8 for the signed extreme m, codes -8..7: the side opposite m clamps at 7 steps,
#         one step off, plus 8 times d's f16 rounding: a / 8 + 8 r(a / 8).
#   F16: the element's own rounding r(x); BF16 half its 2^-7 spacing; F32: exact.
# r(v) = max(2^-11 |v|, 2^-25): f16 rounds to nearest with 11 significant bits, and below 2^-14
# (subnormal) to multiples of 2^-24, so a tiny value's rounding is not relative.
# Other types (the K-quants' super-blocks with quantized scales and minimums) have no bound here.
F16_ROUNDING = 2.0 ** -11
BLOCK = 32


def type_bound(w: np.ndarray, ggml_type: str) -> np.ndarray | None:
    """Per element, the most quantization to `ggml_type` may move it; None where the type has no bound here."""
    flat = np.abs(w.astype(np.float64).reshape(-1))
    if ggml_type == "F32":
        return np.zeros_like(flat)
    if ggml_type == "F16":
        return f16_rounding(flat)
    if ggml_type == "BF16":
        return flat * 2.0 ** -8
    if ggml_type not in ("Q8_0", "Q4_0") or flat.size % BLOCK:
        return None
    amax = np.repeat(flat.reshape(-1, BLOCK).max(axis=1), BLOCK)
    if ggml_type == "Q8_0":
        return amax / 127 / 2 + 127 * f16_rounding(amax / 127)
    return amax / 8 + 8 * f16_rounding(amax / 8)


# A framework's float dtype names (MLX, torch) as GGML's, for type_bound.
FLOAT_TYPES = {"float32": "F32", "float16": "F16", "bfloat16": "BF16"}


def float_bound(w: np.ndarray, dtype_name: str) -> np.ndarray:
    """type_bound of an unquantized tensor stored in a framework's float dtype ("bfloat16", ...)."""
    return type_bound(w, FLOAT_TYPES[dtype_name])


def f16_rounding(v: np.ndarray) -> np.ndarray:
    """The most rounding v to f16 moves it (r above)."""
    return np.maximum(v * F16_ROUNDING, 2.0 ** -25)


def bound_ratio(w: np.ndarray, q: np.ndarray, ggml_type: str) -> float | None:
    """max |w - q| / bound over the tensor (0/0 counts as 0): above 1, the file does not hold a
    quantization of w to its type (a zeroed or foreign tensor, scales applied twice)."""
    bound = type_bound(w, ggml_type)
    if bound is None:
        return None
    change = np.abs(w.astype(np.float64).reshape(-1) - q.astype(np.float64).reshape(-1))
    over = np.where(bound > 0, change / np.where(bound > 0, bound, 1.0), np.where(change > 0, np.inf, 0.0))
    return float(over.max(initial=0.0))


def read_gguf(path: Path) -> dict[str, GgufTensor]:
    """Every tensor of a GGUF file, dequantized to fp32."""
    from gguf import GGUFReader
    from gguf.quants import dequantize

    tensors = {}
    for t in GGUFReader(str(path)).tensors:
        values = np.asarray(dequantize(t.data, t.tensor_type), dtype=np.float32).reshape(-1)
        tensors[t.name] = GgufTensor(t.name, t.tensor_type.name, values, tuple(int(n) for n in t.shape))
    return tensors


def declared_type(path: Path) -> str | None:
    """The file's general.file_type as gguf-py names it (MOSTLY_Q4_0, MOSTLY_F16, ...); None without one."""
    from gguf import GGUFReader, LlamaFileType

    field = GGUFReader(str(path)).fields.get("general.file_type")
    return None if field is None else LlamaFileType(int(field.contents())).name


# What llama.cpp's quantizer leaves in its float type whatever the file's type (llama-quant.cpp's
# tensor_allows_quantization, 0.3.36's vendored llama.cpp): tensors of one dimension, names not
# ending in "weight", norms, MoE routers, Gemma-3n/4's small altup / laurel tensors and per-layer
# model projection, position embeddings and token types. And rows that are not whole blocks of 32
# fall back to F16 (the 26B-A4B's reduced-width experts' down_proj, rows of 16).
KEPT_AS_IS = ("_norm.weight", "ffn_gate_inp.weight", "altup", "laurel", "per_layer_model_proj", "position_embd.weight",
              "token_types.weight")
FLOAT_FILE_TYPES = ("ALL_F32", "MOSTLY_F16", "MOSTLY_BF16")


def left_unquantized(t: GgufTensor, file_type: str | None) -> bool:
    """Stored in a float type although the file declares a quantized type that llama.cpp's quantizer
    would have given it."""
    if file_type is None or file_type in FLOAT_FILE_TYPES or t.ggml_type not in ("F32", "F16", "BF16"):
        return False
    quantizable = len(t.shape) >= 2 and t.name.endswith("weight") and not any(k in t.name for k in KEPT_AS_IS)
    return quantizable and t.shape[0] % BLOCK == 0


def fingerprint(values: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(values, dtype=np.float32).tobytes()).hexdigest()


class MatchError(ValueError):
    """The two GGUF files and the checkpoint do not describe one conversion; the message names the tensors."""


def dequantized_checkpoint(float_gguf: dict[str, GgufTensor], quantized_gguf: dict[str, GgufTensor],
                           checkpoint: dict[str, np.ndarray], file_type: str | None = None
                           ) -> tuple[dict[str, np.ndarray], list[TensorRecord], list[str]]:
    """(the checkpoint with every tensor dequantized, a record per tensor, the GGUF tensors that come
    from no checkpoint tensor: the converter's own); `file_type`, the quantized file's declared type."""
    by_value: dict[str, list[str]] = {}
    for name, w in checkpoint.items():
        by_value.setdefault(fingerprint(np.asarray(w, dtype=np.float32).reshape(-1)), []).append(name)
    if float_gguf.keys() != quantized_gguf.keys():
        only = sorted(float_gguf.keys() ^ quantized_gguf.keys())
        raise MatchError(f"the F32 and quantized GGUF files hold different tensors (not one conversion): {', '.join(only)}")
    not_float = sorted(n for n, t in float_gguf.items() if t.ggml_type != "F32")
    if not_float:
        raise MatchError(f"the bridge file must hold every tensor in F32; these are not: {', '.join(not_float)}")

    state: dict[str, np.ndarray] = {}
    source: dict[str, str] = {}  # checkpoint name -> the GGUF tensor its values came from
    records, generated = [], []
    for gguf_name in sorted(float_gguf):
        names = by_value.get(fingerprint(float_gguf[gguf_name].values), [])
        if not names:
            generated.append(gguf_name)
            continue
        quantized = quantized_gguf[gguf_name]
        for name in names:
            w = np.asarray(checkpoint[name], dtype=np.float32)
            q = quantized.values.reshape(w.shape)
            if name in state and not np.array_equal(state[name], q):
                # Equal checkpoint tensors stored twice and quantized differently (mixed types):
                # which one the implementation reads for this name is not knowable from values.
                raise MatchError(f"checkpoint tensor {name} has equal values in GGUF tensors {source[name]} and "
                                 f"{gguf_name}, quantized differently ({quantized_gguf[source[name]].ggml_type}, "
                                 f"{quantized.ggml_type}): the mapping is ambiguous")
            if name in state:
                continue
            state[name], source[name] = q, gguf_name
            change = w - q
            norm = float(np.square(w, dtype=np.float64).sum())
            records.append(TensorRecord(name, gguf_name, quantized.ggml_type, float(np.abs(change).max(initial=0.0)),
                                        float(np.abs(w).max(initial=0.0)),
                                        float(np.square(change, dtype=np.float64).sum() / norm) if norm > 0 else 0.0,
                                        bound_ratio(w, q, quantized.ggml_type), left_unquantized(quantized, file_type)))
    missing = sorted(set(checkpoint) - set(state))
    if missing:
        raise MatchError(f"{len(missing)} checkpoint tensor(s) are in no GGUF tensor with their values (dropped by "
                         f"the converter, or stored transformed): {', '.join(missing)}")
    return state, sorted(records, key=lambda r: r.checkpoint_name), generated


def load_checkpoint(directory: Path) -> dict[str, np.ndarray]:
    from safetensors.numpy import load_file

    files = sorted(directory.glob("model*.safetensors"))
    if not files:
        raise FileNotFoundError(f"{directory}: no model*.safetensors (a Hugging Face checkpoint directory)")
    state = {}
    for path in files:
        for name, w in load_file(str(path)).items():
            state[name] = w.astype(np.float32)
    return state


def write(out: Path, checkpoint_dir: Path, state: dict[str, np.ndarray], records: list[TensorRecord],
          generated: list[str]) -> None:
    from safetensors.numpy import save_file

    out.mkdir(parents=True, exist_ok=True)
    save_file({k: np.ascontiguousarray(v) for k, v in state.items()}, str(out / "model.safetensors"))
    for name in ("config.json", "generation_config.json", "inputs.safetensors"):
        if (checkpoint_dir / name).is_file():
            shutil.copy(checkpoint_dir / name, out / name)
    types: dict[str, int] = {}
    for r in records:
        types[r.stored_type] = types.get(r.stored_type, 0) + 1
    (out / "quantization.json").write_text(json.dumps(
        {"types": dict(sorted(types.items())), "converter_tensors": generated,
         "tensors": [asdict(r) for r in records]}, indent=1))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    parser.add_argument("checkpoint", type=Path, help="the Hugging Face checkpoint directory the GGUF files were made from")
    parser.add_argument("--float", dest="float_gguf", type=Path, required=True, help="its GGUF conversion in F32 (the bridge)")
    parser.add_argument("--quantized", type=Path, required=True, help="the quantized GGUF the implementation loads")
    parser.add_argument("--out", type=Path, required=True, help="the dequantized checkpoint's directory")
    args = parser.parse_args()
    for path in (args.float_gguf, args.quantized):
        if not path.is_file():
            parser.error(f"{path}: no such file")
    try:
        state, records, generated = dequantized_checkpoint(read_gguf(args.float_gguf), read_gguf(args.quantized),
                                                           load_checkpoint(args.checkpoint), declared_type(args.quantized))
    except (MatchError, FileNotFoundError) as why:
        print(f"gguf_dequantized: {why}", file=sys.stderr)
        return 1
    write(args.out, args.checkpoint, state, records, generated)
    print(f"{'checkpoint tensor':60s} {'GGUF tensor':32s} {'type':6s} {'max change / max|w|':>20s} {'NMSE':>9s} "
          f"{'change / bound':>14s}")
    for r in records:
        ratio = "no bound" if r.bound_ratio is None else f"{r.bound_ratio:.3f}"
        print(f"{r.checkpoint_name:60s} {r.stored_name:32s} {r.stored_type:6s} "
              f"{r.max_abs_change / max(r.max_abs, 1e-30):20.3e} {r.nmse:9.2e} {ratio:>14s}"
              + ("  LEFT UNQUANTIZED" if r.left_unquantized else ""))
    print(f"wrote {args.out}: {len(records)} tensors; the converter's own, not from the checkpoint: "
          f"{', '.join(generated) or 'none'}")
    # The dequantized checkpoint is written either way (it is what the implementation loads); a
    # tensor quantization cannot explain (zeroed, foreign, scaled, left unquantized) fails the file itself.
    return verdict(records, "gguf_dequantized")


def tensor_record(name: str, stored_type: str, w: np.ndarray, q: np.ndarray, bound: np.ndarray) -> TensorRecord:
    """The record of checkpoint tensor `name` (stored under the same name) dequantized to `q`, its
    change against `bound` per element (0/0 counts as 0)."""
    change = np.abs(w.astype(np.float64) - q.astype(np.float64)).reshape(-1)
    over = np.where(bound > 0, change / np.where(bound > 0, bound, 1.0), np.where(change > 0, np.inf, 0.0))
    return TensorRecord(name, name, stored_type, float(change.max(initial=0.0)), float(np.abs(w).max(initial=0.0)),
                        float((change ** 2).sum() / max(float((w.astype(np.float64) ** 2).sum()), 1e-300)),
                        float(over.max(initial=0.0)))


KEPT = "kept"  # a checkpoint tensor the quantized model leaves out because nothing reads it


def dequantized_state(checkpoint: dict[str, np.ndarray], one, source: Path) -> tuple[dict, list[TensorRecord]]:
    """For a format that keeps the checkpoint's names (MLX, torchao): each checkpoint tensor through
    `one(name, w)`, which gives (dequantized value, stored type, bound per element), KEPT (left as
    it is, unread) or None (the model has no such tensor: refused by name)."""
    state, records, missing = {}, [], []
    for name, w in sorted(checkpoint.items()):
        got = one(name, w)
        if got is None:
            missing.append(name)
        elif got is KEPT:
            state[name] = w
        else:
            value, stored_type, bound = got
            state[name] = np.asarray(value, np.float32).reshape(w.shape)
            records.append(tensor_record(name, stored_type, w, value, bound))
    if missing:
        raise SystemExit(f"{source}: no tensor for {', '.join(missing)} (another model, or dropped by the export)")
    return state, records


def dequantizer_main(argv: list[str], doc: str, option: str, what: str, dequantize, tool: str) -> int:
    """The command line of a dequantizer of another format (mlx_dequantized.py, torchao_dequantized.py):
    CHECKPOINT --OPTION MODEL_DIR --out DIR; `dequantize(model_dir, checkpoint)` gives (state, records)."""
    p = argparse.ArgumentParser(description=doc.split("\n\n")[0], epilog=doc,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("checkpoint", type=Path, help="the Hugging Face checkpoint the quantized model was made from")
    p.add_argument(f"--{option}", dest="model", type=Path, required=True, help=what)
    p.add_argument("--out", type=Path, required=True, help="the dequantized checkpoint's directory")
    args = p.parse_args(argv)
    state, records = dequantize(args.model, load_checkpoint(args.checkpoint))
    write(args.out, args.checkpoint, state, records, [])
    worst = max((r.bound_ratio for r in records if r.bound_ratio is not None), default=0.0)
    print(f"wrote {args.out}: {len(records)} tensors, worst change / bound {worst:.3f}")
    return verdict(records, tool)


def verdict(records: list[TensorRecord], tool: str) -> int:
    """1, naming them, when a tensor moved further than quantization to its type can, or was left
    unquantized; else 0."""
    over = [r for r in records if r.bound_ratio is not None and r.bound_ratio > 1]
    if over:
        print(f"{tool}: {len(over)} tensor(s) moved further than quantization to their type can: " +
              ", ".join(f"{r.checkpoint_name} ({r.stored_type}, {r.bound_ratio:.3g}x its bound)" for r in over),
              file=sys.stderr)
    skipped = [r for r in records if r.left_unquantized]
    if skipped:
        print(f"{tool}: {len(skipped)} tensor(s) left unquantized in a quantized file: " +
              ", ".join(f"{r.checkpoint_name} ({r.stored_type})" for r in skipped), file=sys.stderr)
    return 1 if over or skipped else 0


if __name__ == "__main__":
    sys.exit(main())
