#!/usr/bin/env python3
"""The weights a torchao int4 weight-only checkpoint holds (transformers' save_pretrained of a model
quantized with TorchAoConfig(IntxWeightOnlyConfig(int4, PerGroup(G)))): per quantized matrix
`<module>._weight_qdata` (int8 codes in -8..7), `_weight_scale` and `_weight_zero_point` per group of
G elements of a row, described in the safetensors metadata), as the Hugging Face checkpoint they were
made from, dequantized to fp32 as (q - z) s: the torchao analogue of gguf_dequantized.py (golden/
FORMAT.md, "Quantized subjects"), whose DIR layout, quantization.json and checks it shares. It reads
the file with safetensors alone, not with torchao or transformers, the subject's own loaders.

    python golden/generators/torchao_dequantized.py CHECKPOINT --torchao MODEL_DIR --out DIR

Each quantized tensor is held to what symmetric int4 quantization of the bf16 model can do, per group
from its largest magnitude a (torchao's choose_qparams, MappingType.SYMMETRIC): s = a / 7.5 stored in
bf16, q = clamp(round(w / s), -8, 7), so an element moves by at most s / 2 (the clamp at +7 of the
value a / s = 7.5 is that half step too), plus bf16's rounding u = 2^-8 of w before quantizing (u a)
and of s times up to 8 codes: a / 15 + u a + 8 u a / 7.5, all times (1 + u) for s's own rounding.
Unquantized tensors stored in bf16 may move by half their spacing. Beyond: exit 1 naming the tensors.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gguf_dequantized import TensorRecord, dequantized_state, dequantizer_main, float_bound  # noqa: E402

UNIT = 2.0 ** -8  # bf16's relative rounding


def int4_bound(w: np.ndarray, group: int) -> np.ndarray:
    groups = np.abs(w.astype(np.float64)).reshape(-1, group)
    a = groups.max(axis=1, keepdims=True)
    bound = (a / 15 + UNIT * a + 8 * UNIT * a / 7.5) * (1 + UNIT)
    return np.broadcast_to(bound, groups.shape).reshape(-1)


def dequantized_checkpoint(model_dir: Path, checkpoint: dict[str, np.ndarray]) -> tuple[dict, list[TensorRecord]]:
    """(the checkpoint with each tensor as the torchao model holds it, dequantized; a record per tensor)."""
    from safetensors import safe_open

    stored, layouts = {}, {}
    for path in sorted(model_dir.glob("model*.safetensors")):
        with safe_open(str(path), framework="pt") as f:
            layouts.update({k: json.loads(v) for k, v in (f.metadata() or {}).items() if v.startswith("{")})
            stored.update({k: f.get_tensor(k) for k in f.keys()})

    def one(name: str, w: np.ndarray):
        module = name.removesuffix(".weight")
        if f"{module}._weight_qdata" in stored:
            layout = layouts.get(name, {}).get("_data", {})
            group = layout.get("block_size", [1, 0])[-1]
            target = layout.get("target_dtype", {}).get("_data")
            if target != "int4" or not group:
                raise SystemExit(f"{model_dir}: {name} is {target} in blocks {layout.get('block_size')}; "
                                 "only int4 per-group (IntxUnpackedToInt8Tensor) is read here")
            q = stored[f"{module}._weight_qdata"].double()
            scale = stored[f"{module}._weight_scale"].double().repeat_interleave(group, dim=-1)
            zero = stored[f"{module}._weight_zero_point"].double().repeat_interleave(group, dim=-1)
            return ((q - zero) * scale).numpy(), f"torchao int4 g{group}", int4_bound(w, group)
        if name in stored:
            stored_type = str(stored[name].dtype).removeprefix("torch.")
            return stored[name].double().numpy(), stored_type, float_bound(w, stored_type)
        return None

    return dequantized_state(checkpoint, one, model_dir)


def main(argv: list[str]) -> int:
    return dequantizer_main(argv, __doc__, "torchao", "the quantized model directory (save_pretrained)", dequantized_checkpoint, "torchao_dequantized")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
