"""mlx-lm's Gemma-4 (mlx_lm.models.gemma4 / gemma4_text, Apple's MLX; its CPU build on Linux) as a
candidate: a golden/transformers/ case loaded the way mlx-lm loads a Hugging Face checkpoint
(mlx_lm.utils.load_model: config.json, the safetensors, the model's own sanitize), one training
step's logits, loss and every weight gradient (mlx.nn.value_and_grad), written under the golden's
names for `golden check` (candidate_io.py says how the scoreboard runs it):

    PYTHONPATH=.cache/pinned/mlx-lm:impl/third_party python impl/third_party/mlx_lm_candidate.py \
        golden/transformers/e2b_like --dtype bf16 --out c.h5

mlx-lm's forward takes no padding mask (its trainer right-pads and masks only the loss), so a padded
row runs as its own sequence of real tokens from position 0, as an mlx-lm user batches it, and a
packed row as its sequences, each alone; RoPE is relative, so the real positions' results are the
golden's. The padding positions' logits are written as 0 (the golden does not judge them). Hidden
states are not exposed (not checked).

`--mlx-model DIR` runs a quantized MLX model as its users load one (mlx_lm.utils.load_model, in the
dtypes it was saved in): a quantized case's (golden/generators/quantized_cases.py --types mlx-4bit),
whose golden is made on that model's dequantized weights; forward only.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

import candidate_io as io


def load(case: io.Case, dtype: str, directory):
    import mlx.core as mx
    from mlx_lm.utils import load_model

    # Nothing is refused here: mlx-lm's ModelArgs drops fields it does not know (from_dict), so a config
    # it cannot express (use_bidirectional_attention) runs as something else, and the golden says so.
    model, _ = load_model(directory)  # strict, as mlx_lm.load
    model.set_dtype({"f32": mx.float32, "bf16": mx.bfloat16, "f16": mx.float16}[dtype])
    return model


def golden_gradients(grads: dict, judged: set[str]) -> dict[str, np.ndarray]:
    """mlx-lm's parameter names back to the golden's, for the gradients the golden judges (mlx-lm
    also trains layer_scalar, a buffer in transformers; it drops the unused K/V of KV-shared layers,
    which the golden does not judge either)."""
    out = {}
    for name, value in grads.items():
        name = name.removeprefix("language_model.").removeprefix("model.")
        if ".experts.switch_glu." in name:
            continue  # joined below
        out[name] = value
    for name in [n for n in grads if n.endswith(".experts.switch_glu.gate_proj.weight")]:
        base = name.removeprefix("language_model.").removeprefix("model.").removesuffix(".switch_glu.gate_proj.weight")
        prefix = name.removesuffix("gate_proj.weight")
        # sanitize split gate_up_proj [E, 2I, H] along its middle axis: gate first, then up.
        out[f"{base}.gate_up_proj"] = np.concatenate([grads[prefix + "gate_proj.weight"],
                                                      grads[prefix + "up_proj.weight"]], axis=-2)
        out[f"{base}.down_proj"] = grads[prefix + "down_proj.weight"]
    return {name: value for name, value in out.items() if name in judged}


def main() -> int:
    def options(parser):
        parser.add_argument("--mlx-model", type=Path, help="run this quantized MLX model directory as it is saved")

    args = io.arguments(__doc__.split("\n\n")[0], options)
    import mlx.core as mx
    import mlx.nn as nn
    from mlx.utils import tree_flatten

    if args.device != "cpu":
        raise io.NotSupported("this environment has MLX's CPU build (mlx-cpu); its CUDA build is another package")
    case = io.read_case(args.case_dir)
    if args.mlx_model:
        if not args.forward_only:
            raise io.NotSupported("a quantized MLX model is judged forward only (run with --forward-only)")
        from mlx_lm.utils import load_model

        model, _ = load_model(args.mlx_model)  # strict, as mlx_lm.load; the saved dtypes
    else:
        model = load(case, args.dtype, io.checkpoint_dir(case, args.config, args.work))
    ids, labels = case.inputs["input_ids"], case.inputs.get("labels")
    kept = case.sequences()
    counted = 0 if labels is None else sum(int((labels[b, real][1:] != io.IGNORE_INDEX).sum()) for b, real in kept)

    def step(model):
        """Every row's logits, and transformers' loss: the mean over the batch's counted tokens."""
        logits, total = [], mx.array(0.0)
        for b, real in kept:
            row_logits = model(mx.array(ids[b, real][None]))
            logits.append(row_logits)
            if labels is not None:
                targets = mx.array(labels[b, real][1:][None])
                keep = targets != io.IGNORE_INDEX
                losses = nn.losses.cross_entropy(row_logits[:, :-1].astype(mx.float32), mx.where(keep, targets, 0))
                total = total + (losses * keep).sum()
        return total / max(counted, 1), logits

    try:
        if args.forward_only or labels is None:
            (loss, logits), grads = step(model), {}
        else:
            (loss, logits), grads = nn.value_and_grad(model, step)(model)
            grads = {k: np.array(v.astype(mx.float32)) for k, v in tree_flatten(grads)}
        mx.eval(loss, logits)
    except RuntimeError as e:
        if "only supports float32" in str(e):  # an MLX CPU kernel without this dtype (GatherMM in bf16)
            raise io.NotSupported(f"MLX {mx.__version__} on the CPU: {e}")
        raise

    full = np.zeros(ids.shape + (logits[0].shape[-1],), np.float32)
    for (b, real), row_logits in zip(kept, logits):
        full[b, real] = np.array(row_logits[0].astype(mx.float32))
    tree = {"outputs/logits": full}
    if labels is not None:
        tree["outputs/loss"] = np.array(loss.astype(mx.float32))
    if grads:
        tree.update({f"grads/{k}": v for k, v in golden_gradients(grads, case.judged_gradients(args.dtype)).items()})
    import mlx_lm
    io.write_candidate(args.out, tree, f"mlx-lm {mlx_lm.__version__} (mlx {mx.__version__}, {mx.default_device()})",
                       args.dtype)
    print(f"wrote {args.out}: {len(tree)} datasets ({args.dtype}, {len(kept)} rows)")
    return 0


if __name__ == "__main__":
    io.run(main)
