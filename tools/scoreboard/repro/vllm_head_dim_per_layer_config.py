"""vLLM 0.25.0 cannot start any Gemma-4 model under transformers >= 5.14: get_head_size reads config.head_dim.

Project: vLLM 0.25.0 (vllm/transformers_utils/model_arch_config_convertor.py), with transformers 5.17.0
  (what `pip install vllm==0.25.0` resolves today: it requires transformers >= 5.5.3, no upper bound).
Finding: LLM(model=<any Gemma-4 checkpoint>) stops at ModelConfig.__post_init__ with transformers'
  AmbiguousGlobalPerLayerAttributeError ('head_dim' is a per-layer attribute), whichever convention the
  config.json is written in (the tiny cases as saved by transformers 5.17 and in the released
  checkpoints' convention alike). With transformers 5.13.1 the same call returns the largest head dim.
Why: from 5.14 transformers keeps Gemma-4's per-layer geometry in per_layer_config and refuses a global
  read of a per-layer attribute; Gemma4ModelArchConfigConvertor.get_head_size does
  `getattr(self.hf_text_config, "head_dim", 0)`, and getattr's default absorbs AttributeError only.
Expected: the largest head dim over the layers (per_layer_config read per layer).
Where it shows: the scoreboard's "vLLM prefill (FlashAttention 3, transformers 5.17.0)" row fails every
  case on the NVIDIA H200; its rows with transformers 5.13.1 load.
Public: known: vllm-project/vllm #51744 (vLLM 0.27.0 with transformers 5.15, open) and #52768; the fix
  (vllm-project/vllm #49797) is in vLLM 0.28.0 according to tenstorrent/vllm-tt-plugin #106; vLLM 0.28 pins torch 2.13. Workaround: transformers
  <= 5.13.1 beside vLLM 0.25 (#51744 reports 5.14.1 working too).
Run (no GPU needed: only vLLM's config code runs): the pinned vllm environment first on PYTHONPATH
  (impl/third_party/pinned_envs.sh vllm), with an interpreter that has transformers and the packages of
  vLLM's requirements the GPU host's Python has (else: pip install psutil cloudpickle pillow aiohttp einops
  uvloop py-cpuinfo prometheus-client):
  PYTHONPATH=.cache/pinned/vllm python tools/scoreboard/repro/vllm_head_dim_per_layer_config.py
"""
import sys
import tempfile

import transformers
from transformers import AutoConfig, Gemma4TextConfig
import vllm.config  # noqa: F401  (first: the convertor's module and vllm.config import each other)
from vllm.transformers_utils.model_arch_config_convertor import Gemma4ModelArchConfigConvertor

# A tiny Gemma-4 as transformers saves it (head dim 16 on sliding layers, 32 on global ones), read back as
# vLLM reads a checkpoint's config.json.
with tempfile.TemporaryDirectory() as directory:
    Gemma4TextConfig(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=4, num_attention_heads=2,
                     num_key_value_heads=1, head_dim=16, global_head_dim=32, sliding_window=8,
                     layer_types=["sliding_attention"] * 3 + ["full_attention"]).save_pretrained(directory)
    config = AutoConfig.from_pretrained(directory)
try:
    size = Gemma4ModelArchConfigConvertor(config, config.get_text_config()).get_head_size()
except Exception as e:  # transformers' AmbiguousGlobalPerLayerAttributeError (no such class before 5.14)
    print(f"REPRODUCED: under transformers {transformers.__version__} vLLM's Gemma-4 config reader raises "
          f"{type(e).__name__}: {str(e).splitlines()[0][:100]}")
    sys.exit(1)
print(f"NOT REPRODUCED: under transformers {transformers.__version__} vLLM reads the head size, {size} (expected 32)")
