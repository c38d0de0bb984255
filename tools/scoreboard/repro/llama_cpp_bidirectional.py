"""llama.cpp converts and runs a Gemma-4 with use_bidirectional_attention="all" as a different model.

Project: llama.cpp as vendored by llama-cpp-python 0.3.36 (ggml 0.25.3, CPU), its convert_hf_to_gguf.py;
  transformers 5.17.0 as the reference.
Bug: the converter accepts the config and writes attention.causal = false (is_causal: false), and
  Gemma-4's only non-causal mode, LLAMA_NON_CAUSAL_TYPE_SWA_ONLY (meant for image tokens), makes the
  sliding layers see every later token (the window only limits earlier ones) while the full layers
  stay causal; transformers' "all" makes every layer bidirectional, sliding layers windowed both ways.
Source: convert_hf_to_gguf.py / conversion/base.py (add_causal_attention(False) from is_causal);
  src/models/gemma4.cpp (non_causal_type = SWA_ONLY); src/llama-kv-cache.cpp (set_input_kq_mask).
Expected: transformers' logits (up to llama.cpp's fp16 GELU table, see llama_cpp_gelu_fp16.py), or a
  refusal to convert. Actual: logits differ by 3.5 while the same weights run causally agree to
  2e-3; transformers given llama.cpp's masks (sliding: later tokens + window; full: causal) agrees.
Run: PYTHONPATH=.cache/pinned/llama-cpp python tools/scoreboard/repro/llama_cpp_bidirectional.py
  (LLAMA_CPP_CONVERT=<dir of convert_hf_to_gguf.py>, default: llama_cpp_convert/ beside llama_cpp)
"""
import os, subprocess, sys, tempfile
from pathlib import Path

import numpy as np
import torch
import llama_cpp
from tokenizers import AddedToken, Tokenizer, decoders, models
from transformers import Gemma4ForCausalLM, Gemma4TextConfig

CONVERT = Path(os.environ.get("LLAMA_CPP_CONVERT", Path(llama_cpp.__file__).parents[1] / "llama_cpp_convert"))
V, T, W = 128, 16, 8
ids = torch.randint(3, V, (1, T), generator=torch.Generator().manual_seed(0))


def build(bidirectional):
    torch.manual_seed(0)
    return Gemma4ForCausalLM(Gemma4TextConfig(
        vocab_size=V, hidden_size=64, intermediate_size=128, num_hidden_layers=3, num_attention_heads=2,
        num_key_value_heads=1, head_dim=16, global_head_dim=32, hidden_size_per_layer_input=0,
        layer_types=["sliding_attention", "sliding_attention", "full_attention"], sliding_window=W,
        final_logit_softcapping=30.0, initializer_range=0.1, use_bidirectional_attention=bidirectional)).eval()


def gguf_logits(model):
    """model's logits from llama.cpp: save, stand-in tokenizer, convert to an f32 GGUF, evaluate."""
    with tempfile.TemporaryDirectory() as tmp:
        model.save_pretrained(tmp)
        names = ["<pad>", "<eos>", "<bos>", "<unk>", "\n", "a", "b", "ab"] + [f"t{i}" for i in range(V - 8)]
        tok = Tokenizer(models.BPE({t: i for i, t in enumerate(names)}, [("a", "b")], unk_token="<unk>", byte_fallback=True))
        tok.decoder = decoders.Sequence([decoders.ByteFallback(), decoders.Fuse()])
        tok.add_special_tokens([AddedToken(t, special=True) for t in names[:4]])
        tok.save(f"{tmp}/tokenizer.json")  # the converter needs a tokenizer of exactly vocab_size tokens
        Path(tmp, "tokenizer_config.json").write_text('{"tokenizer_class": "PreTrainedTokenizerFast", "unk_token": '
                                                      '"<unk>", "pad_token": "<pad>", "eos_token": "<eos>", "bos_token": "<bos>"}')
        subprocess.run([sys.executable, CONVERT / "convert_hf_to_gguf.py", tmp, "--outtype", "f32",
                        "--outfile", f"{tmp}/m.gguf"], check=True, capture_output=True)
        llm = llama_cpp.Llama(f"{tmp}/m.gguf", n_ctx=T, n_batch=T, n_ubatch=T, logits_all=True, flash_attn=False,
                              swa_full=True, type_k=0, type_v=0, verbose=False)  # f32 K/V cache
        llm.eval(ids[0].tolist())
        return np.array(llm.scores[:T])


diff = lambda a, b: float(np.abs(a - b).max())
q, k = torch.arange(T)[:, None], torch.arange(T)[None]
llama_masks = {"full_attention": (k <= q)[None, None], "sliding_attention": ((k > q) | (q - k < W))[None, None]}
with torch.no_grad():
    causal, bidir = build(None), build("all")
    d_causal = diff(gguf_logits(causal), causal(ids).logits[0].numpy())
    got = gguf_logits(bidir)
    d_bidir = diff(got, bidir(ids).logits[0].numpy())
    d_llama_masks = diff(got, bidir(ids, attention_mask=llama_masks).logits[0].numpy())
print(f"use_bidirectional_attention=None:  max |llama.cpp - transformers| = {d_causal:.3e}")
print(f"use_bidirectional_attention='all': max |llama.cpp - transformers| = {d_bidir:.3e}")
print(f"'all', transformers given llama.cpp's SWA_ONLY masks:  max |diff| = {d_llama_masks:.3e}")
if d_bidir < 10 * d_causal:
    print("NOT REPRODUCED: 'all' agrees as well as the causal control")
    sys.exit(0)
print(f"REPRODUCED: use_bidirectional_attention='all': logits max diff {d_bidir:.2e} (causal control {d_causal:.1e}; "
      f"transformers with llama.cpp's masks {d_llama_masks:.1e})")
sys.exit(1)
