"""keras-hub 0.32.0 runs a Gemma-4 checkpoint with use_bidirectional_attention="all" as another model.

Project: keras-team/keras-hub 0.32.0 (keras 3.15.1, KERAS_BACKEND=torch), transformers 5.17.0.
Not supported, silently: (1) convert_gemma4.py maps use_bidirectional_attention only when it is
  "vision" (its comment at L251-258 says keras-hub's own use_bidirectional_attention, every token,
  is a separate concept for embedding models, never set from this field), so an "all" checkpoint
  runs causally without a word; (2) set by hand on the backbone, use_bidirectional_attention=True
  makes Gemma4DecoderBlock._compute_attention_mask return the padding mask before the sliding
  window is applied, so sliding layers see the whole sequence (Gemma4Attention._mask_sliding_window's
  bidirectional branch is never reached).
Source: keras_hub/src/utils/transformers/convert_gemma4.py, convert_backbone_config (hf_bidir ==
  "vision"); keras_hub/src/models/gemma4/gemma4_decoder_block.py, _compute_attention_mask.
Expected: logits equal to transformers' (bidirectional, sliding layers windowed).
Actual: they differ as converted and with use_bidirectional_attention=True; with a window longer
  than the sequence (the window then does nothing) use_bidirectional_attention=True matches.
Run: KERAS_BACKEND=torch PYTHONPATH=.cache/pinned/keras-hub python tools/scoreboard/repro/keras_hub_bidirectional.py
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

import keras_hub

ids = torch.randint(3, 128, (1, 16), generator=torch.Generator().manual_seed(0))


def max_diff(sliding_window, **overrides):
    """max |keras-hub logits - transformers logits| for one checkpoint saved by transformers."""
    torch.manual_seed(0)
    model = Gemma4ForCausalLM(Gemma4TextConfig(
        vocab_size=128, hidden_size=40, intermediate_size=24, num_hidden_layers=3, num_attention_heads=2,
        num_key_value_heads=1, head_dim=16, global_head_dim=32, hidden_size_per_layer_input=0,
        layer_types=["sliding_attention", "sliding_attention", "full_attention"], final_logit_softcapping=30.0,
        sliding_window=sliding_window, use_bidirectional_attention="all")).eval()
    with torch.no_grad():
        expected = model(ids).logits[0].numpy()
    with tempfile.TemporaryDirectory() as tmp:
        model.save_pretrained(tmp)
        cfg = json.loads(Path(tmp, "config.json").read_text())
        # Top-level global_head_dim, which keras-hub reads (see keras_hub_converter_config.py).
        cfg["global_head_dim"] = next(iter(cfg.pop("per_layer_config").values()))["head_dim"]
        Path(tmp, "config.json").write_text(json.dumps(cfg))
        backbone = keras_hub.models.Gemma4Backbone.from_preset(tmp, **overrides)
    h = backbone({"token_ids": ids.int(), "padding_mask": torch.ones_like(ids).int(),
                  "position_ids": torch.arange(ids.shape[1])[None].int()})
    return float(np.abs(backbone.token_embedding(h, reverse=True)[0].detach().numpy() - expected).max())


as_converted = max_diff(8)
forced = max_diff(8, use_bidirectional_attention=True)
no_window = max_diff(64, use_bidirectional_attention=True)
print(f"sliding_window 8, as converted:                       max |diff| = {as_converted:.3e}")
print(f"sliding_window 8, use_bidirectional_attention=True:   max |diff| = {forced:.3e}")
print(f"sliding_window 64 (> 16 tokens), the same override:   max |diff| = {no_window:.3e}")
if as_converted < 1e-4:
    print("NOT REPRODUCED: keras-hub matches transformers on use_bidirectional_attention='all'")
    sys.exit(0)
print(f"REPRODUCED: use_bidirectional_attention='all': logits max diff {as_converted:.2e} as converted, "
      f"{forced:.2e} with use_bidirectional_attention=True (window skipped; {no_window:.1e} without a window)")
sys.exit(1)
