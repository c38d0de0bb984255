"""What every candidate adapter shares: read a golden/transformers/ case, write a candidate file.

A candidate adapter runs someone else's Gemma-4 (mlx-lm, keras-hub, llama.cpp, ...) on a case the
way its users would: from the Hugging Face checkpoint beside the golden (config.json,
model*.safetensors) and the case's inputs.safetensors, in the golden's dtype. It writes the results
under the golden's names (golden/FORMAT.md, "Candidate files") and `golden check` judges them. The
scoreboard runs each adapter as

    python impl/third_party/<name>_candidate.py CASE_DIR --dtype f32|bf16|f16 --out FILE.h5 [--forward-only]
        [--device cpu|cuda] [--config as-saved|as-released]

and reads its exit status: 0 wrote the file, NOT_SUPPORTED (3) the implementation cannot run this
case or dtype (the last stderr line says why; the cell reads "not supported", never "fail"), anything
else a failure of the implementation. Only numpy, h5py and safetensors here: an adapter's own
environment adds the implementation, never a second copy of this.
"""
from __future__ import annotations

import argparse
import atexit
import enum
import json
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

NOT_SUPPORTED = 3
DTYPE_NAMES = ("f32", "bf16", "f16")
IGNORE_INDEX = -100  # labels at this value carry no loss (transformers' convention, the goldens')

# Where the decoder's names (the golden's: layers.N..., embed_tokens.weight, norm.weight) sit in the
# two checkpoint layouts (reference/GEMMA4.md, "Conventions that changed").
CHECKPOINT_PREFIXES = ("model.language_model.", "model.")


class ConfigStyle(enum.Enum):
    """How the case's config.json reaches the implementation's loader.

    AS_SAVED: the case's own file, as transformers 5.17 save_pretrained wrote it (global layers'
    geometry in per_layer_config; some cases in the pre-5.8 top-level fields or without layer_types,
    on purpose: reference/GEMMA4.md, "Conventions that changed"). This is the verdict that says
    whether a checkpoint saved today loads right.
    AS_RELEASED: the same model in the released checkpoints' convention: top-level global_head_dim
    and num_global_key_value_heads, layer_types written out. It separates a loader that reads only
    the released convention from numerics that are wrong."""
    AS_SAVED = "as-saved"
    AS_RELEASED = "as-released"


class NotSupported(Exception):
    """The implementation cannot run this case or dtype; the message says why."""


@dataclass
class Case:
    directory: Path
    config: dict                   # the text config (config.json's text_config, or the file itself)
    inputs: dict[str, np.ndarray]  # input_ids, labels, attention_mask (when padded)

    @property
    def name(self) -> str:
        return self.directory.name

    def weights(self) -> dict[str, np.ndarray]:
        """The checkpoint's tensors by their checkpoint keys (float32; bf16 is widened exactly)."""
        from safetensors import safe_open

        out = {}
        for path in sorted(self.directory.glob("model*.safetensors")):
            with safe_open(str(path), framework="np") as f:
                for key in f.keys():
                    out[key] = f.get_tensor(key)
        if not out:
            raise FileNotFoundError(f"{self.directory}: no model*.safetensors")
        return out

    def judged_gradients(self, dtype: str) -> set[str]:
        """The golden's gradient names ("layers.0.mlp.up_proj.weight"): transformers' trainable
        parameters. Another implementation may train more (a buffer of transformers' it keeps as a
        parameter) or keep less (weights its loader drops); only these are written and judged."""
        import h5py

        with h5py.File(self.directory / f"golden.{dtype}.h5", "r") as f:
            return set(f["expected/grads"].keys()) if "expected/grads" in f else set()

    def padding(self) -> np.ndarray:
        """[B, S] 1 for a token, 0 for padding (all ones when the case has no attention_mask)."""
        return self.inputs.get("attention_mask", np.ones_like(self.inputs["input_ids"]))

    def sequences(self) -> list[tuple[int, np.ndarray]]:
        """(row, token indices) of each sequence: a row's real tokens, split where its position_ids
        restart (a packed row: golden/FORMAT.md, "Real-size goldens"). An implementation evaluates each
        alone from position 0: RoPE sees only position differences and the window only distances."""
        padding, positions = self.padding(), self.inputs.get("position_ids")
        out = []
        for b in range(padding.shape[0]):
            index = np.flatnonzero(padding[b] == 1)
            if len(index) == 0:
                continue
            starts = [0] if positions is None else \
                [0] + [i for i in range(1, len(index)) if positions[b, index[i]] != positions[b, index[i - 1]] + 1]
            out += [(b, index[i:j]) for i, j in zip(starts, starts[1:] + [len(index)])]
        return out


def read_case(directory: Path) -> Case:
    from safetensors.numpy import load_file

    config_path, inputs_path = directory / "config.json", directory / "inputs.safetensors"
    for path in (config_path, inputs_path):
        if not path.is_file():
            raise FileNotFoundError(f"{path}: missing (a case is a golden/transformers/<case> directory)")
    config = json.loads(config_path.read_text())
    return Case(directory, config.get("text_config", config), load_file(str(inputs_path)))


def released_text_config(text: dict) -> dict:
    """A text config in the released checkpoints' convention, as transformers 5.17 resolves it."""
    text = dict(text)
    if not text.get("layer_types"):
        # transformers' default: every sixth layer global, and the last layer always global.
        n = text["num_hidden_layers"]
        text["layer_types"] = ["full_attention" if (i + 1) % 6 == 0 or i == n - 1 else "sliding_attention"
                               for i in range(n)]
    per_layer = text.pop("per_layer_config", None)
    if per_layer:
        full = next(iter(per_layer.values()))
        text["global_head_dim"] = full.get("head_dim", text["head_dim"])
        text["num_global_key_value_heads"] = full.get("num_key_value_heads")
    text.setdefault("global_head_dim", 512)  # transformers' default when neither is written
    text.setdefault("num_global_key_value_heads", None)
    return dict(sorted(text.items()))


def checkpoint_dir(case: Case, style: ConfigStyle, work: Path) -> Path:
    """The directory the implementation loads: the case itself, or a copy under `work` whose
    config.json is in `style`."""
    if style is ConfigStyle.AS_SAVED:
        return case.directory
    target = work / case.name
    target.mkdir(parents=True, exist_ok=True)
    for path in case.directory.iterdir():
        if path.name != "config.json" and path.suffix in (".safetensors", ".json"):
            shutil.copy(path, target / path.name)
    config = json.loads((case.directory / "config.json").read_text())
    if "text_config" in config:
        config["text_config"] = released_text_config(config["text_config"])
    else:
        config = released_text_config(config)
    (target / "config.json").write_text(json.dumps(config, indent=2))
    return target


def golden_name(checkpoint_key: str) -> str:
    """A checkpoint key as the golden's weight name (model.language_model.layers.0.x -> layers.0.x)."""
    if checkpoint_key == "lm_head.weight":
        return checkpoint_key
    for prefix in CHECKPOINT_PREFIXES:
        if checkpoint_key.startswith(prefix):
            return checkpoint_key[len(prefix):]
    return checkpoint_key


def mean_token_loss(logits: np.ndarray, labels: np.ndarray) -> float:
    """transformers' causal-LM loss in float64: logits [B, S, V] at position t predict labels[t + 1]."""
    shifted = logits[:, :-1].astype(np.float64)
    targets = labels[:, 1:]
    keep = targets != IGNORE_INDEX
    top = shifted.max(-1, keepdims=True)
    log_z = np.log(np.exp(shifted - top).sum(-1)) + top[..., 0]
    picked = np.take_along_axis(shifted, np.where(keep, targets, 0)[..., None], -1)[..., 0]
    return float(((log_z - picked) * keep).sum() / max(int(keep.sum()), 1))


def write_candidate(path: Path, tree: dict[str, np.ndarray], generator: str, dtype: str) -> None:
    """The candidate file: one float32 dataset per golden name (HDF5 has no bfloat16; widening is exact)."""
    import h5py

    with h5py.File(path, "w") as f:
        f.attrs["generator"] = generator
        f.attrs["dtype"] = dtype
        for name, value in sorted(tree.items()):
            f.create_dataset(name, data=np.asarray(value, dtype=np.float32))


def arguments(description: str, extra=None) -> argparse.Namespace:
    """The adapters' common options; `extra(parser)` adds an adapter's own."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("case_dir", type=Path, help="a golden/transformers/<case> directory")
    p.add_argument("--dtype", choices=DTYPE_NAMES, default="f32", help="the golden's dtype")
    p.add_argument("--out", type=Path, required=True, help="the candidate HDF5 file to write")
    p.add_argument("--forward-only", action="store_true", help="logits (and loss, hidden states) only")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu", help="where the implementation runs")
    p.add_argument("--config", type=ConfigStyle, choices=list(ConfigStyle), default=ConfigStyle.AS_SAVED,
                   metavar="{as-saved,as-released}", help="the config.json the loader reads (ConfigStyle)")
    if extra is not None:
        extra(p)
    args = p.parse_args()
    args.work = Path(tempfile.mkdtemp(prefix="candidate-"))  # a rewritten checkpoint's copy
    atexit.register(shutil.rmtree, args.work, True)
    return args


def run(main) -> None:
    """Calls main(); a NotSupported becomes exit status NOT_SUPPORTED with its reason on stderr."""
    try:
        sys.exit(main())
    except NotSupported as why:
        print(f"not supported: {why}", file=sys.stderr)
        sys.exit(NOT_SUPPORTED)
