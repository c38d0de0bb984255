"""keras-hub 0.32.0 silently ties the output head of a Gemma-4 checkpoint whose lm_head is untied.

Project: keras-team/keras-hub 0.32.0 (keras 3.15.1, KERAS_BACKEND=torch), transformers 5.17.0.
Bug: convert_gemma4.py never reads tie_word_embeddings nor ports lm_head.weight, and Gemma4Backbone's
  head is always token_embedding(h, reverse=True); a checkpoint with tie_word_embeddings=false (as
  transformers' Gemma4TextConfig allows) loads without an error or warning, with the wrong head.
Source: keras_hub/src/utils/transformers/convert_gemma4.py, convert_weights (no lm_head port);
  keras_hub/src/models/gemma4/gemma4_backbone.py (ReversibleEmbedding, tied only).
Expected: logits equal to transformers', or a refusal / warning that the untied head is dropped.
Actual: logits differ (max |diff| 0.66 here), no warning; the backbone's hidden states times lm_head.weight match transformers.
Run: KERAS_BACKEND=torch PYTHONPATH=.cache/pinned/keras-hub python tools/scoreboard/repro/keras_hub_untied_head.py
"""
import json
import logging
import os
import sys
import tempfile
import warnings
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
    final_logit_softcapping=30.0, tie_word_embeddings=False)
model = Gemma4ForCausalLM(config).eval()
head = model.lm_head.weight.detach().numpy()
assert not np.array_equal(head, model.model.embed_tokens.weight.detach().numpy())
ids = torch.randint(3, 128, (1, 12))
with torch.no_grad():
    expected = model(ids).logits[0].numpy()

import keras_hub

with tempfile.TemporaryDirectory() as tmp:
    model.save_pretrained(tmp)
    cfg = json.loads(Path(tmp, "config.json").read_text())
    print("config.json tie_word_embeddings:", cfg["tie_word_embeddings"])
    # Top-level global_head_dim, which keras-hub reads (see keras_hub_converter_config.py).
    cfg["global_head_dim"] = next(iter(cfg.pop("per_layer_config").values()))["head_dim"]
    Path(tmp, "config.json").write_text(json.dumps(cfg))
    logging.captureWarnings(True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        backbone = keras_hub.models.Gemma4Backbone.from_preset(tmp)
h = backbone({"token_ids": ids.int(), "padding_mask": torch.ones_like(ids).int(),
              "position_ids": torch.arange(12)[None].int()})
logits = backbone.token_embedding(h, reverse=True)[0].detach().numpy()
diff = float(np.abs(logits - expected).max())
untied = np.tanh(h[0].detach().numpy() @ head.T / 30.0) * 30.0  # the checkpoint's own head
diff_untied = float(np.abs(untied - expected).max())
print(f"keras-hub logits vs transformers: max |diff| = {diff:.3e}")
print(f"keras-hub hidden states @ lm_head.weight (softcapped) vs transformers: {diff_untied:.3e}")
print(f"warnings while loading: {[str(w.message) for w in caught]}")

if diff < 1e-4 or any("lm_head" in str(w.message) or "tie" in str(w.message) for w in caught):
    print("NOT REPRODUCED: the untied head is used, or the loader warns")
    sys.exit(0)
print(f"REPRODUCED: untied lm_head dropped silently: logits max diff {diff:.2e} vs transformers "
      f"({diff_untied:.1e} with the checkpoint's lm_head.weight), {len(caught)} warnings")
sys.exit(1)
