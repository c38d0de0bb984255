#!/usr/bin/env python3
"""Candidate adapter: transformers' Gemma-4 exported with torch.onnx and run by ONNX Runtime, on a case.

What it judges: the export route users take to serve a fine-tuned model outside PyTorch:
`torch.onnx.export(..., dynamo=True)` (torch 2.11's exporter, onnxscript) of transformers 5.17's
model as loaded from the case's checkpoint, then ONNX Runtime's CPU execution provider on the
saved graph. Forward only (ONNX Runtime does inference): logits and hidden states, and the loss
computed from the logits. How:

- The model is the checkpoint's architecture (`Gemma4ForCausalLM` or `Gemma4ForConditionalGeneration`)
  from `from_pretrained` in the golden's dtype, SDPA attention, no cache; the graph's inputs are
  input_ids and attention_mask at the case's shape (a static export: what a user exports for one
  shape), its outputs the logits and every hidden state.
- The graph is run by `onnxruntime.InferenceSession` (CPUExecutionProvider); a dtype whose kernels
  ONNX Runtime's CPU provider lacks is "not supported" with ONNX Runtime's own message.

    PYTHONPATH=.cache/pinned/onnxruntime:impl/third_party python impl/third_party/onnxruntime_candidate.py \\
        golden/transformers/dense_keqv --dtype f32 --out c.h5
"""
from __future__ import annotations

import json

import numpy as np

from candidate_io import NotSupported, arguments, mean_token_loss, read_case, run, write_candidate


def main() -> int:
    args = arguments(__doc__.split("\n\n")[0])
    if args.device != "cpu":
        raise NotSupported("this adapter runs ONNX Runtime's CPU execution provider only")
    case = read_case(args.case_dir)
    import onnxruntime
    import torch
    import transformers

    dtype = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}[args.dtype]
    architecture = json.loads((case.directory / "config.json").read_text())["architectures"][0]
    model = getattr(transformers, architecture).from_pretrained(case.directory, dtype=dtype,
                                                               attn_implementation="sdpa").eval()

    class Outputs(torch.nn.Module):  # the graph: logits and every hidden state, no cache
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, input_ids, attention_mask):
            out = self.inner(input_ids=input_ids, attention_mask=attention_mask, use_cache=False,
                             output_hidden_states=True)
            return (out.logits, *out.hidden_states)

    ids = torch.as_tensor(case.inputs["input_ids"], dtype=torch.long)
    mask = torch.as_tensor(case.padding(), dtype=torch.long)
    path = args.work / "model.onnx"
    try:
        with torch.no_grad():
            torch.onnx.export(Outputs(model), (ids, mask), dynamo=True, input_names=["input_ids", "attention_mask"],
                              verbose=False).save(str(path))
    except Exception as e:  # the exporter's own message is pages long: the innermost cause, one line
        root = e
        while root.__cause__ is not None:
            root = root.__cause__
        raise RuntimeError(f"torch.onnx.export failed: {type(root).__name__}: {str(root).strip().splitlines()[0][:240]}") from e
    try:
        session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        logits, *hidden = session.run(None, {"input_ids": ids.numpy(), "attention_mask": mask.numpy()})
    except Exception as e:  # onnxruntime's NotImplemented (a kernel missing for this dtype) has no own class
        if "NOT_IMPLEMENTED" in str(e) or "Could not find an implementation" in str(e):
            raise NotSupported(f"ONNX Runtime {onnxruntime.__version__} CPU: {str(e).splitlines()[0][:240]}") from e
        raise
    tree = {"outputs/logits": np.asarray(logits, np.float32)}
    for i, h in enumerate(hidden):
        tree[f"outputs/hidden_states/{i}"] = np.asarray(h, np.float32)
    tree["outputs/loss"] = np.asarray(mean_token_loss(tree["outputs/logits"], case.inputs["labels"]), np.float32)
    write_candidate(args.out, tree, f"onnxruntime {onnxruntime.__version__} (CPUExecutionProvider) on torch "
                                    f"{torch.__version__}'s torch.onnx export of transformers {transformers.__version__}",
                    args.dtype)
    print(f"wrote {args.out}: {len(tree)} datasets ({args.dtype}, loss {float(tree['outputs/loss']):.6f})")
    return 0


if __name__ == "__main__":
    run(main)
