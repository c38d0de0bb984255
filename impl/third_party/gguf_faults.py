#!/usr/bin/env python3
"""Faulty GGUF files: negative controls for the quantized verdict (golden/FORMAT.md, "Quantized
subjects"). Each writes a copy of a quantized GGUF with exactly one thing changed, the way a public
bug changed what an engine loads or computes:

    python impl/third_party/gguf_faults.py MODEL.Q4_0.gguf FAULT --out FAULTY.gguf [--float MODEL.f32.gguf]

FAULT is one of (`--help` lists them with the bug each stands for):
  softcap-not-from-file  final_logit_softcapping in the metadata set to 25: the engine runs another
                         soft-cap than the model's (ggml-org/llama.cpp #21388 / PR #21390: the cap
                         hard-coded instead of read from the file)
  k-as-v-global          the first global layer's V weights replaced by its K weights: that layer
                         attends with K as V (ikawrakow/ik_llama.cpp #1592)
  scales-twice           every block scale d of each layer's ffn_down applied twice (q d d): a scale
                         folded into the stored weights again (vllm-project/vllm #39407's class)
  one-corrupted-block    one block of layer 0's attn_q with its scale 16 times too large (a kernel or
                         exporter writing one block of a type wrongly: ggml-org/llama.cpp #27007's class)
  expert-zeroed          expert 0 of the first quantized expert tensor all zero (MoE models: experts
                         dropped at export, z-lab/paroquant #53)
  experts-unquantized    every quantized expert tensor stored F16 instead, from the float model's values
                         (--float: the F32 conversion), the file still declaring its type (MoE models:
                         fused experts the quantizer skipped, NVIDIA/Model-Optimizer #1173)

softcap-not-from-file changes what the engine computes from a correct file, so it must fail the
outputs' conformance; the others change the file, so the golden made from that file carries the
bug too, and they must fail the weight rows (each tensor against what quantization to its type can
do; experts-unquantized the declared-type rule). Only numpy and gguf (gguf-py: GGUFReader opened
read-write edits the copy in place; experts-unquantized changes tensor types, so GGUFWriter rewrites it).
"""
from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

import numpy as np

SOFTCAP = 25.0
# Byte offset of a block's f16 scale d, per GGML type (ggml-common.h's block structs): the first
# field of Q8_0, Q4_0, Q5_0, Q5_1 and the K-quants but Q6_K, whose d comes last.
SCALE_OFFSET = {"Q8_0": 0, "Q4_0": 0, "Q4_1": 0, "Q5_0": 0, "Q5_1": 0, "Q4_K": 0, "Q5_K": 0, "Q6_K": 208}


def tensor(reader, name: str):
    for t in reader.tensors:
        if t.name == name:
            return t
    raise SystemExit(f"gguf_faults: no tensor {name!r} in the file")


def block_scales(t) -> np.ndarray:
    """A writable float16 view of every block's scale d of quantized tensor `t`."""
    from gguf import GGML_QUANT_SIZES

    kind = t.tensor_type.name
    if kind not in SCALE_OFFSET:
        raise SystemExit(f"gguf_faults: {t.name} is {kind}, whose block scales this script does not know")
    _, type_size = GGML_QUANT_SIZES[t.tensor_type]
    blocks = t.data.reshape(-1).view(np.uint8).reshape(-1, type_size)
    offset = SCALE_OFFSET[kind]
    return blocks[:, offset:offset + 2].view(np.float16)


def first_global_layer(reader) -> int:
    """The first layer with its own K whose V has the global head dim (a wider V than layer 0's)."""
    v0 = tensor(reader, "blk.0.attn_v.weight").shape
    layer = 1
    while any(t.name == f"blk.{layer}.attn_v.weight" for t in reader.tensors):
        if tensor(reader, f"blk.{layer}.attn_v.weight").shape.tolist() != v0.tolist():
            return layer
        layer += 1
    raise SystemExit("gguf_faults: no global layer with its own V in the file")


def softcap_not_from_file(reader) -> str:
    field = next((f for name, f in reader.fields.items() if name.endswith(".final_logit_softcapping")), None)
    if field is None:
        raise SystemExit("gguf_faults: the file has no final_logit_softcapping")
    was = float(field.parts[field.data[0]][0])
    field.parts[field.data[0]][0] = SOFTCAP
    return f"final_logit_softcapping {was:g} -> {SOFTCAP:g}"


def k_as_v_global(reader) -> str:
    layer = first_global_layer(reader)
    k, v = tensor(reader, f"blk.{layer}.attn_k.weight"), tensor(reader, f"blk.{layer}.attn_v.weight")
    if k.tensor_type != v.tensor_type or k.data.shape != v.data.shape:
        raise SystemExit(f"gguf_faults: layer {layer}'s K and V differ in type or shape")
    v.data[...] = k.data
    return f"blk.{layer}.attn_v.weight <- blk.{layer}.attn_k.weight"


def scales_twice(reader) -> str:
    names = [t.name for t in reader.tensors if t.name.endswith(".ffn_down.weight")]
    for name in names:
        d = block_scales(tensor(reader, name))
        d[...] = (d.astype(np.float32) ** 2).astype(np.float16)
    return f"block scales d -> d * d in {len(names)} ffn_down tensors"


def one_corrupted_block(reader) -> str:
    d = block_scales(tensor(reader, "blk.0.attn_q.weight"))
    d[0, 0] = np.float16(float(d[0, 0]) * 16)
    return "blk.0.attn_q.weight: block 0's scale x 16"


def expert_zeroed(reader) -> str:
    from gguf import GGML_QUANT_SIZES

    t = next((t for t in reader.tensors if "_exps" in t.name and t.tensor_type in GGML_QUANT_SIZES
              and t.tensor_type.name not in ("F32", "F16", "BF16")), None)
    if t is None:
        raise SystemExit("gguf_faults: no quantized expert tensor in the file (not an MoE model)")
    t.data[0] = 0  # codes and scales of expert 0: every value dequantizes to 0
    return f"{t.name}: expert 0 zeroed ({t.tensor_type.name})"


def experts_unquantized(source: Path, out: Path, float_gguf: Path) -> str:
    """The file rewritten with its metadata as it is and each quantized *_exps tensor as F16 of the
    float file's values: the quantizer skipped them."""
    from gguf import GGUFReader, GGUFValueType, GGUFWriter, Keys

    reader = GGUFReader(str(source))
    floats = {t.name: t for t in GGUFReader(str(float_gguf)).tensors}
    experts = [t.name for t in reader.tensors if "_exps" in t.name and t.tensor_type.name not in ("F32", "F16", "BF16")]
    if not experts:
        raise SystemExit("gguf_faults: no quantized expert tensor in the file (not an MoE model)")
    missing = [n for n in experts if n not in floats]
    if missing:
        raise SystemExit(f"gguf_faults: --float has no {', '.join(missing)} (another conversion?)")
    writer = GGUFWriter(str(out), reader.fields[Keys.General.ARCHITECTURE].contents())
    for field in reader.fields.values():  # the architecture and GGUF's own header fields: the writer's
        if field.name == Keys.General.ARCHITECTURE or field.name.startswith("GGUF."):
            continue
        kind = field.types[0]
        writer.add_key_value(field.name, field.contents(), kind,
                             sub_type=field.types[-1] if kind == GGUFValueType.ARRAY else None)
    for t in reader.tensors:
        if t.name in experts:
            writer.add_tensor(t.name, np.asarray(floats[t.name].data, dtype=np.float32).astype(np.float16))
        elif t.tensor_type.name in ("F32", "F16"):
            writer.add_tensor(t.name, np.asarray(t.data))
        else:
            writer.add_tensor(t.name, np.asarray(t.data), raw_dtype=t.tensor_type)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return f"{len(experts)} expert tensors stored F16: {', '.join(experts)}"


FAULTS = {"softcap-not-from-file": softcap_not_from_file, "k-as-v-global": k_as_v_global,
          "scales-twice": scales_twice, "one-corrupted-block": one_corrupted_block, "expert-zeroed": expert_zeroed}
# Faults that rewrite the file from the model's F32 conversion (--float) rather than edit a copy in place.
NEEDS_FLOAT = ("experts-unquantized",)
ALL_FAULTS = (*FAULTS, *NEEDS_FLOAT)


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("source", type=Path, help="a quantized GGUF file")
    p.add_argument("fault", choices=sorted(ALL_FAULTS))
    p.add_argument("--out", type=Path, required=True, help="the faulty copy")
    p.add_argument("--float", dest="float_gguf", type=Path, help="experts-unquantized: the F32 conversion of the model")
    args = p.parse_args(argv)
    if not args.source.is_file():
        p.error(f"{args.source}: no such file")
    if args.fault == "experts-unquantized":
        if args.float_gguf is None or not args.float_gguf.is_file():
            p.error("experts-unquantized needs --float, the model's F32 conversion")
        print(f"{args.out}: {args.fault}: {experts_unquantized(args.source, args.out, args.float_gguf)}")
        return 0
    from gguf import GGUFReader

    shutil.copy(args.source, args.out)
    reader = GGUFReader(str(args.out), "r+")
    what = FAULTS[args.fault](reader)
    reader.data.flush()
    print(f"{args.out}: {args.fault}: {what}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
