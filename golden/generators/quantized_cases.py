#!/usr/bin/env python3
"""Quantized cases: a trained-like Gemma-4 quantized by llama.cpp's own tools, and the goldens that
judge an implementation on the weights it actually loads (golden/FORMAT.md, "Quantized subjects").

    PYTHONPATH=.cache/pinned/llama-cpp .venv/bin/python golden/generators/quantized_cases.py --out DIR \
        [--geometry e2b] [--width reduced|blocks] [--window W] [--types Q8_0 Q4_0 Q4_K_M mlx-4bit torchao-int4]
        [--faults ...] [--conform build/bin/gemma4-conform]
    # mlx-4bit: PYTHONPATH=.cache/pinned/mlx-lm; torchao-int4: .cache/pinned/torchao (as well)

For one real-size geometry (hf_real_cases.py: the released head dims, window, KV sharing and
per-layer embeddings; constructed weights, so that it attends like a trained model) it writes

    DIR/<label>/           the float model: config.json (the released convention), model.safetensors
                           (fp32), inputs.safetensors (the real-size inputs), golden.f32.h5 (its fp32
                           logits: the float model a quantization's envelope is measured against) and,
                           for GGUF types, model.f32.gguf (llama.cpp's converter; gguf_dequantized.py's
                           bridge)
    DIR/<label>-<TYPE>/    per type: the quantized model (model.<TYPE>.gguf from llama.cpp's quantizer,
                           llama_model_quantize, what llama-quantize runs; mlx/, what
                           `mlx_lm.convert -q` writes, from the model in bf16; or torchao/, transformers'
                           save_pretrained of the bf16 model quantized with TorchAoConfig int4),
                           model.safetensors (it dequantized to fp32: gguf_dequantized.py,
                           mlx_dequantized.py, torchao_dequantized.py),
                           quantization.json, inputs.safetensors and golden.bf16.h5: the conformance
                           golden of a subject loading that model

Each directory is a case in the candidate adapters' sense (impl/third_party/candidate_io.py), so
`llama_cpp_candidate.py DIR/<label>-Q4_0 --gguf DIR/<label>-Q4_0/model.Q4_0.gguf ...` and
`gemma4-conform golden check` judge it.

The quantized golden is a reduced-precision one (tolerance_class reduced-precision, dtype bf16):
truth/ is fp32 on the dequantized weights exactly (a quantized engine multiplies by them unrounded),
expected/ and the baseline family are bf16 implementations on them, and root attributes
`quantization` (the type) and `truth_weights = exact` say so. `--conform` fills baseline/.

Widths: `reduced` keeps hf_real_cases.py's (hidden 64, per-layer 32), whose rows are whole 32-element
blocks (Q8_0, Q4_0) but not 256-element super-blocks, so llama.cpp stores a K-quant type's tensors
in its fallbacks (Q5_0, Q5_1, Q8_0); `blocks` sets hidden, intermediate, per-layer and expert widths
to 256, one super-block, so Q4_K_M runs the K-quant kernels.

`--window W` replaces the geometry's sliding window (and with it the sequence, 2W + 1): CTest's case
(W = 128, S = 257) judges the same paths, the ring wrapping included, in a quarter of the time.
"""
from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO_ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(REPO_ROOT / "impl" / "third_party"))

import hf_real_cases as real  # noqa: E402
from real_weights import Weights  # noqa: E402

GGUF_TYPES = ("Q8_0", "Q4_0", "Q4_K_M")  # llama.cpp's quantizer
MLX_TYPES = ("mlx-4bit",)                # mlx_lm.utils.quantize_model, affine, group MLX_GROUP
TORCHAO_TYPES = ("torchao-int4",)        # transformers' TorchAoConfig, int4 weight-only, group TORCHAO_GROUP
TYPES = GGUF_TYPES + MLX_TYPES + TORCHAO_TYPES
MLX_GROUP = 64
TORCHAO_GROUP = 32
BLOCK_WIDTH = 256  # ggml's QK_K: a K-quant super-block
WIDTHS = ("reduced", "blocks")


def case_config(geometry: str, width: str, window: int | None = None) -> dict:
    config = real.real_config(geometry)
    if window:
        config["sliding_window"] = window
    if width == "blocks":
        config.update(hidden_size=BLOCK_WIDTH, intermediate_size=BLOCK_WIDTH)
        if config.get("hidden_size_per_layer_input"):
            config["hidden_size_per_layer_input"] = BLOCK_WIDTH
        if config.get("enable_moe_block"):
            config["moe_intermediate_size"] = BLOCK_WIDTH
    return config


def write_inputs(directory: Path, config: dict, seed: int) -> None:
    from safetensors.torch import save_file

    inputs = real.make_inputs(config, seed)
    save_file({k: v.contiguous() for k, v in inputs.items()}, str(directory / "inputs.safetensors"))


def write_config(directory: Path, config: dict) -> None:
    """config.json in the released checkpoints' convention (top-level global_head_dim), which
    llama.cpp's converter needs; transformers and the reference read it too."""
    (directory / "config.json").write_text(json.dumps(
        {**config, "architectures": ["Gemma4ForCausalLM"], "model_type": "gemma4_text"}, indent=2, sort_keys=True))


def float_case(out: Path, label: str, config: dict, seed: int, device: str) -> Path:
    """DIR/<label>: the constructed float model as a checkpoint, its inputs and its fp32 golden."""
    directory = out / label
    directory.mkdir(parents=True, exist_ok=True)
    real.build_model(config, "f32", seed, True, "cpu").save_pretrained(directory)
    write_config(directory, config)
    write_inputs(directory, config, seed)
    golden = real.write_case(label, config, Weights("checkpoint", directory), "f32", directory, device, seed)
    golden.rename(directory / "golden.f32.h5")
    return directory


def f32_gguf(float_dir: Path) -> Path:
    """DIR/<label>/model.f32.gguf, llama.cpp's converter's F32 file: what llama-quantize quantizes, and
    gguf_dequantized.py's bridge."""
    import llama_cpp_candidate as lc

    path = float_dir / "model.f32.gguf"
    if not path.is_file():
        with tempfile.TemporaryDirectory(prefix="quantized_cases.") as work:
            shutil.move(str(lc.convert(float_dir, Path(work), "f32")), path)
    return path


def mlx_quantized(float_dir: Path, directory: Path, bits: int) -> Path:
    """`directory`/mlx: the float model quantized as `mlx_lm.convert -q --q-bits BITS` does (group 64),
    in bf16 as a released checkpoint is (scales, biases and unquantized tensors in bf16)."""
    import mlx.core as mx
    from mlx_lm.utils import load_model, quantize_model, save_config, save_model

    model, config = load_model(float_dir)
    model.set_dtype(mx.bfloat16)
    model, config = quantize_model(model, config, group_size=MLX_GROUP, bits=bits)
    target = directory / "mlx"
    target.mkdir(parents=True, exist_ok=True)
    save_model(target, model)
    save_config(config, target / "config.json")
    return target


def torchao_quantized(float_dir: Path, directory: Path) -> Path:
    """`directory`/torchao: the float model loaded in bf16 with transformers' TorchAoConfig
    (IntxWeightOnlyConfig int4, PerGroup(32): torchao's int4 weight-only path that runs on a CPU),
    saved by save_pretrained, as a transformers user makes one; lm_head (tied to the embedding) kept."""
    import torch
    from torchao.quantization import IntxWeightOnlyConfig
    from torchao.quantization.granularity import PerGroup
    from transformers import AutoModelForCausalLM, TorchAoConfig

    config = TorchAoConfig(IntxWeightOnlyConfig(weight_dtype=torch.int4, granularity=PerGroup(TORCHAO_GROUP)),
                           modules_to_not_convert=["lm_head"])
    model = AutoModelForCausalLM.from_pretrained(float_dir, dtype=torch.bfloat16, quantization_config=config)
    target = directory / "torchao"
    model.save_pretrained(target)
    return target


def quantized_case(float_dir: Path, quant: str, directory: Path, config: dict, seed: int, device: str,
                   gguf: Path | None = None) -> Path:
    """`directory`: the quantized model (the GGUF file `gguf`, moved there, or MLX's, made there), its
    dequantized checkpoint and its conformance golden. A file that moved a tensor further than its
    type can (the dequantizer exits 1) still gets its golden: what it holds is what its subject runs,
    and golden check fails its weight rows."""
    shutil.rmtree(directory, ignore_errors=True)
    if gguf is not None:
        command = [str(HERE / "gguf_dequantized.py"), str(float_dir), "--float", str(f32_gguf(float_dir)),
                   "--quantized", str(gguf), "--out", str(directory)]
    elif quant in MLX_TYPES:
        bits = int(quant.removeprefix("mlx-").removesuffix("bit"))
        with tempfile.TemporaryDirectory(prefix="quantized_cases.") as work:
            stored = mlx_quantized(float_dir, Path(work), bits)
            directory.mkdir(parents=True)
            shutil.move(str(stored), directory / "mlx")
        command = [str(HERE / "mlx_dequantized.py"), str(float_dir), "--mlx", str(directory / "mlx"), "--out", str(directory)]
    else:
        with tempfile.TemporaryDirectory(prefix="quantized_cases.") as work:
            stored = torchao_quantized(float_dir, Path(work))
            directory.mkdir(parents=True)
            shutil.move(str(stored), directory / "torchao")
        command = [str(HERE / "torchao_dequantized.py"), str(float_dir), "--torchao", str(directory / "torchao"),
                   "--out", str(directory)]
    status = subprocess.run([sys.executable, *command], capture_output=True, text=True)
    if not (directory / "model.safetensors").is_file():  # unreadable or unmatched: nothing to judge against
        raise SystemExit(f"quantized_cases: {Path(command[0]).name} refused {quant}: {status.stderr.strip()}")
    if status.returncode != 0:
        print(status.stderr.strip(), file=sys.stderr)
    if gguf is not None:
        shutil.move(str(gguf), directory / gguf.name)
    golden = real.write_case(directory.name, config, Weights("checkpoint", directory), "bf16", directory, device,
                             seed, exact_truth=True, extra_attrs={"quantization": quant, "truth_weights": "exact",
                                                                     "checkpoint": "."})  # the golden sits in it
    return golden.rename(directory / "golden.bf16.h5")


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, required=True, help="where the case directories go")
    p.add_argument("--geometry", choices=sorted(real.GEOMETRIES), default="e2b")
    p.add_argument("--width", choices=WIDTHS, default="reduced", help="reduced: hf_real_cases.py's; blocks: 256 (K-quants)")
    p.add_argument("--window", type=int, help="another sliding window than the geometry's (the sequence is 2W + 1)")
    p.add_argument("--types", nargs="+", choices=TYPES, default=list(TYPES), help="llama.cpp quantization types")
    p.add_argument("--faults", nargs="*", default=[], metavar="FAULT",
                   help="also DIR/<label>-<TYPE>-<FAULT> from each type's file with one fault "
                        "(impl/third_party/gguf_faults.py: the negative controls)")
    p.add_argument("--seed", type=int, default=real.SEED)
    p.add_argument("--device", default="cpu", help="where transformers computes the goldens")
    p.add_argument("--conform", type=Path, help="gemma4-conform, to fill the bf16 goldens' baseline/")
    args = p.parse_args(argv)
    if args.window is not None and args.window < 48:
        p.error("--window: at least 48 (decoding starts 40 tokens before the window edge)")
    config = case_config(args.geometry, args.width, args.window)
    label = args.geometry if args.width == "reduced" else f"{args.geometry}-blocks"
    start = time.monotonic()
    import gguf_faults

    unknown = sorted(set(args.faults) - set(gguf_faults.ALL_FAULTS))
    if unknown:
        p.error(f"--faults: unknown {', '.join(unknown)} (gguf_faults.py --help lists them)")
    if set(args.types) & set(GGUF_TYPES):
        import llama_cpp_candidate as lc
    float_dir = float_case(args.out, label, config, args.seed, args.device)
    print(f"{float_dir}: float model and fp32 golden, {time.monotonic() - start:.1f} s", flush=True)
    goldens = []
    for quant in args.types:
        start = time.monotonic()
        directory = args.out / f"{label}-{quant}"
        if quant in MLX_TYPES + TORCHAO_TYPES:
            goldens.append(quantized_case(float_dir, quant, directory, config, args.seed, args.device))
            print(f"{goldens[-1]}: {time.monotonic() - start:.1f} s", flush=True)
            continue
        gguf = lc.quantize(f32_gguf(float_dir), quant)  # llama-quantize's work, beside its source
        for fault in args.faults:
            faulty = gguf.with_name(f"{fault}.{quant}.gguf")
            more = ["--float", str(f32_gguf(float_dir))] if fault in gguf_faults.NEEDS_FLOAT else []
            gguf_faults.main([str(gguf), fault, "--out", str(faulty), *more])
            goldens.append(quantized_case(float_dir, quant, args.out / f"{label}-{quant}-{fault}", config, args.seed,
                                          args.device, faulty))
        goldens.append(quantized_case(float_dir, quant, directory, config, args.seed, args.device, gguf))
        print(f"{goldens[-1]}: {time.monotonic() - start:.1f} s", flush=True)
    real.fill_baselines(args.conform, [str(g) for g in goldens], args.device)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
