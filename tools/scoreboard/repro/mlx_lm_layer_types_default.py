"""mlx-lm 0.32.2 derives a different Gemma-4 layer pattern than transformers when layer_types is absent.

Project: ml-explore/mlx-lm 0.32.2 (mlx 0.32.4), compared with transformers 5.17.0.
Bug: for a config.json without layer_types, mlx-lm builds the pattern from sliding_window_pattern=5
  (every 5th layer global), while transformers' Gemma4TextConfig uses period 6 (every 6th layer
  global) and forces the last layer to full_attention; the model loads silently with other masks/RoPE.
Source: mlx_lm/models/gemma4_text.py, ModelArgs.__post_init__ (sliding_window_pattern: int = 5),
  vs transformers/models/gemma4/configuration_gemma4.py, Gemma4TextConfig.__post_init__.
Expected: the same layer_types as transformers, and the same logits.
Actual: 7 layers: transformers [S,S,S,S,S,F,F], mlx-lm [S,S,S,S,F,S,S]; the logits differ.
Run: PYTHONPATH=.cache/pinned/mlx-lm python tools/scoreboard/repro/mlx_lm_layer_types_default.py
"""
import json
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch
from transformers import AutoConfig, Gemma4ForCausalLM, Gemma4TextConfig

torch.manual_seed(0)
config = Gemma4TextConfig(  # head_dim == global_head_dim: both layer kinds have the same shapes
    vocab_size=128, hidden_size=40, intermediate_size=24, num_hidden_layers=7, num_attention_heads=2,
    num_key_value_heads=1, head_dim=16, global_head_dim=16, hidden_size_per_layer_input=0,
    sliding_window=4, final_logit_softcapping=30.0)
model = Gemma4ForCausalLM(config).eval()
ids = torch.randint(3, 128, (1, 12))

import mlx.core as mx
from mlx_lm.utils import load_model

short = lambda types: "".join("F" if t == "full_attention" else "S" for t in types)
with tempfile.TemporaryDirectory() as tmp:
    model.save_pretrained(tmp)
    cfg = json.loads(Path(tmp, "config.json").read_text())
    del cfg["layer_types"]  # a checkpoint whose config.json has no layer_types
    cfg.pop("per_layer_config")  # top-level fields, which mlx-lm reads (see mlx_lm_per_layer_config.py)
    cfg["global_head_dim"] = 16
    Path(tmp, "config.json").write_text(json.dumps(cfg))
    hf_types = AutoConfig.from_pretrained(tmp).layer_types
    reloaded = Gemma4ForCausalLM.from_pretrained(tmp).eval()
    with torch.no_grad():
        expected = reloaded(ids).logits[0].numpy()
    mlx_model, _ = load_model(Path(tmp))
    mlx_types = [layer.layer_type for layer in mlx_model.layers]
    diff = float(np.abs(np.array(mlx_model(mx.array(ids.numpy()))[0]) - expected).max())

print("transformers layer_types:", hf_types)
print("mlx-lm       layer_types:", mlx_types)
print(f"max |logits mlx-lm - transformers| = {diff:.3e}")
if mlx_types == hf_types and diff < 1e-4:
    print("NOT REPRODUCED: same default layer pattern and logits")
    sys.exit(0)
print(f"REPRODUCED: without layer_types, transformers {short(hf_types)} vs mlx-lm {short(mlx_types)} "
      f"(S=sliding, F=full); logits differ by {diff:.2e}")
sys.exit(1)
