"""vLLM 0.25.0 runs a Gemma-4 with use_bidirectional_attention="all" causally, without a word.

Project: vLLM 0.25.0 (vllm/model_executor/models/gemma4.py, gemma4_mm.py), FlashAttention 3, with
  transformers 5.13.1 (the newest that vLLM 0.25 reads Gemma-4 configs with: vllm_head_dim_per_layer_config.py).
Finding: LLM(model=<a Gemma4ForCausalLM whose config says use_bidirectional_attention: "all">) loads and
  serves it; its prompt logprobs equal those of the same weights run causally by transformers (up to
  float16 rounding) and differ from the bidirectional model transformers runs.
Why: vLLM reads use_bidirectional_attention only for "vision" (gemma4_mm.py:1115, image tokens on the
  sliding layers); every layer of its Gemma-4 text model is a causal decoder layer, and nothing refuses
  "all". transformers' config sets is_causal = False for "all" (configuration_gemma4.py:193 in 5.13.1):
  no causal mask on any layer, the sliding window two-sided.
Expected: the bidirectional model's logprobs, or a refusal to load a model vLLM cannot run.
How it is measured: prompt logprobs (the whole prompt in one request, log-softmaxed over the vocabulary)
  are the only output of vLLM that sees every token of a prompt; the scoreboard's adapter, which needs raw
  logits, reports such a model "not supported" instead of judging it (impl/third_party/vllm_candidate.py).
Where it shows: the golden transformers/bidirectional on the scoreboard's vLLM rows (not supported there).
Public: none found (vLLM's issues on Gemma-4 bidirectional attention are about images): ready to file.
Run (a CUDA GPU with FlashAttention 3: Hopper), the pinned environments first on PYTHONPATH
  (impl/third_party/pinned_envs.sh vllm vllm-transformers-5.13.1; ci/gpu/carry_vllm.sh for an offline host):
  PYTHONPATH=.cache/pinned/vllm-transformers-5.13.1:.cache/pinned/vllm python tools/scoreboard/repro/vllm_bidirectional_all.py
"""
import os
import sys
import tempfile

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
os.environ.setdefault("VLLM_USE_FLASHINFER_SAMPLER", "0")
import torch
import transformers
from transformers import Gemma4ForCausalLM, Gemma4TextConfig
from vllm import LLM, SamplingParams

V, T, W = 128, 16, 8
ids = torch.randint(3, V, (1, T), generator=torch.Generator().manual_seed(0))


def build(bidirectional):
    torch.manual_seed(0)
    return Gemma4ForCausalLM(Gemma4TextConfig(
        vocab_size=V, hidden_size=64, intermediate_size=128, num_hidden_layers=3, num_attention_heads=2,
        num_key_value_heads=1, head_dim=32, global_head_dim=64, hidden_size_per_layer_input=0,
        layer_types=["sliding_attention", "sliding_attention", "full_attention"], sliding_window=W,
        final_logit_softcapping=30.0, initializer_range=0.1, use_bidirectional_attention=bidirectional)).eval()


def log_softmax(model):
    """transformers' float32 logprobs at positions 0..T-2 (each predicting the next prompt token)."""
    with torch.no_grad():
        return model(ids).logits[0, :-1].float().log_softmax(-1)


bidirectional = build("all")
causal = build(None)
causal.load_state_dict(bidirectional.state_dict())  # the same weights, run causally
with tempfile.TemporaryDirectory() as directory:
    bidirectional.save_pretrained(directory)
    llm = LLM(model=directory, dtype="float16", skip_tokenizer_init=True, seed=0, enforce_eager=True,
              max_model_len=T + 2, max_logprobs=V, enable_prefix_caching=False, gpu_memory_utilization=0.08,
              kv_cache_memory_bytes=256 << 20, attention_config={"backend": "FLASH_ATTN", "flash_attn_version": 3})
    out = llm.generate([{"prompt_token_ids": ids[0].tolist()}],
                       SamplingParams(max_tokens=1, prompt_logprobs=V, detokenize=False), use_tqdm=False)[0]
# prompt_logprobs[p + 1]: the distribution at position p over the token after it (entry 0 is None).
got = torch.full((T - 1, V), float("nan"))
for p, step in enumerate(out.prompt_logprobs[1:]):
    for token, logprob in step.items():
        got[p, token] = logprob.logprob
if got.isnan().any():
    sys.exit(f"vLLM returned {int(got.isnan().sum())} missing prompt logprobs")
d_bidirectional = float((got - log_softmax(bidirectional)).abs().max())
d_causal = float((got - log_softmax(causal)).abs().max())
print(f"vLLM {__import__('vllm').__version__}, transformers {transformers.__version__}, {torch.cuda.get_device_name()}")
print(f"max |vLLM - transformers 'all'| = {d_bidirectional:.3e}   (prompt logprobs, float16 vs float32)")
print(f"max |vLLM - transformers causal, same weights| = {d_causal:.3e}")
if d_bidirectional < 10 * d_causal:
    print("NOT REPRODUCED: vLLM's logprobs are as close to the bidirectional model as to the causal one")
    sys.exit(0)
print(f"REPRODUCED: use_bidirectional_attention='all' served causally: vLLM's prompt logprobs differ from the "
      f"bidirectional model by {d_bidirectional:.2e} and from the same weights run causally by {d_causal:.1e}")
sys.exit(1)
