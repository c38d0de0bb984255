"""axolotl 0.19.0's Gemma-4 shared-KV side channel is process-global: concurrent models share one K/V store.

NOT RUN HERE: needs a CUDA GPU (axolotl's Triton kernels), torch >= 2.11 with triton, transformers
  5.16.1 (axolotl's pin) or 5.17.0, and: pip install --no-deps axolotl==0.19.0 liger-kernel==0.8.1 accelerate==1.13.0
Bug: patch_gemma4_fused_attn(install_shared_kv_workaround=True) routes shared_kv_states through the
  module-level _GEMMA4_SHARED_KV_STORE: each Gemma4TextDecoderLayer.__call__ overwrites it, and each
  patched Gemma4TextAttention.forward reads it (KV-shared layers) or writes into it (K/V source
  layers), so two models training at once in two threads use each other's K/V (keys are layer_type).
Source: src/axolotl/monkeypatch/models/gemma4/fused_attn.py (_GEMMA4_SHARED_KV_STORE,
  _patch_decoder_layer_call, fused_forward); the store came from the fix of #3610 (PR #3611).
Schedule: hooks pass a turn between the threads at every attention layer (A sets the store, B sets
  it, A's attention, B's attention), A's backward runs before B's: one interleaving the scheduler
  can produce by itself, made deterministic.
Expected: each model's gradients in the concurrent step equal its solo step's (cosine 1).
Actual (not run on a GPU; the same script on the CPU with the two Triton kernels replaced by torch
  code): model 0's KV-shared layers read model 1's K/V, gradient cosine -0.17; model 1's backward
  fails, "Trying to backward through the graph a second time" (model 0's went through it first).
Run: python tools/scoreboard/repro/axolotl_shared_kv_threads.py
"""
import sys
import threading

import torch
from transformers import Gemma4ForCausalLM, Gemma4TextConfig
from axolotl.monkeypatch.models.gemma4.fused_attn import patch_gemma4_fused_attn

patch_gemma4_fused_attn(install_shared_kv_workaround=True)
config = Gemma4TextConfig(  # E2B-like: layers 2 and 3 read the K/V of layers 0 and 1
    vocab_size=128, hidden_size=64, intermediate_size=64, num_hidden_layers=4, num_attention_heads=2,
    num_key_value_heads=1, head_dim=16, global_head_dim=32, num_kv_shared_layers=2, use_double_wide_mlp=True,
    hidden_size_per_layer_input=8, vocab_size_per_layer_input=128, sliding_window=8, final_logit_softcapping=30.0,
    layer_types=["sliding_attention", "full_attention", "sliding_attention", "full_attention"])
torch.manual_seed(0)
models = [Gemma4ForCausalLM(config).cuda().train() for _ in range(2)]  # same shapes, different weights
ids = [torch.randint(3, 128, (2, 16), generator=torch.Generator().manual_seed(s)).cuda() for s in (2, 3)]
turn, state, a_done = threading.Condition(), {"turn": 0, "hooks": [0, 0]}, threading.Event()
together, errors = [None, None], [None, None]


def handoff(i):
    """Thread i gives the turn to the other thread and, except at its last hook, waits to get it back."""
    with turn:
        state["turn"], state["hooks"][i] = 1 - i, state["hooks"][i] + 1
        turn.notify_all()
        if state["hooks"][i] < 2 * config.num_hidden_layers and not turn.wait_for(lambda: state["turn"] == i, 60):
            raise TimeoutError("the other thread stopped")


def step(i, concurrent=False):
    """One training step of model i; its gradients by parameter name."""
    models[i].zero_grad(set_to_none=True)
    try:
        with turn:  # model 1 starts once model 0 reached its first hook
            turn.wait_for(lambda: not concurrent or state["turn"] == i, 60)
        loss = models[i](input_ids=ids[i], labels=ids[i]).loss
        if concurrent and i == 1 and not a_done.wait(60):
            raise TimeoutError("model 0's backward did not finish")
        loss.backward()
        grads = {n: torch.zeros_like(p) if p.grad is None else p.grad.clone() for n, p in models[i].named_parameters()}
    except Exception as e:  # noqa: BLE001 - reported below
        errors[i] = f"{type(e).__name__}: {str(e).split('. ')[0]}"
        grads = None
    if i == 0:
        a_done.set()
    together[i] = grads
    return grads


solo = [step(0), step(1)]
assert not any(errors), errors
a_done.clear()
for i, model in enumerate(models):
    for layer in model.model.layers:
        layer.self_attn.register_forward_pre_hook(lambda *_, i=i: handoff(i))
        layer.self_attn.register_forward_hook(lambda *_, i=i: handoff(i))
threads = [threading.Thread(target=step, args=(i, True)) for i in (0, 1)]
for t in threads:
    t.start()
for t in threads:
    t.join()
found = [f"model {i}: {errors[i]}" for i in (0, 1) if errors[i]]
for i in (i for i in (0, 1) if not errors[i]):
    cos = {n: torch.nn.functional.cosine_similarity(solo[i][n].flatten().double(), g.flatten().double(), dim=0,
                                                    eps=1e-30).item() for n, g in together[i].items()}
    worst = min(cos, key=cos.get)
    print(f"model {i}: min gradient cosine (concurrent vs solo) {cos[worst]:.6f} at {worst}")
    found += [f"model {i}: gradient cosine {cos[worst]:.4f} at {worst}"] if cos[worst] < 0.999 else []
if not found:
    print("NOT REPRODUCED: both models' concurrent gradients equal their solo gradients")
    sys.exit(0)
print("REPRODUCED: two Gemma-4 models in two threads share axolotl's KV store: " + "; ".join(found))
sys.exit(1)
