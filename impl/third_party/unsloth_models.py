"""unsloth's patched Gemma-4 as a model under test (``python -m gemma4_conform conform-model``).

    python -m gemma4_conform conform-model --factory unsloth_models:full_finetuning --device cuda --dtype bf16

unsloth (with unsloth_zoo) does not patch a module you hand it: its patches are applied while its
loader loads a checkpoint (``FastModel.from_pretrained``: it regenerates transformers'
modeling_gemma4 with torch.compile'd RMSNorm, rotary, attention and router forwards, replaces the
decoder stack's, the MLP's and the MoE experts' forwards with unsloth_zoo's, the causal LM's loss
with its fused linear cross-entropy, and gradient checkpointing with its own). So the factory does what a
user does: it writes the golden's config as a checkpoint directory (transformers' Gemma4ForCausalLM
saved with random weights, which the harness then overwrites with the golden's, and a stand-in
tokenizer) and loads it with ``FastModel.from_pretrained(dir, dtype=..., load_in_4bit=False,
full_finetuning=True)``: full precision, every weight trained (FastLanguageModel.from_pretrained
hands Gemma-4 to FastModel). Two adaptations of the interface, never of the math:
- after loading, gradient checkpointing is turned off (unsloth turns it on), so that the harness's
  plain step is plain; its checkpointing checks turn it back on with the model's own
  ``gradient_checkpointing_enable`` (unsloth's wrapper, reentrant, with unsloth's checkpoint function);
- unsloth's training forward returns a sentinel (``EmptyLogits``) instead of the logits when given
  labels (its fused loss never forms them); a forward hook turns that into None, which the harness
  reads as "logits from a forward without labels" (run_step), as for Liger's fused loss.

CUDA only: on a machine without an accelerator unsloth refuses to import ("cannot find any torch
accelerator"), so other devices are NotSupported before it is imported.
"""
from __future__ import annotations

import atexit
import hashlib
import json
import os
import shutil
import tempfile
import threading
from pathlib import Path

import torch
from gemma4_conform.model_under_test import NotSupported

# Set (unless already set) before unsloth is imported, because unsloth and unsloth_zoo read most of
# them at import:
# - statistics: from_pretrained otherwise downloads a file from the Hugging Face Hub as a usage counter;
# - the offline switches: the checkpoint is a local directory, and nothing should ask the Hub (unsloth
#   maps model names to its own repositories and prefetches snapshots; offline it skips both, and
#   unsloth_zoo then also leaves hf_transfer off);
# - the compile location: unsloth writes its regenerated modeling files (unsloth_compiled_module_gemma4.py,
#   ...) to ./unsloth_compiled_cache by default, the working directory (the repository, in a scoreboard
#   run); a directory of this process instead, removed at exit.
ENVIRONMENT = {
    "UNSLOTH_DISABLE_STATISTICS": "1",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "HF_HUB_DISABLE_TELEMETRY": "1",
}

_scratch: Path | None = None      # this process's directory: checkpoints and the compile cache
_checkpoints: dict[str, Path] = {}  # (config, dtype) -> its checkpoint directory
# One load at a time: conform-model's two-models check calls the factory from two threads at once, and
# transformers 5.17's from_pretrained is not thread-safe (no_tie_weights() and no_init_weights() save and
# restore PreTrainedModel.tie_weights / init_weights and torch.nn.init around the load: interleaved, the
# no-op stays installed, and every later model of the process has an untied LM head left on the meta
# device). The check is about two models training at once; they still do, only their loading is serial.
_LOAD_LOCK = threading.Lock()


def _scratch_dir() -> Path:
    global _scratch
    if _scratch is None:
        _scratch = Path(tempfile.mkdtemp(prefix="gemma4-conform-unsloth-"))
        atexit.register(shutil.rmtree, _scratch, ignore_errors=True)
    return _scratch


def _import_unsloth():
    """unsloth, imported once with ENVIRONMENT; first, before this module imports transformers
    (unsloth patches transformers, trl and peft when imported, and warns when it comes after them)."""
    for key, value in ENVIRONMENT.items():
        os.environ.setdefault(key, value)
    os.environ.setdefault("UNSLOTH_COMPILE_LOCATION", str(_scratch_dir() / "unsloth_compiled_cache"))
    import unsloth

    return unsloth


def _special_ids(text_config) -> dict[int, str]:
    """The config's special token ids (an id may be a list in transformers' configs), by name."""
    out = {}
    for name in ("pad", "eos", "bos"):
        ids = getattr(text_config, f"{name}_token_id", None)
        for i in ids if isinstance(ids, (list, tuple)) else [ids]:
            if isinstance(i, int) and 0 <= i < text_config.vocab_size and i not in out:
                out[i] = f"<{name}>" if f"<{name}>" not in out.values() else f"<{name}{i}>"  # names unique
    return out


def write_tokenizer(directory: Path, text_config) -> None:
    """A stand-in tokenizer of exactly vocab_size tokens: FastModel.from_pretrained always loads one
    and raises without it. Its pad, eos and bos tokens sit at the config's ids, so unsloth's tokenizer
    fixes find a pad token and have nothing to add (adding one would resize the embedding). The golden
    inputs are token ids; the tokenizer never encodes anything."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    names = {i: f"<tok{i}>" for i in range(text_config.vocab_size)}
    specials = _special_ids(text_config)
    names.update(specials)
    unk = next(i for i in range(text_config.vocab_size) if i not in specials)
    names[unk] = "<unk>"
    tokenizer = Tokenizer(models.WordLevel({n: i for i, n in names.items()}, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer.save(str(directory / "tokenizer.json"))
    by_name = {n.strip("<>"): n for n in specials.values()}
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "unk_token": "<unk>", "model_max_length": 1 << 20,
              **{f"{k}_token": by_name[k] for k in ("pad", "eos", "bos") if k in by_name}}
    (directory / "tokenizer_config.json").write_text(json.dumps(config, indent=1) + "\n")


def checkpoint(config: dict, dtype: torch.dtype) -> Path:
    """The config as a checkpoint directory in `dtype` (as a released checkpoint is stored in the dtype
    it is used in), written once per process: transformers' Gemma4ForCausalLM with random weights."""
    key = hashlib.sha256((json.dumps(config, sort_keys=True) + str(dtype)).encode()).hexdigest()[:16]
    if key not in _checkpoints:
        import transformers

        path = _scratch_dir() / f"checkpoint-{key}"
        text_config = transformers.Gemma4TextConfig(**config)
        with torch.device("cpu"):
            model = transformers.Gemma4ForCausalLM(text_config).to(dtype)
        model.save_pretrained(path)
        write_tokenizer(path, text_config)
        _checkpoints[key] = path
    return _checkpoints[key]


def _none_for_empty_logits(module, args, output):
    # unsloth's EmptyLogits sentinel (any non-tensor) -> None: the harness then takes the logits from
    # the same module called without labels.
    if getattr(output, "logits", None) is not None and not torch.is_tensor(output.logits):
        output.logits = None
    return output


def load(config: dict, dtype: torch.dtype, **from_pretrained) -> torch.nn.Module:
    """unsloth's model of the config: FastModel.from_pretrained on its checkpoint directory, full
    finetuning in `dtype`, then the two adaptations of the module docstring. `from_pretrained`: more
    arguments (device_map, ...)."""
    with _LOAD_LOCK:
        return _load(config, dtype, **from_pretrained)


def _load(config: dict, dtype: torch.dtype, **from_pretrained) -> torch.nn.Module:
    _import_unsloth()
    from unsloth import FastModel

    path = checkpoint(config, dtype)
    model, _tokenizer = FastModel.from_pretrained(
        str(path),
        dtype=dtype,            # f32 rows: float32 full finetuning; bf16: bfloat16 (unsloth's default on an H200)
        load_in_4bit=False,     # FastModel's default is 4-bit QLoRA; full precision here
        full_finetuning=True,   # every weight trainable (a LoRA model's base weights get no gradient)
        use_exact_model_name=True,
        **from_pretrained,      # max_seq_length stays 2048, the default: >= 512 selects unsloth's offloading
    )                           # gradient checkpointing ("unsloth"), as users get it
    model.gradient_checkpointing_disable()
    model.register_forward_hook(_none_for_empty_logits)
    return model


def full_finetuning(config: dict, dtype: torch.dtype, device: str) -> torch.nn.Module:
    """The factory: unsloth's Gemma-4 loaded for full finetuning on the CUDA device (device_map
    unsloth's default, the current GPU)."""
    if torch.device(device).type != "cuda":
        raise NotSupported(f"unsloth needs a CUDA GPU (it refuses to import without an accelerator; device {device})")
    if dtype == torch.float16:
        # Gemma-4 is on unsloth's FORCE_FLOAT32 list (float16 gives NaN gradients): asked for float16, it
        # loads bfloat16 weights and casts the projections, embeddings and LM head to float16 for float32
        # mixed precision (loader.py, patch_model_and_tokenizer's do_forced_float32). Not a float16 model.
        raise NotSupported("unsloth does not train Gemma-4 in float16 (it loads bfloat16 and runs float16 "
                           "projections under float32 mixed precision)")
    return load(config, dtype)
