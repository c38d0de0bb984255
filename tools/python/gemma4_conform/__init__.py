"""gemma4_conform: the gemma4-conformance suite from Python.

Bindings on the C++ core, not a reimplementation: the tolerance policy, the suite, the reference
decoder and the CLI's commands are the C++ ones (the extension module ``gemma4_conform._core``).

    import gemma4_conform as gc
    gc.judge("golden/reference/model/e2b.bf16.h5", {"outputs/logits": logits, ...}).passed
    gc.conform(gc.Backend("mine", geglu=my_geglu), dtype="bf16")   # the whole suite, in this process

``python -m gemma4_conform conform --backend MODULE:FACTORY`` runs the suite on a backend that a
Python factory returns; every other command is the ``gemma4-conform`` CLI's. The pytest plugin
(``gemma4_conform.pytest_plugin``) runs it from a kernel library's own tests.
"""
from __future__ import annotations

import dataclasses
import json
import os
import tempfile
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

__all__ = ["Backend", "Capabilities", "AttentionSpec", "RopeTable", "CacheSpec", "DecodeAttentionSpec", "Golden", "Verdict", "ConformResult",
           "read_golden", "judge", "conform", "run_cli", "OPS", "NotSupported"]

AttentionSpec = _core.AttentionSpec  # what an attention op receives as `spec`
CacheSpec = _core.CacheSpec  # what cache_make receives
DecodeAttentionSpec = _core.DecodeAttentionSpec  # what cache_attention receives as `spec`
RopeTable = _core.RopeTable          # what qk_norm_rope receives as `rope` (.cos, .sin: [S, D], or [B, S, D] per row)
Golden = _core.Golden
Verdict = _core.CheckResult

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
        return _core.make_backend(self.name, self.description, ops, caps)


def read_golden(path: Union[str, os.PathLike]) -> Golden:
    """A golden file (golden/FORMAT.md): .inputs, .weights, .expected, .truth, .judged (dicts of tensors),
    .config, .dtype, .name. Read apart first, as every file from outside: a damaged file is refused."""
    return _core.read_golden(os.fspath(path))


def judge(golden: Union[str, os.PathLike, Golden], candidate: Union[str, os.PathLike, Mapping[str, torch.Tensor]],
          forward_only: bool = False) -> Verdict:
    """Judges outputs computed elsewhere against a golden, as `gemma4-conform golden check` does.

    `candidate`: an HDF5 candidate file, or a dict named as the golden's expected/ ("outputs/logits",
    "outputs/loss", "grads/<weight>"). Returns the verdict: .passed, .failures, .not_checked, .table(),
    .to_dict() (the report's JSON, conformance/report.h: one run, a row per dataset named by its test,
    with both errors and the bound), .write_json(path), .write_junit(path)."""
    golden_path = "<Golden>" if isinstance(golden, Golden) else os.fspath(golden)
    g = golden if isinstance(golden, Golden) else read_golden(golden_path)
    if isinstance(candidate, Mapping):
        candidate = dict(candidate)
    return _core.judge(g, golden_path, candidate, forward_only)


@dataclasses.dataclass
class ConformResult:
    """One run of the suite: the exit code (0 pass, 1 fail, 2 usage) and, when it ran, the JSON
    report (conformance/report.h: {"tool", "passed", "runs": [{"subject", ..., "results"}]})."""

    exit_code: int
    report: Optional[dict]

    @property
    def passed(self) -> bool:
        return self.exit_code == 0

    @property
    def results(self) -> list:
        """Every row of every run of the report."""
        return [r for run in (self.report or {}).get("runs", []) for r in run["results"]]

    @property
    def failures(self) -> list:
        return [r for r in self.results if r["status"] == "fail"]


def _conform_args(device, dtype, filter, steps, report, junit, verbose):
    args = ["--device", device, "--dtype", dtype, "--report", report]
    if filter:
        args += ["--filter", filter]
    if steps:
        args += ["--steps", str(steps)]
    if junit:
        args += ["--junit", os.fspath(junit)]
    if verbose:
        args.append("--verbose")
    return args


def conform(backend: Backend, device: str = "cpu", dtype: str = "f32", filter: Optional[str] = None,
            steps: Optional[int] = None, report: Optional[str] = None, junit: Optional[str] = None,
            verbose: bool = False) -> ConformResult:
    """Runs the whole conformance suite on `backend` in this process and prints the CLI's table and
    summary; it may be called any number of times in a process, for any backends. A kernel that
    crashes takes the process with it: the pytest plugin and ``python -m gemma4_conform conform
    --backend MODULE:FACTORY`` run each suite in a child process."""
    if not isinstance(backend, Backend):
        raise TypeError(f"conform() takes a gemma4_conform.Backend, got {type(backend).__name__}")
    # The JSON report is always written (a temporary one unless asked for, kept: the summary names it),
    # so the result carries every row.
    path = os.fspath(report) if report else os.path.join(tempfile.mkdtemp(prefix="gemma4-conform-"), "report.json")
    args = _conform_args(device, dtype, filter, steps, path, junit, verbose) + ["--backend", backend.name]
    code = _core.conform("python -m gemma4_conform", args, backend._cpp())
    return ConformResult(code, json.loads(Path(path).read_text()) if os.path.exists(path) else None)


def run_cli(args: Sequence[str], program: str = "python -m gemma4_conform") -> int:
    """Runs a gemma4-conform command (args[0] names it) in this process; returns its exit code."""
    return _core.run_command(program, [str(a) for a in args])
