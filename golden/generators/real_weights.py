"""Where a real-size golden's weights come from (golden/FORMAT.md, root attribute `weights`):
constructed (the trained-like construction, the committed files), generated (plain counter-generator
values: the files before it) or a Hugging Face checkpoint on this machine (checkpoint_goldens.py:
a user's own released weights, never committed). Each gives float32 values by the text model's
weight names ("embed_tokens.weight", "layers.3.self_attn.q_proj.weight", "lm_head.weight")."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from constructed_weights import CONSTRUCTION, constructed_weight
from golden_h5py_check import generated_weight

MODES = ("constructed", "generated")  # the seeded ones; "checkpoint" takes a directory
# How a checkpoint names the text model's root: Gemma4ForCausalLM, Gemma4ForConditionalGeneration.
PREFIXES = ("model.language_model.", "model.")


def text_config(checkpoint: Path) -> dict[str, Any]:
    """The text config of a checkpoint's config.json (nested text_config unwrapped)."""
    config = json.loads((checkpoint / "config.json").read_text())
    return dict(config.get("text_config", config))


def checkpoint_tensors(checkpoint: Path) -> dict[str, torch.Tensor]:
    """Every text-model tensor of a safetensors checkpoint (one file or an indexed shard set), by
    the text model's names; other modalities' tensors are left out."""
    from safetensors.torch import load_file

    index = checkpoint / "model.safetensors.index.json"
    files = sorted(set(json.loads(index.read_text())["weight_map"].values())) if index.exists() else ["model.safetensors"]
    out = {}
    for name in files:
        for key, tensor in load_file(str(checkpoint / name)).items():
            prefix = next((p for p in PREFIXES if key.startswith(p)), None)
            if key == "lm_head.weight":
                out[key] = tensor
            elif prefix:
                out[key[len(prefix):]] = tensor
    return out


@dataclass
class Weights:
    mode: str                          # constructed, generated or checkpoint
    checkpoint: Path | None = None
    _tensors: dict = field(default_factory=dict, repr=False)

    def value(self, config: dict[str, Any], seed: int, name: str, shape: tuple[int, ...]) -> torch.Tensor:
        if self.mode == "constructed":
            return torch.from_numpy(constructed_weight(config, seed, name, shape))
        if self.mode == "generated":
            return torch.from_numpy(generated_weight(seed, name, shape))
        if not self._tensors:
            self._tensors.update(checkpoint_tensors(self.checkpoint))
        if name not in self._tensors:
            raise SystemExit(f"{self.checkpoint}: no tensor {name!r} for the text model (is it a Gemma-4 checkpoint?)")
        tensor = self._tensors[name]
        if tuple(tensor.shape) != tuple(shape):
            raise SystemExit(f"{self.checkpoint}: {name} has shape {tuple(tensor.shape)}, the model {tuple(shape)}")
        return tensor.float()

    def attrs(self) -> dict[str, Any]:
        """The root attributes that say where the weights are (FORMAT.md)."""
        out: dict[str, Any] = {"weights": self.mode}
        if self.mode == "constructed":
            out["construction"] = np.int64(CONSTRUCTION)
        if self.mode == "checkpoint":
            out["checkpoint"] = str(self.checkpoint.resolve())
        return out
