"""torchao_dequantized.py on files laid out as transformers' save_pretrained writes a torchao int4
weight-only model (codes, scales and zero points per group of 32, the layout in the safetensors
metadata), quantized here in NumPy as torchao's symmetric int4 does: a correct file passes within
its bound; one tensor's scales 1.25 times too large, and K's codes stored as V's, fail by name."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

GENERATORS = Path(__file__).resolve().parents[1]
GROUP = 32
LAYOUT = json.dumps({"_type": "IntxUnpackedToInt8Tensor", "_data": {
    "target_dtype": {"_type": "torch.dtype", "_data": "int4"}, "block_size": [1, GROUP],
    "dtype": {"_type": "torch.dtype", "_data": "bfloat16"}, "activation_quantization": None},
    "_tensor_data_names": ["qdata", "scale", "zero_point"]})


def bf16(x: np.ndarray) -> np.ndarray:
    """Round to bfloat16 (nearest even), kept as float32."""
    import torch

    return torch.from_numpy(np.ascontiguousarray(x, np.float32)).bfloat16().float().numpy()


def quantize(w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """torchao's symmetric int4 per group of the bf16 weights: s = max|w| / 7.5 in bf16, q in -8..7."""
    groups = bf16(w).reshape(w.shape[0], -1, GROUP)
    scale = bf16(np.abs(groups).max(axis=-1) / 7.5)
    q = np.clip(np.round(groups / scale[..., None]), -8, 7).astype(np.int8)
    return q.reshape(w.shape), scale


def write_model(directory: Path, weights: dict[str, np.ndarray], mutate=None) -> None:
    import torch
    from safetensors.torch import save_file

    tensors, metadata = {}, {}
    for name, w in weights.items():
        if w.ndim == 2:
            q, scale = quantize(w)
            if mutate:
                q, scale = mutate(name, q, scale, tensors)
            module = name.removesuffix(".weight")
            tensors[f"{module}._weight_qdata"] = torch.from_numpy(q)
            tensors[f"{module}._weight_scale"] = torch.from_numpy(scale).bfloat16()
            tensors[f"{module}._weight_zero_point"] = torch.zeros(scale.shape, dtype=torch.int8)
            metadata[name] = LAYOUT
        else:
            tensors[name] = torch.from_numpy(w).bfloat16()
    directory.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(directory / "model.safetensors"), metadata={"format": "pt", **metadata})


@pytest.fixture
def checkpoint(tmp_path: Path) -> tuple[Path, dict[str, np.ndarray]]:
    from safetensors.numpy import save_file

    rng = np.random.default_rng(0)
    weights = {"model.layers.0.self_attn.k_proj.weight": rng.normal(0, 0.05, (64, 64)).astype(np.float32),
               "model.layers.0.self_attn.v_proj.weight": rng.normal(0, 0.05, (64, 64)).astype(np.float32),
               "model.layers.0.mlp.down_proj.weight": rng.normal(0, 0.05, (64, 128)).astype(np.float32),
               "model.norm.weight": rng.uniform(0.5, 1.5, 64).astype(np.float32)}
    directory = tmp_path / "checkpoint"
    directory.mkdir()
    save_file(weights, str(directory / "model.safetensors"))
    (directory / "config.json").write_text("{}")
    return directory, weights


def run(checkpoint: Path, model: Path, out: Path) -> tuple[subprocess.CompletedProcess, dict]:
    proc = subprocess.run([sys.executable, str(GENERATORS / "torchao_dequantized.py"), str(checkpoint), "--torchao",
                           str(model), "--out", str(out)], capture_output=True, text=True)
    print(proc.stdout, proc.stderr)
    record = json.loads((out / "quantization.json").read_text()) if (out / "quantization.json").is_file() else {}
    return proc, {t["checkpoint_name"]: t for t in record.get("tensors", [])}


def test_a_correct_file_passes_within_its_bound(checkpoint, tmp_path):
    directory, weights = checkpoint
    write_model(tmp_path / "model", weights)
    proc, record = run(directory, tmp_path / "model", tmp_path / "out")
    assert proc.returncode == 0
    assert all(t["bound_ratio"] <= 1 for t in record.values())
    assert max(t["bound_ratio"] for t in record.values() if "int4" in t["stored_type"]) > 0.5  # not a loose bound


def test_scales_too_large_and_k_codes_as_v_fail_by_name(checkpoint, tmp_path):
    directory, weights = checkpoint

    def mutate(name, q, scale, done):
        if name.endswith("mlp.down_proj.weight"):
            return q, bf16(scale * 1.25)
        if name.endswith("v_proj.weight"):
            return done["model.layers.0.self_attn.k_proj._weight_qdata"].numpy().copy(), scale
        return q, scale

    write_model(tmp_path / "model", weights, mutate)
    proc, record = run(directory, tmp_path / "model", tmp_path / "out")
    assert proc.returncode == 1
    failing = sorted(n for n, t in record.items() if t["bound_ratio"] > 1)
    assert failing == ["model.layers.0.mlp.down_proj.weight", "model.layers.0.self_attn.v_proj.weight"]
    assert "down_proj" in proc.stderr and "v_proj" in proc.stderr
