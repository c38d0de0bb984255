"""google-deepmind/gemma's JAX Gemma-4 in float16: a left-padded sequence's logits are all NaN.

Project: google-deepmind/gemma 4.0.1 (gemma.gm.nn.gemma4, flax linen), jax 0.11.2.
Finding: with dtype=jnp.float16, every logit of a sequence that starts with padding (token 0, the
  package's padding id) is NaN, the real tokens' included; bfloat16 and float32 give finite logits
  that agree with float32.
Why: gemma/gm/nn/gemma4/_modules.py fills masked attention logits with K_MASK = -2.3819763e38
  (`jnp.where(attn_mask, logits, K_MASK)`), which is -inf in float16 (its largest is 65504). A
  padding position's query may attend to no key at all (every earlier key is padding too), so its
  softmax is over -inf only: NaN. From the next layer on, that position's NaN key and value reach
  every real query through probs @ V (0 x NaN = NaN). bfloat16 holds K_MASK (about -2.38e38), so
  the fully masked rows there are uniform, not NaN, and never reach a real query.
Expected: finite logits at the real tokens (a dtype-aware mask value, e.g. jnp.finfo(dtype).min, as
  flax's own attention does since google/flax #982).
Where it shows: the scoreboard's gemma (JAX) rows in f16 fail transformers/padded_batch (every
  output and gradient not finite), on the CPU and on the NVIDIA H200; f32 and bf16 pass.
Public: the same class in flax's attention, google/flax #982 (fixed in 2021); in
  google-deepmind/gemma: none found, ready to file.
Run (kauldron imports TensorFlow for a type alias: have tensorflow installed, or put
  impl/third_party/stubs first on PYTHONPATH):
  PYTHONPATH=impl/third_party/stubs .cache/pinned/jax-gemma/bin/python \
      tools/scoreboard/repro/jax_gemma_f16_left_padding_nan.py
"""
import sys

import jax
import jax.numpy as jnp
import numpy as np
from gemma.gm.nn.gemma4 import _config, _modules, _transformer

LOCAL, GLOBAL = _modules.AttentionType.LOCAL_SLIDING, _modules.AttentionType.GLOBAL
config = _config.TransformerConfig(  # a tiny Gemma-4: 4 layers, sliding and global, as gm.nn.Gemma4_E2B's
    num_embed=128, embed_dim=64, hidden_dim=128, num_heads=2, head_dim=32, num_kv_heads=1, final_logit_softcap=30.0,
    use_post_attn_norm=True, use_post_ffw_norm=True, attention_types=(LOCAL, LOCAL, LOCAL, GLOBAL),
    sliding_window_size=8, global_key_size=64, global_rope_proportion=0.25, local_rope_proportion=1.0,
    local_base_frequency=10_000, global_base_frequency=1_000_000)
tokens = np.random.default_rng(0).integers(1, 128, (2, 16))
tokens[0, :4] = 0  # row 0 is left-padded (4 padding tokens); row 1 is not
real = tokens != 0

logits = {}
params32 = None
for dtype in (jnp.float32, jnp.bfloat16, jnp.float16):
    model = _transformer.Transformer(config=config, dtype=dtype, tokens="batch.tokens")
    if params32 is None:
        params32 = model.init(jax.random.PRNGKey(0), jnp.asarray(tokens))
    params = jax.tree_util.tree_map(lambda a: a.astype(dtype), params32)
    logits[dtype] = np.asarray(model.apply(params, jnp.asarray(tokens)).logits, np.float32)
    finite = np.isfinite(logits[dtype][real]).all(-1)
    error = np.abs(logits[dtype] - logits[jnp.float32])[real][finite].max()
    print(f"{jnp.dtype(dtype).name:9s} real tokens with finite logits: row 0 {finite[:real[0].sum()].sum()}/"
          f"{real[0].sum()}, row 1 {finite[real[0].sum():].sum()}/{real[1].sum()}; "
          f"largest difference from float32 where finite: {error:.3g}")
row0 = logits[jnp.float16][0][real[0]]
if np.isnan(row0).all() and np.isfinite(logits[jnp.bfloat16][real]).all():
    print(f"REPRODUCED: gemma.gm.nn.gemma4 in float16 (jax {jax.__version__}, {jax.default_backend()}): every logit "
          "of the left-padded row is NaN (bfloat16 and float32 are finite)")
    sys.exit(1)
print("NOT REPRODUCED: float16 logits of the left-padded row are finite")
