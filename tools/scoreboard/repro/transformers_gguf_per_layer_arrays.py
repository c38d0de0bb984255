"""transformers 5.17.0 cannot build a Gemma-4 config from a GGUF file whose per-layer fields are arrays.

Project: huggingface/transformers 5.17.0 (gguf 0.19.0), from_pretrained(..., gguf_file=...).
Bug: integrations/ggml.py maps gemma4's feed_forward_length to intermediate_size and
  attention.head_count_kv to num_key_value_heads as they are; llama.cpp's converter writes both as
  per-layer arrays when they vary over the layers (E2B and E4B: the KV-shared layers' MLP is twice as
  wide; 31B and 26B-A4B: global layers have other KV heads), and Gemma4TextConfig's strict dataclass
  refuses a list for an int field. Every such Gemma-4 GGUF fails to load.
Source: transformers/integrations/ggml.py, GGUF_CONFIG_MAPPING["gemma4"]; transformers/
  modeling_gguf_pytorch_utils.py, load_gguf_checkpoint (no per-layer handling for gemma4).
Expected: the config loads, with the per-layer widths and KV heads the model needs (or a clear
  "not supported" naming the field).
Actual: huggingface_hub.errors.StrictDataclassFieldValidationError: Validation error for field
  'intermediate_size': TypeError: Field 'intermediate_size' expected int, got list.
Public: huggingface/transformers PR #46467 (open; read 2026-11-29) parses the KV-heads list; its
  description does not mention feed_forward_length, and it sets hidden_size_per_layer_input = 0,
  which would drop the per-layer embeddings that llama.cpp's converter does store
  (per_layer_token_embd, inp_gate, proj): the E2B/E4B part is ready to file.
Run: python tools/scoreboard/repro/transformers_gguf_per_layer_arrays.py
"""
import sys
import tempfile
from pathlib import Path

import gguf
import numpy as np
import transformers

directory = Path(tempfile.mkdtemp())
path = directory / "gemma4-e2b-like.gguf"
writer = gguf.GGUFWriter(str(path), "gemma4")  # the metadata llama.cpp's converter writes for an E2B-like model
writer.add_block_count(4)
writer.add_context_length(128)
writer.add_embedding_length(64)
writer.add_feed_forward_length([64, 64, 128, 128])  # the last two layers share K/V: their MLP is twice as wide
writer.add_head_count(2)
writer.add_head_count_kv(1)
writer.add_key_length(64)
writer.add_value_length(64)
writer.add_layer_norm_rms_eps(1e-6)
writer.add_sliding_window(16)
writer.add_vocab_size(32)
writer.add_tensor("token_embd.weight", np.zeros((32, 64), np.float32))
writer.write_header_to_file()
writer.write_kv_data_to_file()
writer.write_tensors_to_file()
writer.close()
try:
    config = transformers.AutoConfig.from_pretrained(directory, gguf_file=path.name)
except Exception as e:  # noqa: BLE001 - the loader's own error is the evidence
    print(f"REPRODUCED: transformers {transformers.__version__}: {type(e).__name__}: {' '.join(str(e).split())}")
    sys.exit(1)
print(f"NOT REPRODUCED: transformers {transformers.__version__} built intermediate_size={config.intermediate_size}")
