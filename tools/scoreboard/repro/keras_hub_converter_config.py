"""keras-hub 0.32.0's Gemma-4 converter fails on configs that transformers writes or accepts.

Project: keras-team/keras-hub 0.32.0 (keras 3.15.1, KERAS_BACKEND=torch), transformers 5.17.0.
Bug: keras_hub/src/utils/transformers/convert_gemma4.py, convert_backbone_config, (a) reads only the
  top-level global_head_dim, so a checkpoint saved by transformers >= 5.8 (global layers' geometry in
  per_layer_config) builds its global layers with head_dim and the weight port fails; (b) reads
  text_cfg["layer_types"] unconditionally, although it derives sliding_window_pattern for configs
  without it and transformers' Gemma4TextConfig defaults it.
Expected: Gemma4Backbone.from_preset(dir) loads both checkpoints, matching transformers' logits.
Actual: (a) ValueError "cannot reshape array of size 2560 into shape (2,16,40)";
  (b) KeyError 'layer_types'. The same weights with global_head_dim and layer_types load and match.
Run: KERAS_BACKEND=torch PYTHONPATH=.cache/pinned/keras-hub python tools/scoreboard/repro/keras_hub_converter_config.py
"""
import json
import os
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("KERAS_BACKEND", "torch")
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

import keras_hub


def variant(root, name, edit):
    """A copy of the saved checkpoint whose config.json went through edit()."""
    directory = Path(root, name)
    directory.mkdir()
    (directory / "model.safetensors").write_bytes(Path(root, "saved", "model.safetensors").read_bytes())
    cfg = json.loads(Path(root, "saved", "config.json").read_text())
    edit(cfg)
    (directory / "config.json").write_text(json.dumps(cfg))
    return str(directory)


def old_fields(cfg):  # the released checkpoints' convention
    cfg["global_head_dim"] = next(iter(cfg.pop("per_layer_config").values()))["head_dim"]


errors = {}
with tempfile.TemporaryDirectory() as root:
    model.save_pretrained(Path(root, "saved"))
    control = keras_hub.models.Gemma4Backbone.from_preset(variant(root, "control", old_fields))
    h = control({"token_ids": ids.int(), "padding_mask": torch.ones_like(ids).int(),
                 "position_ids": torch.arange(12)[None].int()})
    diff = float(np.abs(control.token_embedding(h, reverse=True)[0].detach().numpy() - expected).max())
    print(f"control (global_head_dim, layer_types): loads, max |logits - transformers| = {diff:.2e}")
    cases = {"(a) as saved (per_layer_config)": str(Path(root, "saved")),
             "(b) no layer_types": variant(root, "no_layer_types", lambda c: (old_fields(c), c.pop("layer_types")))}
    for name, path in cases.items():
        try:
            keras_hub.models.Gemma4Backbone.from_preset(path)
            print(f"{name}: loads")
        except Exception as e:
            errors[name] = f"{type(e).__name__}: {str(e).splitlines()[0]}"
            print(f"{name}: {errors[name]}")

if not errors:
    print("NOT REPRODUCED: both configs load")
    sys.exit(0)
print("REPRODUCED: " + "; ".join(f"{k}: {v}" for k, v in errors.items()))
sys.exit(1)
