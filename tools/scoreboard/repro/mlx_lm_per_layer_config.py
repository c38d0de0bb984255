"""mlx-lm 0.32.2 cannot load a Gemma-4 checkpoint saved by transformers >= 5.8 (per_layer_config).

Project: ml-explore/mlx-lm 0.32.2 (mlx 0.32.4), with transformers 5.17.0 writing the checkpoint.
Bug: transformers' Gemma4TextConfig now saves the global (full_attention) layers' geometry as
  per_layer_config = {"<layer>": {"head_dim": ..., "num_key_value_heads": ...}} instead of the
  top-level global_head_dim / num_global_key_value_heads, and mlx-lm reads only the latter
  (ModelArgs.from_dict drops unknown keys, so global_head_dim silently falls back to 512).
Source: mlx_lm/models/gemma4_text.py, ModelArgs (global_head_dim: int = 512) and Attention.__init__
  (self.head_dim = config.global_head_dim for full_attention layers).
Expected: mlx_lm.utils.load_model loads the checkpoint and matches transformers' logits.
Actual: ValueError "Expected shape (1024, 40) but received shape (64, 40) for ...q_proj.weight";
  the same weights with the config rewritten to global_head_dim load and match.
Run: PYTHONPATH=.cache/pinned/mlx-lm python tools/scoreboard/repro/mlx_lm_per_layer_config.py
"""
import json
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch
from transformers import Gemma4ForCausalLM, Gemma4TextConfig

torch.manual_seed(0)
config = Gemma4TextConfig(
    vocab_size=128, hidden_size=40, intermediate_size=24, num_hidden_layers=3, num_attention_heads=2,
    num_key_value_heads=1, head_dim=16, global_head_dim=32, hidden_size_per_layer_input=0,
    layer_types=["sliding_attention", "sliding_attention", "full_attention"], sliding_window=8,
    final_logit_softcapping=30.0)
model = Gemma4ForCausalLM(config).eval()
ids = torch.randint(3, 128, (1, 12))
with torch.no_grad():
    expected = model(ids).logits[0].numpy()

import mlx.core as mx
from mlx_lm.utils import load_model

with tempfile.TemporaryDirectory() as tmp:
    saved, old = Path(tmp, "saved"), Path(tmp, "old_fields")
    model.save_pretrained(saved)
    cfg = json.loads((saved / "config.json").read_text())
    print("saved config:", {k: cfg.get(k) for k in ("per_layer_config", "global_head_dim")})
    # The same checkpoint in the released checkpoints' convention (top-level fields).
    old.mkdir()
    (old / "model.safetensors").write_bytes((saved / "model.safetensors").read_bytes())
    full = next(iter(cfg.pop("per_layer_config").values()))
    cfg["global_head_dim"], cfg["num_global_key_value_heads"] = full["head_dim"], full.get("num_key_value_heads")
    (old / "config.json").write_text(json.dumps(cfg))

    mlx_old, _ = load_model(old)
    diff_old = float(np.abs(np.array(mlx_old(mx.array(ids.numpy()))[0]) - expected).max())
    print(f"old fields (global_head_dim): loads, max |logits - transformers| = {diff_old:.2e}")
    try:
        load_model(saved)
        error = None
    except ValueError as e:
        error = str(e).splitlines()[0]

if error is None:
    print("NOT REPRODUCED: the per_layer_config checkpoint loads")
    sys.exit(0)
print(f"REPRODUCED: per_layer_config checkpoint fails to load: {error!r} "
      f"(same weights with global_head_dim load, max logit diff {diff_old:.1e})")
sys.exit(1)
