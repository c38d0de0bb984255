"""The scoreboard's subjects: every Gemma-4 implementation we can judge, in one table.

A subject is run one of two ways, both the suite's own runners:
  - SubjectKind.BACKEND: an in-tree backend (C++ or Python ops under our decoder),
    `python -m gemma4_conform conform --backend NAME` (every category of the suite);
  - SubjectKind.MODEL: a whole model from a factory (impl/third_party/ adapters),
    `python -m gemma4_conform conform-model --factory MODULE:FACTORY`.
Each row names what it needs (`packages`, `device`); what this machine lacks makes the row "cannot run
here" with the reason, never a failure. Implementations that cannot be judged at all yet are in
`NOT_YET`, each with the reason, so the page says why they have no row.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass


class SubjectKind(enum.Enum):
    BACKEND = "backend"
    MODEL = "model"


@dataclass(frozen=True)
class Subject:
    implementation: str          # the project ("transformers", "gemma4-conformance")
    path: str                    # the attention path or variant within it ("eager", "sdpa", "reference")
    kind: SubjectKind
    spec: str                    # the backend's name, or the factory's MODULE:FACTORY
    version_of: str = ""         # the Python distribution whose version the row shows; "" = this project
    fixed_version: str = ""      # shown instead (a subject added on the command line: "-")
    packages: tuple[str, ...] = ()   # importable modules the subject needs
    devices: tuple[str, ...] = ("cpu", "cuda")
    needs_cuda_build: bool = False   # an in-tree backend compiled only with CUDA
    note: str = ""               # one line on the page (what the path is)

    @property
    def name(self) -> str:
        return f"{self.implementation} {self.path}"


def _ours(path: str, note: str, cuda: bool = False) -> Subject:
    devices = ("cuda",) if cuda else ("cpu", "cuda")
    return Subject("gemma4-conformance", path, SubjectKind.BACKEND, path, devices=devices, needs_cuda_build=cuda,
                   note=note)


def _transformers(path: str, factory: str, note: str, packages=("transformers",), devices=("cpu", "cuda"),
                  implementation: str = "transformers", version_of: str = "transformers") -> Subject:
    return Subject(implementation, path, SubjectKind.MODEL, f"transformers_models:{factory}", version_of=version_of,
                   packages=packages, devices=devices, note=note)


VARIANTS = ("sdpa", "fp32-attention", "online-softmax", "per-head-attention", "aten-rms-norm", "llama-norm-rounding",
            "fused-qk-norm-rope", "fused-geglu", "moe-fp32-accumulate", "paged-kv-cache")

SUBJECTS: tuple[Subject, ...] = (
    _transformers("eager", "eager", "Gemma4ForCausalLM, eager attention (the suite's source of truth)"),
    _transformers("sdpa", "sdpa", "Gemma4ForCausalLM, PyTorch SDPA attention"),
    _transformers("flex_attention", "flex_attention", "Gemma4ForCausalLM, FlexAttention"),
    _transformers("liger", "liger", "Liger-Kernel's apply_liger_kernel_to_gemma4_text (Triton)",
                  packages=("transformers", "liger_kernel"), devices=("cuda",), implementation="Liger-Kernel",
                  version_of="liger-kernel"),
    _transformers("fused_attn", "axolotl_fused_attn", "axolotl's patch_gemma4_fused_attn (Triton)",
                  packages=("transformers", "axolotl"), devices=("cuda",), implementation="axolotl",
                  version_of="axolotl"),
    _ours("reference", "our reference decoder (LibTorch, eager ops)"),
    _ours("cuda", "our fused Hopper kernels", cuda=True),
    _ours("cuda-deterministic", "our fused kernels, deterministic backward", cuda=True),
    *(_ours(f"variant-{v}", "a correct variant that rounds or dispatches differently") for v in VARIANTS),
)

# Implementations without a row yet, and why (each one line on the page).
NOT_YET: tuple[tuple[str, str], ...] = (
    ("llama.cpp (llama-cpp-python)", "not investigated yet: needs a GGUF written from a golden's checkpoint"),
    ("keras-hub", "not investigated yet"),
    ("ExecuTorch", "not investigated yet"),
    ("ONNX export (optimum + onnxruntime)", "not investigated yet"),
    ("JAX / Flax ports", "not investigated yet"),
)
