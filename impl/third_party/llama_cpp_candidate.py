#!/usr/bin/env python3
"""Candidate adapter: llama.cpp's Gemma-4, through llama-cpp-python, on a golden/transformers case.

Judges llama.cpp's Gemma-4 forward pass (src/models/gemma4.cpp) the way its users run a Hugging
Face checkpoint: the case's config.json and model*.safetensors go through llama.cpp's own converter
(convert_hf_to_gguf.py, --outtype = the golden's dtype) into a GGUF file, which llama_cpp.Llama
loads and evaluates on the CPU. Each sequence of a batch row (its real tokens, attention_mask == 1,
split where inputs' position_ids restart: a packed row) is evaluated from position 0 in a fresh context; the logits of every position are the candidate's
outputs/logits (padding positions 0: the golden does not judge them), and outputs/loss follows from
them and the labels. llama.cpp has no backward, so only --forward-only runs.

    PYTHONPATH=.cache/pinned/llama-cpp:impl/third_party python impl/third_party/llama_cpp_candidate.py \
        golden/transformers/e2b_like --dtype bf16 --out /tmp/c.h5 --forward-only

`--quantize Q8_0|Q4_0|Q4_K_M` runs a quantized model as its users make one: the converter's F32 file,
then llama.cpp's own quantizer (llama_model_quantize, what the llama-quantize tool calls) to that
type; `--keep DIR` keeps both files, the F32 one being the bridge golden/generators/gguf_dequantized.py
needs to dequantize the quantized one into the checkpoint its golden is made from. The KV cache
stays in the golden's dtype (--dtype), the weights are the type's. `--gguf FILE` runs a given file as
it is, with llama.cpp's default f16 KV cache, as its users run one: a quantized case's
(golden/generators/quantized_cases.py), whose golden is made on that file's dequantized weights.

Environment (see the setup commands): llama-cpp-python 0.3.36 built from its sdist and the sdist's
converter tree (convert_hf_to_gguf.py, conversion/, gguf-py/) in .cache/pinned/llama-cpp/
llama_cpp_convert/, or wherever LLAMA_CPP_CONVERT points. The converter runs in a subprocess with
this interpreter (it needs torch, transformers, numpy, safetensors, pyyaml, tqdm).
"""
from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from candidate_io import NotSupported, arguments, checkpoint_dir, mean_token_loss, read_case, run, write_candidate

OUTTYPES = {"f32": "f32", "bf16": "bf16", "f16": "f16"}  # converter --outtype per golden dtype
# llama.cpp's quantization types (enum llama_ftype in llama.h): what llama-quantize's names mean.
QUANT_FTYPES = {"Q8_0": 7, "Q4_0": 2, "Q4_K_M": 15}
THREADS = 2
DECODE_UBATCH = 64  # --decode-from: the prefill's ubatch, and so the headroom of llama.cpp's sliding-window cache


def converter_script() -> Path:
    """The sdist's convert_hf_to_gguf.py, kept beside the installed llama_cpp package."""
    if os.environ.get("LLAMA_CPP_CONVERT"):
        return Path(os.environ["LLAMA_CPP_CONVERT"]) / "convert_hf_to_gguf.py"
    spec = importlib.util.find_spec("llama_cpp")
    if spec is None or spec.origin is None:
        raise RuntimeError("llama_cpp is not importable (put .cache/pinned/llama-cpp on PYTHONPATH)")
    return Path(spec.origin).parent.parent / "llama_cpp_convert" / "convert_hf_to_gguf.py"


def write_tokenizer(directory: Path, config: dict) -> None:
    """A stand-in tokenizer of exactly vocab_size tokens, for the converter only.

    The cases ship no tokenizer, and the converter insists on one: Gemma4Model.set_vocab reads a
    byte-fallback BPE tokenizer.json through transformers (gguf.LlamaHfVocab), llama.cpp's "gemma4"
    vocabulary needs at least one merge, and Gemma3Model trims token_embd to the tokenizer's size.
    Only token ids reach the model, so the token strings are arbitrary; the specials sit at the
    config's ids and "\\n" exists so that llama.cpp finds a newline token when it loads the vocabulary."""
    from tokenizers import AddedToken, Tokenizer, decoders, models

    n = config["vocab_size"]
    names: list[str | None] = [None] * n
    for key, text in (("pad_token_id", "<pad>"), ("eos_token_id", "<eos>"), ("bos_token_id", "<bos>")):
        token_id = config.get(key)
        if isinstance(token_id, int) and 0 <= token_id < n:
            names[token_id] = text
    filler = iter(["<unk>", "\n", "a", "b", "ab"] + [f"t{i}" for i in range(n)])
    names = [name if name is not None else next(filler) for name in names]
    tokenizer = Tokenizer(models.BPE(vocab={t: i for i, t in enumerate(names)}, merges=[("a", "b")],
                                     unk_token="<unk>", byte_fallback=True))
    tokenizer.decoder = decoders.Sequence([decoders.ByteFallback(), decoders.Fuse()])  # LlamaHfVocab wants a Sequence
    specials = [t for t in ("<pad>", "<eos>", "<bos>", "<unk>") if t in names]
    tokenizer.add_special_tokens([AddedToken(t, special=True) for t in specials])
    tokenizer.save(str(directory / "tokenizer.json"))
    (directory / "tokenizer_config.json").write_text(json.dumps(
        {"tokenizer_class": "PreTrainedTokenizerFast", "unk_token": "<unk>",
         **{f"{k}_token": f"<{k}>" for k in ("pad", "eos", "bos") if f"<{k}>" in names}}))


def convert(case_dir: Path, work: Path, dtype: str) -> Path:
    """The checkpoint as GGUF, by llama.cpp's converter. A refusal fails the case: the checkpoint is a
    valid Gemma-4 one, so a converter that cannot read it is a finding, not an excuse."""
    checkpoint = work / "hf"
    checkpoint.mkdir()
    for path in case_dir.iterdir():  # config and weights only: inputs and goldens are not the model's
        if path.name == "config.json" or path.name.startswith("model"):
            shutil.copy(path, checkpoint / path.name)
    config = json.loads((case_dir / "config.json").read_text())
    write_tokenizer(checkpoint, config.get("text_config", config))
    out = work / f"model.{dtype}.gguf"
    proc = subprocess.run([sys.executable, str(converter_script()), str(checkpoint), "--outtype", OUTTYPES[dtype],
                           "--outfile", str(out)], capture_output=True, text=True)
    if proc.returncode != 0 or not out.is_file():
        raise RuntimeError(f"convert_hf_to_gguf.py refused the checkpoint: {last_error(proc.stderr, proc.returncode)}")
    return out


def quantize(source: Path, quant: str) -> Path:
    """The GGUF file quantized to `quant` by llama.cpp's own quantizer, beside `source`."""
    import llama_cpp

    out = source.with_name(f"model.{quant}.gguf")
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = QUANT_FTYPES[quant]
    params.nthread = THREADS
    status = llama_cpp.llama_model_quantize(str(source).encode(), str(out).encode(), params)
    if status != 0 or not out.is_file():
        raise RuntimeError(f"llama_model_quantize to {quant} failed (status {status})")
    return out


def last_error(stderr: str, status: int) -> str:
    """The converter's own one-line reason: its traceback's last line, and for a bare exception
    (a failed assert has no message) the source line that raised it."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip(" ^~")]  # no caret markers
    if not lines:
        return f"exit status {status}"
    if ":" not in lines[-1] and len(lines) > 1:
        return f"{lines[-1]} at `{lines[-2]}`"
    return lines[-1]


# llama.cpp caches K and V in f16 by default; an f32 or bf16 run keeps them in its own dtype (what
# -ctk/-ctv do), so the cache does not round below the golden's precision. ggml_type values from
# ggml.h (llama_cpp exports no GGML_TYPE_BF16).
KV_CACHE_TYPES = {"f32": 0, "f16": 1, "bf16": 30}


def logits_per_row(gguf_path: Path, ids: np.ndarray, sequences: list, dtype: str | None, vocab: int,
                   decode_from: int | None = None) -> np.ndarray:
    """[B, S, V] float32: each sequence (Case.sequences(): row, token indices) evaluated alone from position 0,
    padding left 0. `dtype` None: llama.cpp's default KV cache (f16), what a quantized model's users run.
    `decode_from` P: a sequence's first P tokens in one batch, then one token a call through llama.cpp's
    KV cache with its sliding layers in their rotating window-sized cache (swa_full off), teacher-forced:
    the logits of the positions from P on come from the decode path.

    transformers numbers a left-padded row's positions from the padding on; RoPE only sees position
    differences and the sliding window only distances, so starting the real tokens at 0 is the same model."""
    import llama_cpp
    from llama_cpp._logger import set_verbose

    seq = ids.shape[1]
    # verbose=True routes llama.cpp's log through llama-cpp-python's callback to sys.stderr (verbose=False
    # sends the loader's messages to /dev/null), so a refusal can quote the loader; quiet afterwards.
    log = io.StringIO()
    try:
        with contextlib.redirect_stderr(log):
            # One ubatch holds a whole row; flash attention off and a full-size SWA cache: the plain
            # attention path, no sliding-window cache eviction within a row (unless decoding).
            # Decoding: ubatches of DECODE_UBATCH, so that the sliding layers' cache (window + ubatch
            # cells) is smaller than a sequence and wraps during the steps.
            llm = llama_cpp.Llama(str(gguf_path), n_ctx=seq, n_batch=seq,
                                  n_ubatch=seq if decode_from is None else DECODE_UBATCH, n_threads=THREADS,
                                  n_threads_batch=THREADS, logits_all=True, flash_attn=False,
                                  swa_full=decode_from is None,
                                  type_k=KV_CACHE_TYPES[dtype or "f16"], type_v=KV_CACHE_TYPES[dtype or "f16"],
                                  verbose=True)
    except ValueError as why:  # the loader refused the converter's own GGUF: a failure, quoted
        errors = [line for line in log.getvalue().splitlines() if "error" in line.lower()]
        raise RuntimeError(f"llama.cpp could not load the converted model: {errors[-1] if errors else why}")
    set_verbose(False)
    llm.verbose = False
    if llm.n_vocab() != vocab:
        raise RuntimeError(f"GGUF vocabulary {llm.n_vocab()} != config vocab_size {vocab}")
    logits = np.zeros((*ids.shape, vocab), dtype=np.float32)
    for b, index in sequences:
        llm.reset()  # n_tokens = 0: eval() then drops every cached position of the previous sequence
        tokens = [int(t) for t in ids[b][index]]
        prefill = len(tokens) if decode_from is None else min(decode_from, len(tokens))
        llm.eval(tokens[:prefill])
        for token in tokens[prefill:]:
            llm.eval([token])  # one decode step
        logits[b, index] = llm.scores[: len(index)]
    llm.close()
    return logits


def main() -> int:
    def options(parser):
        parser.add_argument("--quantize", choices=sorted(QUANT_FTYPES), help="run the model quantized to this type")
        parser.add_argument("--keep", type=Path, help="with --quantize: keep the F32 and quantized GGUF files here")
        parser.add_argument("--gguf", type=Path, help="run this GGUF file as it is (a quantized case's, "
                            "golden/generators/quantized_cases.py), with llama.cpp's default f16 KV cache")
        parser.add_argument("--decode-from", type=int, metavar="P",
                            help="each sequence's tokens from P on one at a time through llama.cpp's KV cache "
                                 "(its rotating sliding-window cache), teacher-forced")

    args = arguments(__doc__.split("\n\n")[0], options)
    if args.keep and not args.quantize:
        raise SystemExit("llama_cpp_candidate.py: --keep needs --quantize (it keeps the quantized model's files)")
    if args.gguf and (args.quantize or not args.gguf.is_file()):
        raise SystemExit(f"llama_cpp_candidate.py: --gguf {args.gguf}: " +
                         ("not with --quantize" if args.quantize else "no such file"))
    case = read_case(args.case_dir)
    if not args.forward_only:
        raise NotSupported("llama.cpp has no backward (run with --forward-only)")
    if args.device != "cpu":
        raise NotSupported("this environment's llama.cpp is built for the CPU only (GGML_NATIVE=OFF, no CUDA)")
    # use_bidirectional_attention='all' is not refused here: the converter accepts it and writes
    # attention.causal = false, and gemma4.cpp's only non-causal mode (LLAMA_NON_CAUSAL_TYPE_SWA_ONLY,
    # meant for image tokens) makes the sliding layers see every later token while the full layers stay
    # causal. That is a different model, computed silently: the golden says so.
    ids = case.inputs["input_ids"]
    with tempfile.TemporaryDirectory(prefix="llama_cpp_candidate.") as work:
        checkpoint = checkpoint_dir(case, args.config, args.work)
        if args.gguf:
            gguf_path = args.gguf
        elif args.quantize:
            bridge = convert(checkpoint, Path(work), "f32")
            gguf_path = quantize(bridge, args.quantize)
            if args.keep:
                args.keep.mkdir(parents=True, exist_ok=True)
                for path in (bridge, gguf_path):
                    shutil.copy(path, args.keep / path.name)
        else:
            gguf_path = convert(checkpoint, Path(work), args.dtype)
        logits = logits_per_row(gguf_path, ids, case.sequences(), None if args.gguf else args.dtype,
                                case.config["vocab_size"], args.decode_from)
    if not np.isfinite(logits).all():
        raise RuntimeError("llama.cpp returned non-finite logits")
    tree = {"outputs/logits": logits}
    if "labels" in case.inputs:
        tree["outputs/loss"] = np.float32(mean_token_loss(logits, case.inputs["labels"]))
    import llama_cpp

    weights = f", weights {args.quantize}" if args.quantize else (f", {args.gguf.name}" if args.gguf else "")
    write_candidate(args.out, tree, f"llama-cpp-python {llama_cpp.__version__} (llama.cpp gemma4{weights})", args.dtype)
    print(f"wrote {args.out}: logits {logits.shape} ({args.dtype})")
    return 0


if __name__ == "__main__":
    run(main)
