"""llama.cpp's CPU GELU rounds an f32 model's activations through an fp16 lookup table (GGML_GELU_FP16).

Project: llama.cpp as vendored by llama-cpp-python 0.3.36 (ggml 0.25.3, CPU build), its
  convert_hf_to_gguf.py; transformers 5.17.0 as the reference.
Bug: ggml-cpu defines GGML_GELU_FP16, so ggml_vec_gelu_f32 / ggml_vec_geglu_f32 (Gemma-4's
  gelu_pytorch_tanh MLP) round x to fp16, look up ggml_table_gelu_f16 and return an fp16 value,
  even in an all-f32 model: the error is fp16's (2^-11 relative), not f32's.
Source: ggml/src/ggml-cpu/vec.h (#define GGML_GELU_FP16, ggml_vec_geglu_f32). Public:
  ggml-org/llama.cpp #29252 (open), PR #8878.
Expected: an f32 GGUF's logits agree with transformers' f32 logits to f32 rounding (~1e-6).
Actual: they differ ~300x more than transformers' own f32-vs-f64 difference, and ~12x less once
  transformers' GELU input and output are rounded to fp16 as the table does (what remains is the
  table's fp16 rounding flipping on 1e-7 input differences).
Run: PYTHONPATH=.cache/pinned/llama-cpp python tools/scoreboard/repro/llama_cpp_gelu_fp16.py
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
V, T = 128, 16
torch.manual_seed(0)
config = Gemma4TextConfig(
    vocab_size=V, hidden_size=64, intermediate_size=128, num_hidden_layers=3, num_attention_heads=2,
    num_key_value_heads=1, head_dim=16, global_head_dim=32, hidden_size_per_layer_input=0,
    layer_types=["sliding_attention", "sliding_attention", "full_attention"], sliding_window=8,
    final_logit_softcapping=30.0, initializer_range=0.1)
model = Gemma4ForCausalLM(config).eval()
ids = torch.randint(3, V, (1, T))


def gguf_logits(model, ids):
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


class TableGelu(torch.nn.Module):
    """ggml_vec_geglu_f32's GGML_GELU_FP16 path: x in (-10, 10) -> fp16(gelu(fp16(x))), else 0 or x."""
    def forward(self, x):
        table = torch.nn.functional.gelu(x.half().float(), approximate="tanh").half().float()
        return torch.where(x <= -10, 0.0, torch.where(x >= 10, x, table))


got = gguf_logits(model, ids)
with torch.no_grad():
    exact = model(ids).logits[0].numpy()
    f32_noise = float(np.abs(model.double()(ids).logits[0].numpy() - exact).max())  # f32 vs f64
    model.float()
    for layer in model.model.layers:
        layer.mlp.act_fn = TableGelu()
    fp16_gelu = model(ids).logits[0].numpy()
d_exact, d_fp16 = float(np.abs(got - exact).max()), float(np.abs(got - fp16_gelu).max())
print(f"transformers f32 vs f64 (f32 rounding):                    max |diff| = {f32_noise:.3e}")
print(f"llama.cpp f32 GGUF vs transformers f32:                    max |diff| = {d_exact:.3e}")
print(f"llama.cpp f32 GGUF vs transformers, GELU through fp16 table: max |diff| = {d_fp16:.3e}")
if d_exact < 30 * f32_noise or d_exact < 3 * d_fp16:
    print("NOT REPRODUCED: llama.cpp's f32 logits agree with transformers' exact-GELU f32 logits")
    sys.exit(0)
print(f"REPRODUCED: f32 GGUF logits differ from transformers f32 by {d_exact:.2e} ({d_exact / f32_noise:.0f}x f32 "
      f"rounding), by {d_fp16:.2e} from transformers with GELU through an fp16 table ({d_exact / d_fp16:.0f}x closer)")
sys.exit(1)
