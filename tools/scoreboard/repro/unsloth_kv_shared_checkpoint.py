"""unsloth 2026.10.9: gradient checkpointing of a Gemma-4 with KV-shared layers fails in its recompute.

Needs a CUDA GPU (unsloth refuses to import without one), torch 2.11, transformers 5.17.0, and:
  pip install --no-deps unsloth==2026.10.9 unsloth_zoo==2026.10.9 bitsandbytes==0.50.2 trl==1.15.0 datasets==4.8.5
Bug (seen in gemma4-conformance's model checks on an NVIDIA H200, f32, its E2B-like golden; this script,
  which isolates it, has not yet run to its end): FastModel.from_pretrained(..., load_in_4bit=False,
  full_finetuning=True) of an E2B-like model (its last layers read the K/V of earlier ones,
  num_kv_shared_layers > 0), then model.gradient_checkpointing_enable() (as Trainer and TRL's SFTTrainer
  call it) and a training step: backward raises torch.utils.checkpoint's CheckpointError ("Recomputed
  values for the following tensors have different metadata than during the forward pass").
Expected: the checkpointed step trains like the plain one, as transformers 5.17's own Gemma-4 does.
Controls: the same model with checkpointing off trains; the same config without KV-shared layers
  trains with checkpointing on.
Run: python tools/scoreboard/repro/unsloth_kv_shared_checkpoint.py
"""
import json
import os
import sys
import tempfile
from pathlib import Path

scratch = Path(tempfile.mkdtemp(prefix="unsloth-repro-"))
os.environ.update(UNSLOTH_DISABLE_STATISTICS="1", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
                  UNSLOTH_COMPILE_LOCATION=str(scratch / "compiled"))
import unsloth  # noqa: E402,F401 - before transformers, as unsloth asks
import torch  # noqa: E402
from tokenizers import Tokenizer, models  # noqa: E402
from transformers import Gemma4ForCausalLM, Gemma4TextConfig  # noqa: E402
from unsloth import FastModel  # noqa: E402


def checkpoint(name, kv_shared):
    """A tiny E2B-like checkpoint (layers 2 and 3 read the K/V of layers 0 and 1 when kv_shared) and a
    word-level tokenizer of its vocabulary (FastModel.from_pretrained loads one)."""
    config = Gemma4TextConfig(
        vocab_size=128, hidden_size=64, intermediate_size=64, num_hidden_layers=4, num_attention_heads=2,
        num_key_value_heads=1, head_dim=16, global_head_dim=32, num_kv_shared_layers=2 if kv_shared else 0,
        hidden_size_per_layer_input=8, vocab_size_per_layer_input=128, sliding_window=8,
        final_logit_softcapping=30.0, pad_token_id=0, eos_token_id=1, bos_token_id=2,
        layer_types=["sliding_attention", "full_attention", "sliding_attention", "full_attention"])
    path = scratch / name
    torch.manual_seed(0)
    Gemma4ForCausalLM(config).save_pretrained(path)
    vocab = {"<pad>": 0, "<eos>": 1, "<bos>": 2} | {f"t{i}": i for i in range(3, 128)}
    Tokenizer(models.WordLevel(vocab, unk_token="t3")).save(str(path / "tokenizer.json"))
    (path / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "unk_token": "t3", "pad_token": "<pad>",
        "eos_token": "<eos>", "bos_token": "<bos>"}))
    return path


def step(model, checkpointing):
    """One training step; None if it trained, else the error's first sentence."""
    if checkpointing:
        model.gradient_checkpointing_enable()
    else:
        model.gradient_checkpointing_disable()
    model.train()
    model.zero_grad(set_to_none=True)
    ids = torch.randint(3, 128, (2, 16), generator=torch.Generator().manual_seed(1)).cuda()
    try:
        model(input_ids=ids, labels=ids).loss.backward()
        return None
    except Exception as e:  # noqa: BLE001 - reported below
        return f"{type(e).__name__}: {str(e).split('.')[0]}."


def load(path):
    model, _ = FastModel.from_pretrained(str(path), dtype=torch.float32, load_in_4bit=False, full_finetuning=True,
                                         use_exact_model_name=True)
    return model


results = {}


def record(what, error):
    results[what] = error
    print(f"{what}: {error or 'trained'}", flush=True)  # each as it comes: a load compiles for minutes


shared = load(checkpoint("kv-shared", True))
record("KV-shared, checkpointing on", step(shared, True))
record("KV-shared, checkpointing off", step(shared, False))
record("no KV sharing, checkpointing on", step(load(checkpoint("no-sharing", False)), True))
bug = results["KV-shared, checkpointing on"]
if bug and not results["KV-shared, checkpointing off"] and not results["no KV sharing, checkpointing on"]:
    print(f"REPRODUCED: unsloth {unsloth.__version__}, KV-shared Gemma-4 with gradient checkpointing: {bug} "
          "(trains with checkpointing off, and without KV-shared layers)")
    sys.exit(1)
print("NOT REPRODUCED: " + "; ".join(f"{w}: {e or 'trained'}" for w, e in results.items()))
sys.exit(0)
