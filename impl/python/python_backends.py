"""Backends written in Python for the package's tests: every op in plain PyTorch (a legitimate
implementation that rounds its own way: SDPA attention, its own RoPE and norms), and faulty ones
that change exactly one thing, so the tests show the suite passes the first and fails the others
through the Python bridge."""
import torch
import torch.nn.functional as F

import gemma4_conform as gc


def rms_norm(x, weight, eps):
    xf = x.float()
    y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    if weight is not None:
        y = y * weight.float()
    return y.to(x.dtype)


def apply_rope(x, rope):  # x [B, S, H, D]; rope.cos/.sin [S, D] or [B, S, D]
    cos, sin = rope.cos.unsqueeze(-2), rope.sin.unsqueeze(-2)  # over the heads
    first, second = x.chunk(2, dim=-1)
    return x * cos + torch.cat((-second, first), dim=-1) * sin


def qk_norm_rope(q, k, v, q_norm, k_norm, rope, eps):
    q_out = apply_rope(rms_norm(q, q_norm, eps), rope)
    if k is None:  # a KV-shared layer: q only
        return q_out, None, None
    v_raw = k if v is None else v  # K=V: the value is the raw key projection
    k_out = apply_rope(rms_norm(k, k_norm, eps), rope).transpose(1, 2)
    return q_out, k_out, rms_norm(v_raw, None, eps).transpose(1, 2)


def allowed_keys(spec, seq_len, device, window_shift=0):
    """[B or 1, 1, S, S] bool: query i may see key j."""
    i = torch.arange(seq_len, device=device)[:, None]
    j = torch.arange(seq_len, device=device)[None, :]
    if spec.layer_type == "sliding_attention":
        w = spec.sliding_window + window_shift
        allowed = (i - j).abs() <= w // 2 + 1 if spec.bidirectional else (j <= i) & (i - j < w)
    else:
        allowed = torch.ones_like(i - j, dtype=torch.bool) if spec.bidirectional else j <= i
    allowed = allowed[None, None]
    if spec.padding is not None:
        allowed = allowed & spec.padding.to(device=device, dtype=torch.bool)[:, None, None, :]
    if spec.segments is not None:  # packed rows: a query sees its own sequence only
        seg = spec.segments.to(device)
        allowed = allowed & (seg[:, None, :, None] == seg[:, None, None, :])
    return allowed


def sdpa_attention(q, k, v, spec, window_shift=0):
    B, S, Hq, D = q.shape
    group = Hq // k.shape[1]
    allowed = allowed_keys(spec, S, q.device, window_shift)
    # An additive mask of the dtype's lowest value, as transformers' eager masks: a query row that sees
    # no key (left padding) stays finite (FORMAT.md: don't-care, must be finite).
    mask = torch.zeros(allowed.shape, dtype=q.dtype, device=q.device).masked_fill(~allowed, torch.finfo(q.dtype).min)
    out = F.scaled_dot_product_attention(q.transpose(1, 2), k.repeat_interleave(group, 1),
                                         v.repeat_interleave(group, 1), attn_mask=mask, scale=1.0)
    return out.transpose(1, 2).reshape(B, S, Hq * D)


def geglu(gate, up):
    return F.gelu(gate, approximate="tanh") * up


def moe_experts(x, top_index, top_weights, gate_up_proj, down_proj):
    out = torch.zeros_like(x)
    inter = down_proj.shape[2]
    for e in range(gate_up_proj.shape[0]):
        token, k_pos = torch.where(top_index == e)
        if token.numel() == 0:
            continue
        gate_up = F.linear(x[token], gate_up_proj[e])
        h = F.linear(geglu(gate_up[:, :inter], gate_up[:, inter:]), down_proj[e])
        out = out.index_add(0, token, (h * top_weights[token, k_pos, None]).to(out.dtype))
    return out


class RingCache:
    """A cache preallocated as an inference engine does and written in place: a global layer's holds
    `capacity` slots, a sliding layer's a ring of `window + max_rollback` slots (index t in slot
    t % slots), all the next step needs, also after a rejected draft is rolled back. A step's queries
    see the entries held before it plus the step's own K/V, so a prefill chunk longer than the ring
    still sees every key of its window."""

    def __init__(self, spec):
        dtype = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}[spec.dtype]
        self.slots = spec.capacity if spec.window == 0 else min(spec.capacity, spec.window + spec.max_rollback)
        shape = (spec.batch, spec.kv_heads, self.slots, spec.head_dim)
        self.k = torch.zeros(shape, dtype=dtype, device=spec.device)
        self.v = torch.zeros_like(self.k)
        self.length = 0
        self.step = None  # (k, v, first): what the last step's queries see

    def update(self, k, v, start):
        assert start == self.length, (start, self.length)
        old_k, old_v, first = self.stored()
        self.step = *self.decoded(torch.cat([old_k, k], 2), torch.cat([old_v, v], 2)), first
        self.length = start + k.shape[2]
        # Only the newest `slots` indices stay: a chunk longer than the ring would repeat slots in
        # one index_put, whose winner on CUDA is unspecified (the H200 kept older keys).
        keep = min(k.shape[2], self.slots)
        index = torch.arange(self.length - keep, self.length, device=k.device) % self.slots
        self.k[:, :, index] = k[:, :, -keep:]
        self.v[:, :, index] = v[:, :, -keep:]

    def rollback(self, n):
        """Forget the newest n indices: their slots are overwritten by the next update. The ring's
        max_rollback spare slots still hold the keys the next step sees."""
        assert 1 <= n <= self.length, (n, self.length)
        self.length -= n
        self.step = None

    def stored(self):
        """(k, v, first): the indices still in the ring, oldest first, as stored."""
        first = max(0, self.length - self.slots)
        index = torch.arange(first, self.length, device=self.k.device) % self.slots
        return self.k[:, :, index], self.v[:, :, index], first

    def decoded(self, k, v):
        """What stored entries are worth (a quantized cache decodes them)."""
        return k, v

    def held(self):
        k, v, first = self.stored()
        return *self.decoded(k, v), first


class Fp8RingCache(RingCache):
    """The ring storing float8 e4m3 codes (as bytes), as vLLM's fp8 KV cache: one static scale per KV head
    for K and one for V, amax / 448 of the layer's first update, then fixed (later entries saturate at
    448); attention on the codes decoded to the model dtype. Declared as cache_quantization
    "fp8-e4m3-per-head"."""

    def __init__(self, spec):
        super().__init__(spec)
        self.dtype, self.full = self.k.dtype, spec.layer_type == "full_attention"
        self.k = torch.zeros(self.k.shape, dtype=torch.uint8, device=self.k.device)
        self.v = torch.zeros_like(self.k)
        self.scales = None

    def update(self, k, v, start):
        if self.scales is None:
            self.scales = [x.float().abs().amax((0, 2, 3), keepdim=True).clamp_min(torch.finfo(torch.float32).tiny) / 448
                           for x in (k, v)]
        super().update(*((x.float() / s).clamp(-448, 448).to(torch.float8_e4m3fn).view(torch.uint8)
                         for x, s in zip((k, v), self.scales)), start)

    def decoded(self, k, v):
        return tuple((c.view(torch.float8_e4m3fn).float() * s).to(self.dtype) for c, s in zip((k, v), self.scales))


class Fp8RingCacheKAsV(Fp8RingCache):
    """faulty: global layers decode V from the K codes (ikawrakow/ik_llama.cpp #1592)."""

    def decoded(self, k, v):
        k, v = super().decoded(k, v)
        return (k, k) if self.full else (k, v)


def cache_attention(q, cache, spec, window_shift=0):
    # A KV-shared layer reads its source's cache after the source's update of this step.
    k, v, first = cache.step
    B, c, Hq, D = q.shape
    i = torch.arange(spec.start, spec.start + c, device=q.device)[:, None]
    j = torch.arange(first, first + k.shape[2], device=q.device)[None, :]
    allowed = j <= i
    if spec.layer_type == "sliding_attention":
        allowed = allowed & (i - j < spec.sliding_window + window_shift)
    allowed = allowed[None, None] & spec.padding[:, first:first + k.shape[2]].to(q.device, torch.bool)[:, None, None, :]
    mask = torch.zeros(allowed.shape, dtype=q.dtype, device=q.device).masked_fill(~allowed, torch.finfo(q.dtype).min)
    group = Hq // k.shape[1]
    out = F.scaled_dot_product_attention(q.transpose(1, 2), k.repeat_interleave(group, 1),
                                         v.repeat_interleave(group, 1), attn_mask=mask, scale=1.0)
    return out.transpose(1, 2).reshape(B, c, Hq * D)


CACHE_OPS = dict(cache_make=RingCache, cache_update=lambda cache, k, v, start: cache.update(k, v, start),
                 cache_attention=cache_attention, cache_contents=lambda cache: cache.held(),
                 cache_rollback=lambda cache, n: cache.rollback(n))


def correct():
    """Every op replaced by plain PyTorch: must pass the whole suite in every dtype. No claim of
    determinism: SDPA's CUDA backward (memory-efficient kernel, chosen for a float mask) accumulates
    dQ with atomics, and the determinism check on an H200 failed this backend while it claimed it."""
    return gc.Backend("python-all-ops", rms_norm=rms_norm, qk_norm_rope=qk_norm_rope, attention=sdpa_attention,
                      geglu=geglu, moe_experts=moe_experts, capabilities=gc.Capabilities(deterministic=False),
                      description="every op in plain PyTorch (SDPA attention, a ring-buffer KV cache)", **CACHE_OPS)


def fp8_kv_cache():
    """The ring cache in fp8 e4m3 with per-head scales, declared: judged against the reference decoding
    through a cache rounded the same way (must pass)."""
    return gc.Backend("python-fp8-kv-cache", cache_quantization="fp8-e4m3-per-head",
                      description="the ring KV cache storing fp8 e4m3 codes with static per-head scales",
                      **dict(CACHE_OPS, cache_make=Fp8RingCache))


def fp8_kv_k_as_v():
    """faulty: the fp8 ring cache's global layers read K as V (the decode category must catch it)."""
    return gc.Backend("python-fp8-kv-k-as-v", cache_quantization="fp8-e4m3-per-head",
                      **dict(CACHE_OPS, cache_make=Fp8RingCacheKAsV))


def decode_window_plus_one():
    """faulty: the step's queries see one key older than their window (the decode category must catch it)."""
    return gc.Backend("python-decode-window-plus-one", **dict(
        CACHE_OPS, cache_attention=lambda q, cache, spec: cache_attention(q, cache, spec, window_shift=1)))


class RingWithoutSpareSlots(RingCache):
    """faulty: a ring of `window` slots that ignores max_rollback, as a cache sized before
    speculative decoding was added: a draft overwrites the slots of the oldest keys of the window,
    and rolling back moves the end but cannot bring those keys back; the next step reads the
    rejected draft's K/V in their place (ml-explore/mlx-swift-lm #383, #424; fixed by #516)."""

    def __init__(self, spec):
        super().__init__(spec)
        if spec.window:
            self.slots = min(spec.capacity, spec.window)
            self.k, self.v = self.k[:, :, :self.slots].clone(), self.v[:, :, :self.slots].clone()


def decode_rollback_without_spare_slots():
    """faulty: speculative rollback of a ring with no spare slots (the decode category must catch it)."""
    return gc.Backend("python-decode-rollback-without-spare-slots", **dict(CACHE_OPS, cache_make=RingWithoutSpareSlots))


def cache_ops_incomplete():
    """Three of the four cache ops: refused with the missing one named."""
    return gc.Backend("python-cache-incomplete", **{k: v for k, v in CACHE_OPS.items() if k != "cache_contents"})


def window_off_by_one():
    """faulty: sliding windows one key too wide (the golden and op_sweep categories must catch it)."""
    return gc.Backend("python-window-off-by-one",
                      attention=lambda q, k, v, spec: sdpa_attention(q, k, v, spec, window_shift=1))


def gelu_exact():
    """faulty below bf16/f16 resolution: the erf GELU instead of tanh (f32 must catch it)."""
    return gc.Backend("python-gelu-exact", geglu=lambda gate, up: F.gelu(gate) * up)


def raises():
    """An op that raises: every check that calls it must fail with the message, and nothing crash."""
    def broken(gate, up):
        raise ValueError("kernel exploded")
    return gc.Backend("python-raises", geglu=broken)


def wrong_return():
    return gc.Backend("python-wrong-return", geglu=lambda gate, up: (gate * up).tolist())


def factory_raises():
    raise RuntimeError("no GPU here")


def not_a_backend():
    return 42


def one_plus_w_norm():
    """faulty: Gemma 2/3's (1 + w) norm scale on Gemma-4 weights."""
    def norm(x, weight, eps):
        return rms_norm(x, None if weight is None else 1.0 + weight, eps)
    return gc.Backend("python-one-plus-w-norm", rms_norm=norm)


def interleaved_rope():
    """faulty: RoPE rotating adjacent pairs (GPT-J style) instead of halves."""
    def rope(x, table):
        cos, sin = table.cos.unsqueeze(-2), table.sin.unsqueeze(-2)
        even, odd = x[..., 0::2], x[..., 1::2]
        rotated = torch.stack((-odd, even), dim=-1).flatten(-2)
        return x * cos + rotated * sin

    def qk(q, k, v, q_norm, k_norm, table, eps):
        q_out = rope(rms_norm(q, q_norm, eps), table)
        if k is None:
            return q_out, None, None
        v_raw = k if v is None else v
        return (q_out, rope(rms_norm(k, k_norm, eps), table).transpose(1, 2),
                rms_norm(v_raw, None, eps).transpose(1, 2))
    return gc.Backend("python-interleaved-rope", qk_norm_rope=qk)


def moe_gate_up_swapped():
    """faulty: the experts' fused gate_up read with up first."""
    def experts(x, top_index, top_weights, gate_up_proj, down_proj):
        inter = down_proj.shape[2]
        swapped = torch.cat((gate_up_proj[:, inter:], gate_up_proj[:, :inter]), dim=1)
        return moe_experts(x, top_index, top_weights, swapped, down_proj)
    return gc.Backend("python-moe-gate-up-swapped", moe_experts=experts)
