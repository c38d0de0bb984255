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
    workers: int = 1             # MODEL: conform-model's --workers (a model that compiles at every load)

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
               forward_only: bool = False, devices: tuple[str, ...] = ("cpu",),
               historic: tuple[str, ...] = ()) -> tuple[Subject, ...]:
    """Two rows of one framework: the checkpoint's config.json as transformers 5.17 saves it, and in the
    released checkpoints' convention (candidate_io.ConfigStyle says why both). Then a row per historic
    release (`historic`), in its pinned environment <env>-<release>, on the CPU (keras-hub's before 0.32 hold
    TensorFlow, 1.3 GB, more than travels to the GPU host), its path suffixed
    " (<release>, historic)" for summary.history: as-released only, since its as-saved row could fail only
    again for what the current release's as-saved row shows (transformers 5.17's per_layer_config, which no
    release of mlx-lm or keras-hub reads, and a config without layer_types), hiding the rest."""
    rows = [(f"config {style}", style, env, devices, note) for style in ("as-saved", "as-released")]
    rows += [(f"config as-released ({release}, historic)", "as-released", f"{env}-{release}", ("cpu",),
              f"{note}; the release {release} in its pinned environment (impl/third_party/pinned_envs.sh)")
             for release in historic]
    return tuple(Subject(implementation, path, SubjectKind.CANDIDATE, f"impl/third_party/{adapter}_candidate.py",
                         version_of=distribution, site=f".cache/pinned/{site}", packages=packages, devices=on,
                         note=about, adapter_args=("--config", style), forward_only=forward_only)
                 for path, style, site, on, about in rows)


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
    Subject("unsloth", "FastModel full finetuning", SubjectKind.MODEL, "unsloth_models:full_finetuning",
            version_of="unsloth", site=".cache/pinned/unsloth", packages=("unsloth", "unsloth_zoo", "bitsandbytes"),
            devices=("cuda",), filter=r"transformers/", workers=5,
            note="unsloth's FastModel.from_pretrained(checkpoint, load_in_4bit=False, full_finetuning=True) on the "
                 "golden's config saved as a checkpoint: its regenerated modeling_gemma4 (torch.compile'd RMSNorm, "
                 "RoPE, attention), unsloth_zoo's decoder, MLP and MoE forwards, its fused linear cross-entropy and "
                 "its offloading gradient checkpointing; norms kept in float32 in bf16; the transformers/* goldens (every "
                 "load compiles each decoder block, about a minute on the H200: the model/* goldens, at the released "
                 "layer counts, were left out)"),
    *(Subject("transformers", f"{path} ({release}, historic)", SubjectKind.MODEL, f"transformers_models:{path}",
              version_of="transformers", packages=("transformers",), site=f".cache/pinned/transformers-{release}",
              filter=HISTORIC_CHECKS,
              note=f"the release {release} in its pinned environment (impl/third_party/pinned_envs.sh), on the "
                   "KV-shared goldens: 5.5 cannot read the configs of the others (written by 5.17)")
      for release in ("5.5.1", "5.5.2") for path in ("sdpa",)),
    *_candidate("mlx-lm", "mlx_lm", "mlx-lm", "mlx-lm", ("mlx", "mlx_lm"),
                "mlx_lm.models.gemma4 on MLX's CPU backend, loaded by mlx_lm.utils.load_model; value_and_grad",
                historic=("0.31.2", "0.31.3")),  # the first with Gemma-4; the last before 0.32.0's MoE-gradient fix
    *_candidate("keras-hub", "keras_hub", "keras-hub", "keras-hub", ("keras", "keras_hub"),
                "Gemma4Backbone.from_preset (keras-hub's Hugging Face converter), Keras 3 on the PyTorch backend",
                devices=("cpu", "cuda"), historic=("0.28.0",)),  # the first the adapter feeds as its users do
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
    # EasyDeL 0.3.0 on the CPU, in two rows: attention as from_pretrained(dtype=...) leaves it (attn_dtype's
    # default, bfloat16, whatever the model's dtype) and in the run's dtype. The moe case is left out: its
    # forward did not finish in 400 s on the 2-core development machine (cause not found).
    *(Subject("EasyDeL", f"Flax NNX, attn_dtype {label}", SubjectKind.CANDIDATE,
              "impl/third_party/easydel_candidate.py", version_of="easydel", site=".cache/pinned/easydel",
              packages=("easydel", "jax", "flax"), devices=("cpu",),
              filter=r"transformers/(dense_keqv|padded_batch|bidirectional|e2b_like)$",
              adapter_args=("--config", "as-released", "--attn-dtype", attn),
              note="EasyDeL's Gemma4ForCausalLM / Gemma4ForConditionalGeneration from AutoEasyDeLModel*.from_pretrained"
                   "(from_torch=True, torch_dtype=float32: EasyDeL's loader would round the checkpoint to float16 "
                   f"first), jax.grad for the gradients; {about}; moe left out (its forward did not finish in 400 s "
                   "on 2 cores)")
      for attn, label, about in (("default", "default", "attention in EasyDeL's default attn_dtype, bfloat16"),
                                 ("match", "= dtype", "attn_dtype set to the run's dtype"))),
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
    ("ExecuTorch 1.5.1", "partial: two example models (E-series without MoE and K=V, 31B without PLE and MoE), the "
     "E-series one reading flat RoPE keys instead of rope_parameters"),
    ("optimum-onnx 0.1.0", "cannot: gemma4 is not an export type and it pins transformers < 4.58 (the ONNX Runtime row "
     "exports with torch.onnx instead; onnxruntime-genai 0.18 and optimum-intel 2.2.0 are inference-only candidates)"),
    ("MaxText", "not tried: it needs Python >= 3.12 and its own checkpoint conversion, like google-deepmind's gemma "
     "(which has a row)"),
    ("SGLang", "not run: the GPU host is offline with torch 2.11.0, and of the releases read, 0.5.17 is the newest pinning that "
     "torch (0.5.18, 0.5.19 and 0.5.21 pin 2.13.0; 0.5.23 pins 2.14.1 and transformers 5.19.0). 0.5.17 pins transformers "
     "5.12.1 and declares 73 requirements, among them sglang-kernel 0.4.5 (a 383 MB wheel), tilelang 0.1.11 (50 MB), "
     "xgrammar 0.2.1 (45 MB) and flashinfer-python 0.6.15.post1 (15 MB): these four alone are 19 carries of 26 MiB, "
     "one call each, before the other 69 and a run, within a session's 30 minutes of device time"),
    ("torchtune 0.6.1, litgpt 0.5.13, torchtitan 0.3.0, candle", "cannot: no Gemma-4 in their releases"),
)
