"""mlx-lm 0.32.2 overwrites a Gemma-4 text_config.vocab_size with a top-level vocab_size transformers never writes.

Project: ml-explore/mlx-lm 0.32.2 (mlx 0.32.4), with transformers 5.17.0 writing the checkpoint.
Bug: mlx_lm.models.gemma4.ModelArgs has vocab_size: int = 262144 and its __post_init__ sets
  text_config["vocab_size"] = self.vocab_size; transformers' Gemma4Config (model_type "gemma4",
  Gemma4ForConditionalGeneration) keeps vocab_size only inside text_config, so any text vocabulary
  other than 262144 is replaced by 262144.
Source: mlx_lm/models/gemma4.py, ModelArgs.__post_init__ (text_config["vocab_size"] = self.vocab_size).
Expected: the checkpoint (text_config.vocab_size = 128) loads and matches transformers' logits.
Actual: ValueError "Expected shape (262144, 40) but received shape (128, 40) for parameter
  language_model.model.embed_tokens.weight"; adding a top-level "vocab_size": 128 makes it load.
Run: PYTHONPATH=.cache/pinned/mlx-lm python tools/scoreboard/repro/mlx_lm_vocab_size.py
"""
import json
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch
from transformers import Gemma4Config, Gemma4ForConditionalGeneration, Gemma4TextConfig

torch.manual_seed(0)
text = Gemma4TextConfig(
    vocab_size=128, hidden_size=40, intermediate_size=24, num_hidden_layers=3, num_attention_heads=2,
    num_key_value_heads=1, head_dim=16, global_head_dim=32, hidden_size_per_layer_input=0,
    layer_types=["sliding_attention", "sliding_attention", "full_attention"], sliding_window=8,
    final_logit_softcapping=30.0)
model = Gemma4ForConditionalGeneration(Gemma4Config(text_config=text)).eval()  # text only
ids = torch.randint(3, 128, (1, 12))
with torch.no_grad():
    expected = model(input_ids=ids).logits[0].numpy()

import mlx.core as mx
from mlx_lm.models import gemma4
from mlx_lm.utils import load_model

with tempfile.TemporaryDirectory() as tmp:
    model.save_pretrained(tmp)
    cfg = json.loads(Path(tmp, "config.json").read_text())
    print("top-level vocab_size in config.json:", cfg.get("vocab_size"), "| text_config.vocab_size:",
          cfg["text_config"]["vocab_size"])
    # Write global_head_dim at the top level of text_config (mlx-lm ignores per_layer_config: see
    # mlx_lm_per_layer_config.py), so that only the vocabulary is at stake here.
    cfg["text_config"]["global_head_dim"] = next(iter(cfg["text_config"].pop("per_layer_config").values()))["head_dim"]
    Path(tmp, "config.json").write_text(json.dumps(cfg))
    args_vocab = gemma4.ModelArgs.from_dict(json.loads(json.dumps(cfg))).text_config["vocab_size"]
    print("mlx-lm ModelArgs.text_config['vocab_size']:", args_vocab)
    try:
        load_model(Path(tmp))
        error = None
    except ValueError as e:
        error = str(e).splitlines()[0]
    cfg["vocab_size"] = 128  # the workaround: repeat the text vocabulary at the top level
    Path(tmp, "config.json").write_text(json.dumps(cfg))
    fixed, _ = load_model(Path(tmp))
    diff = float(np.abs(np.array(fixed(mx.array(ids.numpy()))[0]) - expected).max())
    print(f"with a top-level vocab_size=128: loads, max |logits - transformers| = {diff:.2e}")

if error is None and args_vocab == 128:
    print("NOT REPRODUCED: text_config.vocab_size is kept")
    sys.exit(0)
print(f"REPRODUCED: text_config.vocab_size 128 becomes {args_vocab}; load_model: {error!r}")
sys.exit(1)
