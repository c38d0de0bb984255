"""gemma4_conform: the gemma4-conformance suite from Python.

Bindings on the C++ core, not a reimplementation: the tolerance policy, the suite, the reference
decoder and the CLI's commands are the C++ ones (the extension module ``gemma4_conform._core``).

    import gemma4_conform as gc
    gc.judge("golden/reference/model/e2b.bf16.h5", {"outputs/logits": logits, ...}).passed
    gc.conform(gc.Backend("mine", geglu=my_geglu), dtype="bf16")   # the whole suite, in this process
    gc.conform("mylib.gemma4:backend", isolate=True).passed         # in a child process, from its factory

``python -m gemma4_conform conform --backend MODULE:FACTORY`` runs the suite on a backend that a
Python factory returns; every other command is the ``gemma4-conform`` CLI's. The pytest plugin
(``gemma4_conform.pytest_plugin``) runs it from a kernel library's own tests.
"""
from __future__ import annotations

import dataclasses
import os
import sys
from pathlib import Path
from typing import Callable, Mapping, Optional, Sequence, Union

import torch  # loads LibTorch before the extension module that links it

from ._build import TORCH_VERSION as _BUILT_WITH

# LibTorch's C++ ABI holds only within one version, as for every torch extension: the module was
# built against the torch of the environment it was installed into (pyproject.toml's build backend).
if torch.__version__.split("+")[0] != _BUILT_WITH:
    raise ImportError(f"gemma4_conform was built against torch {_BUILT_WITH}, but torch {torch.__version__} is "
                      "installed: reinstall gemma4-conform with this torch in place (pip install --force-reinstall "
                      "--no-deps <its source>) so that it is built against it")

from . import _core  # noqa: E402
from .model_under_test import NotSupported  # noqa: E402  (raised by a conform-model factory)

__all__ = ["Backend", "Capabilities", "AttentionSpec", "RopeTable", "CacheSpec", "DecodeAttentionSpec", "Golden", "Verdict",
           "Report", "Run", "read_golden", "judge", "conform", "load_factory", "run_cli", "OPS", "NotSupported"]

AttentionSpec = _core.AttentionSpec  # what an attention op receives as `spec`
CacheSpec = _core.CacheSpec  # what cache_make receives
DecodeAttentionSpec = _core.DecodeAttentionSpec  # what cache_attention receives as `spec`
RopeTable = _core.RopeTable          # what qk_norm_rope receives as `rope` (.cos, .sin: [S, D], or [B, S, D] per row)
Golden = _core.Golden
Verdict = _core.CheckResult
Report = _core.Report  # what conform() returns: .passed, .exit_code, .runs, .results, .failures, .to_dict(), .write_json()
Run = _core.Run        # one backend on one device in one dtype: .label, .passed, .results, .error

# The ops a backend may replace, with the contracts of reference/layer_ops.h, then the KV cache ops
# of decoding (reference/kv_cache.h; all four or none, and cache_rollback with them or not at all).
OPS = ("rms_norm", "qk_norm_rope", "attention", "geglu", "moe_experts",
       "cache_make", "cache_update", "cache_attention", "cache_contents", "cache_rollback")
DTYPES = ("f32", "bf16", "f16")
DEVICES = ("cpu", "cuda")

# An installed package carries its data (goldens, released configs) under data/; a build tree's
# module reads its source tree.
_DATA = Path(__file__).resolve().parent / "data"
if (_DATA / "golden").is_dir():
    _core.set_data_dir(str(_DATA))


def _names(values, allowed, what):
    values = (values,) if isinstance(values, str) else tuple(values)
    for v in values:
        if v not in allowed:
            raise ValueError(f"Capabilities.{what}: {v!r} is not one of {', '.join(allowed)}")
    return values


@dataclasses.dataclass(frozen=True)
class Capabilities:
    """What a backend supports; the suite reports anything else as 'not supported', never failed."""

    devices: Sequence[str] = DEVICES
    dtypes: Sequence[str] = DTYPES
    head_dims: Sequence[int] = ()      # empty: any head dim
    max_sliding_window: int = 0        # 0: any window
    deterministic: bool = True         # the same inputs twice give bitwise-equal outputs

    def __post_init__(self):
        object.__setattr__(self, "devices", _names(self.devices, DEVICES, "devices"))
        object.__setattr__(self, "dtypes", _names(self.dtypes, DTYPES, "dtypes"))
        object.__setattr__(self, "head_dims", tuple(int(d) for d in self.head_dims))


@dataclasses.dataclass
class Backend:
    """A backend whose ops are Python callables; the ops left out keep the reference's.

    Contracts (reference/layer_ops.h; every op must be differentiable, the suite runs backward):
      rms_norm(x, weight, eps) -> x * rsqrt(mean(x^2) + eps) * weight in fp32, cast back; weight None: no scale
      qk_norm_rope(q, k, v, q_norm, k_norm, rope, eps) -> (q, k, v): q [B,S,Hq,D], k/v [B,S,Hkv,D] raw
          projections (k None on KV-shared layers, v None on K=V layers); returns q [B,S,Hq,D] and
          k, v [B,Hkv,S,D] (None, None on KV-shared layers); rope.cos/.sin [S, D], or [B, S, D] when
          each batch row has its own positions (decoding a padded batch): broadcast them over the heads
      attention(q, k, v, spec) -> [B, S, Hq*D]: softmax(q k^T) v with scale 1; q [B,S,Hq,D], k/v [B,Hkv,S,D];
          spec.layer_type, .sliding_window, .bidirectional, .padding (None or [B,S] int64, 1 = token)
      geglu(gate, up) -> gelu_tanh(gate) * up
      moe_experts(x, top_index, top_weights, gate_up_proj, down_proj) -> [T, H]
    Decoding with a KV cache (reference/kv_cache.h; all four, or none for the reference's cache):
      cache_make(spec) -> any object: one storing layer's cache; spec.layer, .layer_type, .batch, .kv_heads,
          .head_dim, .window (sliding: a query sees the last `window` indices; 0: all), .capacity,
          .max_rollback (keep that many entries more on sliding layers), .dtype, .device
      cache_update(cache, k, v, start): the step's k, v [B,Hkv,c,D] (after norm and RoPE) at indices start..
      cache_attention(q, cache, spec) -> [B, c, Hq*D]: the step's q [B,c,Hq,D] against the updated cache,
          scale 1, fp32 softmax; spec.layer_type, .sliding_window, .start, .padding ([B, start+c] int64,
          1 = token), .kv_shared (the cache is the source layer's, already updated this step)
      cache_contents(cache) -> (k, v, first): what it holds, [B,Hkv,T,D] oldest first, first = index of entry 0
      cache_rollback(cache, n), optional: forget the newest n entries (a rejected speculative draft,
          1 <= n <= spec.max_rollback); the next cache_update starts n indices earlier. Without it,
          speculative decoding is reported as not supported
      cache_quantization, optional: what the cache stores, "fp8-e4m3-per-tensor", "fp8-e4m3-per-head" or
          "fp8-e4m3-per-token" (e4m3 codes, scales = amax / 448 of the layer's first update, of each KV
          head's, or of each entry; reference/kv_cache.h): decoding is then judged against the reference
          decoding through a cache rounded the same way, and its envelope against the float model reported
    """

    name: str
    attention: Optional[Callable] = None
    qk_norm_rope: Optional[Callable] = None
    rms_norm: Optional[Callable] = None
    geglu: Optional[Callable] = None
    moe_experts: Optional[Callable] = None
    cache_make: Optional[Callable] = None
    cache_update: Optional[Callable] = None
    cache_attention: Optional[Callable] = None
    cache_contents: Optional[Callable] = None
    cache_rollback: Optional[Callable] = None
    cache_quantization: str = ""
    capabilities: Union[Capabilities, Mapping, None] = None
    description: str = ""

    def __post_init__(self):
        if not self.name or not isinstance(self.name, str):
            raise ValueError("Backend needs a name")
        if isinstance(self.capabilities, Mapping):
            self.capabilities = Capabilities(**self.capabilities)
        for op in OPS:
            fn = getattr(self, op)
            if fn is not None and not callable(fn):
                raise TypeError(f"Backend {self.name!r}: {op} must be callable, got {type(fn).__name__}")

    def _cpp(self):
        """The backend as the C++ suite holds it."""
        caps = dataclasses.asdict(self.capabilities or Capabilities())
        caps = {k: list(v) if isinstance(v, tuple) else v for k, v in caps.items()}
        ops = {op: getattr(self, op) for op in OPS if getattr(self, op) is not None}
        if self.cache_quantization:
            ops["cache_quantization"] = self.cache_quantization
        return _core.make_backend(self.name, self.description, ops, caps)


def read_golden(path: Union[str, os.PathLike]) -> Golden:
    """A golden file (golden/FORMAT.md): .inputs, .weights, .expected, .truth, .judged (dicts of tensors),
    .config, .dtype, .name. Read apart first, as every file from outside: a damaged file is refused."""
    return _core.read_golden(os.fspath(path))


def judge(golden: Union[str, os.PathLike, Golden], candidate: Union[str, os.PathLike, Mapping[str, torch.Tensor]],
          forward_only: bool = False, envelope: Union[str, os.PathLike, None] = None) -> Verdict:
    """Judges outputs computed elsewhere against a golden, as `gemma4-conform golden check` does.

    `candidate`: an HDF5 candidate file, or a dict named as the golden's expected/ ("outputs/logits",
    "outputs/loss", "grads/<weight>"). Returns the verdict: .passed, .failures, .not_checked, .table(),
    .to_dict() (the report's JSON, conformance/report.h: one run, a row per dataset named by its test,
    with both errors and the bound), .write_json(path), .write_junit(path). A golden made on a
    dequantized checkpoint adds a row per tensor of the quantized file; `envelope` (the float model's
    golden) adds the quantization envelope's figures to the run's "measurements" (golden/FORMAT.md,
    "Quantized subjects")."""
    golden_path = "<Golden>" if isinstance(golden, Golden) else os.fspath(golden)
    g = golden if isinstance(golden, Golden) else read_golden(golden_path)
    if isinstance(candidate, Mapping):
        candidate = dict(candidate)
    return _core.judge(g, golden_path, candidate, forward_only, os.fspath(envelope) if envelope else "")


class FactoryError(Exception):
    """A MODULE:FACTORY that cannot give a Backend (the message is one line)."""


def load_factory(spec: str) -> Backend:
    """MODULE:FACTORY -> the Backend FACTORY() returns; every way this can go wrong is one line."""
    from .model_under_test import resolve

    try:
        factory = resolve(spec, "--backend")
    except ValueError as e:
        raise FactoryError(str(e)) from e
    attr = spec.partition(":")[2]
    try:
        backend = factory()
    except Exception as e:
        raise FactoryError(f"--backend {spec}: {attr}() raised {type(e).__name__}: {e}") from e
    if not isinstance(backend, Backend):
        raise FactoryError(f"--backend {spec}: {attr}() returned {type(backend).__name__}, not gemma4_conform.Backend")
    return backend


def _subjects(backend) -> list:
    """The engine's subjects: a Backend (this process only), "MODULE:FACTORY" (a child process can load
    it too), an in-tree name, regex or "all", a plugin path (.so), or a list of these."""
    if isinstance(backend, (list, tuple)):
        return [s for b in backend for s in _subjects(b)]
    if isinstance(backend, Backend):
        return [_core.Subject(backend._cpp(), [])]
    if not isinstance(backend, str):
        raise TypeError(f"conform() takes a gemma4_conform.Backend, a MODULE:FACTORY, an in-tree backend's name or a "
                        f"plugin path, got {type(backend).__name__}")
    if backend.endswith(".so"):
        return [_core.plugin_subject(backend)]
    if ":" in backend:
        return [_core.Subject(load_factory(backend)._cpp(), ["--backend", backend])]
    return _core.in_tree_subjects(backend)


def _listed(value, what: str) -> list:
    values = value.split(",") if isinstance(value, str) else list(value)
    if not values:
        raise ValueError(f"conform(): {what} needs at least one value")
    return values


def conform(backend, device="cpu", dtype="f32", filter: Optional[str] = None, steps: Optional[int] = None,
            isolate: bool = False, isa: str = "native", jobs: int = 1, timeout: float = 1800,
            expect_declared: bool = False, report: Optional[str] = None, junit: Optional[str] = None,
            verbose: bool = False, quiet: bool = False, child_env: Optional[Mapping[str, str]] = None) -> Report:
    """Runs the conformance suite through the engine (conformance/engine.h), as `gemma4-conform conform`
    does, and returns its Report; prints the failing rows and the summary unless `quiet`.

    `backend`: a Backend (runs in this process), "MODULE:FACTORY", an in-tree backend's name, a regex or
    "all", a plugin path, or a list of these. `device`, `dtype`: one or a list ("f32,bf16" too).
    `isolate`: each run in a child process (a crash or a hang becomes a failing run); the child sees this
    process's sys.path. `isa`: CPU ISA levels ("native", "auto", "AVX2,..."), each but native in a child.
    `expect_declared`: judge each run against its backend's declared kind (Report.exit_code follows).
    `child_env`: more environment for the child processes (OMP_NUM_THREADS, ...).
    It may be called any number of times in a process, for any backends."""
    env = {"PYTHONPATH": os.pathsep.join(p for p in sys.path if p), **(child_env or {})}
    result = _core.run_engine(_subjects(backend), devices=_listed(device, "device"), dtypes=_listed(dtype, "dtype"),
                              isa=isa, filter=filter or "", steps=steps or 0, isolate=isolate, jobs=jobs,
                              timeout=timeout, child_env=env, expect_declared=expect_declared, verbose=verbose,
                              quiet=quiet)
    if report:
        result.write_json(os.fspath(report))
    if junit:
        result.write_junit(os.fspath(junit))
    return result


def run_cli(args: Sequence[str], program: str = "python -m gemma4_conform") -> int:
    """Runs a gemma4-conform command (args[0] names it) in this process; returns its exit code."""
    return _core.run_command(program, [str(a) for a in args])
