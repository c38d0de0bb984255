"""The scoreboard's subjects: every Gemma-4 implementation we can judge, in one table.

A subject is run one of three ways, all the suite's own runners:
  - SubjectKind.BACKEND: an in-tree backend (C++ or Python ops under our decoder), through the engine
    (gemma4_conform.conform, each run in a child process; every category of the suite);
  - SubjectKind.MODEL: a whole PyTorch model from a factory (impl/third_party/ adapters),
    `python -m gemma4_conform conform-model --factory MODULE:FACTORY`;
  - SubjectKind.CANDIDATE: another framework (MLX, Keras, llama.cpp) through `golden check`: its adapter
    script (impl/third_party/<name>_candidate.py) writes a candidate file per golden/transformers case
    (gemma4_conform/scoreboard/candidates.py);
  - SubjectKind.QUANTIZED: a framework running a quantized model, through `golden check` on the goldens
    of that model's dequantized weights, made on the spot by golden/generators/quantized_cases.py
    (golden/FORMAT.md, "Quantized subjects"); the row's dtype is the quantization, and the row also
    carries the envelope against the float model.
Each row names what it needs (`packages`, `device`); what this machine lacks makes the row "cannot run
here" with the reason, never a failure. Implementations that cannot be judged at all yet are in
`NOT_YET`, each with the reason, so the page says why they have no row.
"""
from __future__ import annotations

import enum
import sys
from dataclasses import dataclass
from pathlib import Path

from .. import _core

# The data directory: the source tree for a build tree's package, the installed package's data/
# otherwise. Subjects name their adapters and pinned environments relative to it.
DATA = Path(_core.data_dir())


class SubjectKind(enum.Enum):
    BACKEND = "backend"
    MODEL = "model"
    CANDIDATE = "candidate"
    QUANTIZED = "quantized"


@dataclass(frozen=True)
class Subject:
    implementation: str          # the project ("transformers", "gemma4-conformance")
    path: str                    # the attention path or variant within it ("eager", "sdpa", "reference")
    kind: SubjectKind
    spec: str                    # the backend's name, the factory's MODULE:FACTORY, or the adapter script
    version_of: str = ""         # the Python distribution whose version the row shows; "" = this project
    fixed_version: str = ""      # shown instead (a subject added on the command line: "-")
    filter: str = ""             # only these checks (the runner's --filter), when the rest cannot apply
    site: str = ""               # a pinned environment (pip --target directory, relative to the data
                                 # directory) put first on the run's PYTHONPATH: the historic releases
    overlay: str = ""            # a second pinned environment put before `site`: a release of a package the
                                 # subject needs older than this environment's (vLLM 0.25: transformers 5.13.1)
    venv: str = ""               # CANDIDATE: a pinned virtual environment (relative to the data directory)
                                 # whose own Python runs the adapter: an implementation needing another
                                 # Python than this one (google-deepmind's gemma: >= 3.12)
    packages: tuple[str, ...] = ()   # importable modules the subject needs
    devices: tuple[str, ...] = ("cpu", "cuda")
    needs_cuda_build: bool = False   # an in-tree backend compiled only with CUDA
    note: str = ""               # one line on the page (what the path is)
    adapter_args: tuple[str, ...] = ()   # CANDIDATE: more arguments for the adapter
    forward_only: bool = False   # CANDIDATE: judged on logits (and loss) only: it has no backward
    quantization: str = ""       # QUANTIZED: the type (llama.cpp's Q8_0, Q4_0, Q4_K_M), the row's dtype;
                                 # BACKEND: what its KV cache stores, shown after the row's dtype
    decode_from_window_edge: bool = False  # QUANTIZED: its adapter also decodes (--decode-from), judged too

    @property
    def name(self) -> str:
        return f"{self.implementation} {self.path}"

    @property
    def sites(self) -> tuple[str, ...]:
        """The pinned --target directories on the run's PYTHONPATH, first first."""
        return tuple(d for d in (self.overlay, self.site) if d)

    def adapter_python(self) -> str:
        """The Python that runs the subject's adapter: its venv's (the link itself: resolved, it is the
        base interpreter, without the venv's packages), else this one."""
        return str((DATA / self.venv / "bin" / "python").absolute()) if self.venv else sys.executable


def _ours(path: str, note: str, cuda: bool = False, quantization: str = "") -> Subject:
    devices = ("cuda",) if cuda else ("cpu", "cuda")
    return Subject("gemma4-conformance", path, SubjectKind.BACKEND, path, devices=devices, needs_cuda_build=cuda,
                   note=note, quantization=quantization)


def _transformers(path: str, factory: str, note: str, packages=("transformers",), devices=("cpu", "cuda"),
                  implementation: str = "transformers", version_of: str = "transformers") -> Subject:
    return Subject(implementation, path, SubjectKind.MODEL, f"transformers_models:{factory}", version_of=version_of,
                   packages=packages, devices=devices, note=note)


def _candidate(implementation: str, adapter: str, env: str, distribution: str, packages: tuple[str, ...], note: str,
               forward_only: bool = False, devices: tuple[str, ...] = ("cpu",)) -> tuple[Subject, ...]:
    """Two rows of one framework: the checkpoint's config.json as transformers 5.17 saves it, and in the
    released checkpoints' convention (candidate_io.ConfigStyle says why both)."""
    return tuple(Subject(implementation, f"config {style}", SubjectKind.CANDIDATE,
                         f"impl/third_party/{adapter}_candidate.py", version_of=distribution, site=f".cache/pinned/{env}",
                         packages=packages, devices=devices, note=note, adapter_args=("--config", style),
                         forward_only=forward_only)
                 for style in ("as-saved", "as-released"))


VARIANTS = ("sdpa", "fp32-attention", "online-softmax", "per-head-attention", "aten-rms-norm", "llama-norm-rounding",
            "fused-qk-norm-rope", "fused-geglu", "moe-fp32-accumulate", "paged-kv-cache")

# Our fp8 KV caches (impl/variants/fp8_kv_cache.cpp): their scales, and what that means.
FP8_KV_CACHES = (("per-tensor", "static scales per layer"), ("per-head", "static scales per layer and KV head"),
                 ("per-token", "a scale per entry and KV head"))

# llama.cpp's quantization types on the board (golden/generators/quantized_cases.py makes their models;
# mlx-lm's 4-bit is its own row).
QUANTIZATIONS = ("Q8_0", "Q4_0", "Q4_K_M")

# The historic rows' checks: the KV-shared goldens, where 5.5.1's use_cache=False bug lives.
HISTORIC_CHECKS = r"(model/e2b|model/e4b|transformers/e2b_like)$"

SUBJECTS: tuple[Subject, ...] = (
    _transformers("eager", "eager", "Gemma4ForCausalLM, eager attention (the suite's source of truth)"),
    _transformers("sdpa", "sdpa", "Gemma4ForCausalLM, PyTorch SDPA attention"),
    _transformers("flex_attention", "flex_attention", "Gemma4ForCausalLM, FlexAttention"),
    # transformers as any other framework is judged: its outputs written to a candidate file by
    # golden/generators/transformers_candidate.py (the adapters' command line), then `golden check`.
    *(Subject("transformers", f"{attn} (golden check)", SubjectKind.CANDIDATE, "golden/generators/transformers_candidate.py",
              version_of="transformers", packages=("transformers",), adapter_args=("--attn", attn),
              note=f"transformers' own {attn} outputs through golden check (the candidate-file route)")
      for attn in ("eager", "sdpa")),
    _transformers("liger", "liger", "Liger-Kernel's apply_liger_kernel_to_gemma4_text (Triton)",
                  packages=("transformers", "liger_kernel"), devices=("cuda",), implementation="Liger-Kernel",
                  version_of="liger-kernel"),
    _transformers("fused_attn", "axolotl_fused_attn", "axolotl's patch_gemma4_fused_attn (Triton)",
                  packages=("transformers", "axolotl"), devices=("cuda",), implementation="axolotl",
                  version_of="axolotl"),
    *(Subject("transformers", f"{path} ({release}, historic)", SubjectKind.MODEL, f"transformers_models:{path}",
              version_of="transformers", packages=("transformers",), site=f".cache/pinned/transformers-{release}",
              filter=HISTORIC_CHECKS,
              note=f"the release {release} in its pinned environment (impl/third_party/pinned_envs.sh), on the "
                   "KV-shared goldens: 5.5 cannot read the configs of the others (written by 5.17)")
      for release in ("5.5.1", "5.5.2") for path in ("sdpa",)),
    *_candidate("mlx-lm", "mlx_lm", "mlx-lm", "mlx-lm", ("mlx", "mlx_lm"),
                "mlx_lm.models.gemma4 on MLX's CPU backend, loaded by mlx_lm.utils.load_model; value_and_grad"),
    *_candidate("keras-hub", "keras_hub", "keras-hub", "keras-hub", ("keras", "keras_hub"),
                "Gemma4Backbone.from_preset (keras-hub's Hugging Face converter), Keras 3 on the PyTorch backend",
                devices=("cpu", "cuda")),
    Subject("google-deepmind gemma (JAX)", "gemma.gm.nn.gemma4", SubjectKind.CANDIDATE,
            "impl/third_party/jax_gemma_candidate.py", version_of="gemma", venv=".cache/pinned/jax-gemma",
            packages=("gemma", "jax", "flax"),
            note="Google DeepMind's own JAX Gemma-4 (flax linen; the Transformer behind gm.nn.Gemma4_*), its config "
                 "and parameters ported from the checkpoint by the adapter (the package has no Hugging Face loader); "
                 "jax.grad for the gradients"),
    Subject("ONNX Runtime", "torch.onnx export of transformers", SubjectKind.CANDIDATE,
            "impl/third_party/onnxruntime_candidate.py", version_of="onnxruntime", site=".cache/pinned/onnxruntime",
            packages=("onnxruntime", "onnxscript"), devices=("cpu",), forward_only=True,
            note="transformers 5.17's model exported by torch.onnx.export(dynamo=True) at the case's shape, run by "
                 "ONNX Runtime's CPU execution provider; forward logits and hidden states"),
    # vLLM 0.25.0 (the newest release for the GPU host's torch 2.11): with the transformers it can read
    # Gemma-4 configs with, in the released checkpoints' convention (5.13.1 ignores per_layer_config); and
    # with this environment's transformers, as `pip install vllm==0.25.0` gives it today.
    *(Subject("vLLM", f"{mode} (FlashAttention 3, transformers {release})", SubjectKind.CANDIDATE,
              "impl/third_party/vllm_candidate.py", version_of="vllm", site=".cache/pinned/vllm",
              overlay=".cache/pinned/vllm-transformers-5.13.1" if release == "5.13.1" else "", packages=("vllm",),
              devices=("cuda",), forward_only=True, adapter_args=("--config", "as-released", *args),
              note=f"vllm.LLM on the case's checkpoint (config as released), eager, FLASH_ATTN with FlashAttention 3 "
                   f"(TRITON_ATTN, vLLM 0.25's Gemma-4 choice without FA4, needs head dim >= 32), transformers {release}; "
                   f"the model's logits from its sampler (logprobs_mode=raw_logits), {how}")
      for release, mode, args, how in (
          ("5.13.1", "prefill", (), "each position the last of a prompt"),
          ("5.13.1", "decode", ("--decode-from", "4"), "positions from 4 on one token a step through the paged KV "
                                                       "cache, teacher-forced by a logits processor"),
          ("5.17.0", "prefill", (), "each position the last of a prompt"))),
    *_candidate("llama.cpp", "llama_cpp", "llama-cpp", "llama_cpp_python", ("llama_cpp",),
                "llama-cpp-python (llama.cpp built from its sdist): convert_hf_to_gguf.py, then the CPU backend; "
                "forward logits only", forward_only=True),
    *(Subject("llama.cpp", f"{quant} (GGUF)", SubjectKind.QUANTIZED, "impl/third_party/llama_cpp_candidate.py",
              version_of="llama_cpp_python", site=".cache/pinned/llama-cpp", packages=("llama_cpp",), devices=("cpu",),
              forward_only=True, quantization=quant, decode_from_window_edge=True,
              note=f"llama-cpp-python's CPU backend on a {quant} GGUF made by llama.cpp's converter and quantizer "
                   "(f16 KV cache), judged against the reference on that file's dequantized weights, in one batch "
                   "and decoding one token a step from 40 tokens before the window edge")
      for quant in QUANTIZATIONS),
    Subject("transformers", "GGUF loader, Q8_0 (gguf_file=)", SubjectKind.QUANTIZED,
            "impl/third_party/transformers_gguf_candidate.py", version_of="transformers", site=".cache/pinned/llama-cpp",
            packages=("llama_cpp",), devices=("cpu",), forward_only=True, quantization="Q8_0",
            note="transformers' from_pretrained(dir, gguf_file=...) on the Q8_0 GGUF llama.cpp makes (its metadata for "
                 "the config, gguf-py dequantizing), in bf16; llama.cpp's pinned environment makes the file"),
    Subject("mlx-lm", "4-bit (MLX affine, group 64)", SubjectKind.QUANTIZED, "impl/third_party/mlx_lm_candidate.py",
            version_of="mlx-lm", site=".cache/pinned/mlx-lm", packages=("mlx", "mlx_lm"), devices=("cpu",),
            forward_only=True, quantization="mlx-4bit",
            note="mlx-lm on MLX's CPU build, the model mlx_lm.utils.quantize_model makes in bf16 (as mlx_lm.convert -q), "
                 "loaded by mlx_lm.utils.load_model, judged against the reference on its dequantized weights"),
    Subject("transformers + torchao", "int4 weight-only (group 32)", SubjectKind.QUANTIZED,
            "impl/third_party/torchao_candidate.py", version_of="torchao", site=".cache/pinned/torchao",
            packages=("torchao",), devices=("cpu",), forward_only=True, quantization="torchao-int4",
            note="transformers 5.17 with TorchAoConfig(IntxWeightOnlyConfig(int4, PerGroup(32))), saved by "
                 "save_pretrained and loaded by from_pretrained in bf16, judged against the reference on its "
                 "dequantized weights"),
    _ours("reference", "our reference decoder (LibTorch, eager ops)"),
    _ours("cuda", "our fused Hopper kernels", cuda=True),
    _ours("cuda-deterministic", "our fused kernels, deterministic backward", cuda=True),
    *(_ours(f"variant-{v}", "a correct variant that rounds or dispatches differently") for v in VARIANTS),
    *(_ours(f"variant-fp8-e4m3-{scales}-kv-cache",
            f"our fp8 KV cache (e4m3 codes, {what}, every layer in a ring), judged against the reference decoding "
            "through a cache rounded the same way", quantization=f"fp8-e4m3 KV, {scales}")
      for scales, what in FP8_KV_CACHES),
)

# Implementations without a row on the board yet, and why (each one line on the page; investigated from
# their released files and PyPI metadata, 2026-11-26 to 2026-11-30).
NOT_YET: tuple[tuple[str, str], ...] = (
    ("EasyDeL 0.3.0 (Flax NNX)", "no adapter yet. Tried by hand on the CPU in an environment of its pins (jax 0.9.2, "
     "flax 0.12.3, eformer 0.0.99.12, ejkernel 0.0.78, transformers 5.5.4), AutoEasyDeLModelForCausalLM"
     ".from_pretrained(from_torch=True) in float32 on dense_keqv's released-convention config: the weights arrive "
     "rounded to float16 (easydel/infra/mixins/bridge.py:2252 loads the torch model with torch_dtype=float16 unless "
     "told otherwise, whatever param_dtype says), so the embedding output is 6.0e-3 off; with torch_dtype=float32 it "
     "is exact, but layer 0's output still differs by 5.3e-3 at position 0 and the logits by 0.135 (transformers "
     "5.5.4 on the same files: 9.5e-7), cause not found; e2b_like (Gemma4ForConditionalGeneration) does not load "
     "('model type gemma4 is not defined')"),
    ("ExecuTorch 1.5.1", "partial: two example models (E-series without MoE and K=V, 31B without PLE and MoE), the "
     "E-series one reading flat RoPE keys instead of rope_parameters"),
    ("optimum-onnx 0.1.0", "cannot: gemma4 is not an export type and it pins transformers < 4.58 (the ONNX Runtime row "
     "exports with torch.onnx instead; onnxruntime-genai 0.18 and optimum-intel 2.2.0 are inference-only candidates)"),
    ("MaxText", "not tried: it needs Python >= 3.12 and its own checkpoint conversion, like google-deepmind's gemma "
     "(which has a row)"),
    ("vLLM 0.25.0", "rows defined (impl/third_party/vllm_candidate.py, on the H200 only), not on the board yet "
     "(its environments reach the offline GPU host in six parts: ci/gpu/carry_vllm.sh). Run there by hand in bf16: dense_keqv (prefill) and "
     "moe (decode from 4) pass; e2b_like does not load (k_norm of its KV-shared layers, vllm-project/vllm #44788); "
     "with transformers 5.17 no case loads (tools/scoreboard/repro/vllm_head_dim_per_layer_config.py); f32 is not "
     "supported by FlashAttention"),
    ("SGLang 0.5.23", "not run: it pins torch 2.14.1, transformers 5.19.0 and flashinfer 0.7.2 (the host: torch "
     "2.11.0, transformers 5.17.0), a second PyTorch stack to carry to the offline host"),
    ("unsloth", "GPU only ('cannot find any torch accelerator' on a CPU); not yet run on the H200"),
    ("torchtune 0.6.1, litgpt 0.5.13, torchtitan 0.3.0, candle", "cannot: no Gemma-4 in their releases"),
)
