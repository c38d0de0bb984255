#!/usr/bin/env python3
"""Check that golden files (golden/FORMAT.md, format v2) read in h5py and follow the format.

The C++ writer and golden/generators/hf_cases.py both write golden files; this script reads them with
nothing but h5py and NumPy, so a file that passes is usable without the C++ code. For each file:

  - format_version is 2 and the root attributes the file's kind, device and dtype need are there;
  - `config` is JSON; inputs/, a non-empty expected/outputs/ and expected/grads/ exist, and
    truth/ exists exactly when dtype is bf16 or f16, with the same dataset paths as expected/;
  - judged/ masks are int64 0/1, each names a dataset of expected/ and broadcasts to it;
  - bf16/f16 files carry `baseline_family` (a JSON list of names) and one float32 [M, 2] table of
    non-negative errors under baseline/ for every dataset of expected/;
  - every float dataset is float32 and finite, every integer dataset int64; in a bf16 or f16
    file the floats under inputs/, weights/ and expected/ are exactly representable in that dtype
    (except the loss, which is computed in float32 in every dtype);
  - a file written by our reference with stored weights: every weight equals the one the counter
    generator ("Generated tensors") recreates from `seed`, bit for bit.

Prints one line per file (`ok  PATH  ...` or `FAIL  PATH: why`); exits 1 if any file fails.
"""
from __future__ import annotations

import argparse
import json
import math
import re
import sys
from pathlib import Path

import h5py
import numpy as np


class CheckError(Exception):
    """A file that breaks the format; the message says how."""


# --------------------------------------------------------------------------------------------
# The counter generator (FORMAT.md "Generated tensors"; reference/counter_random.cpp)
# --------------------------------------------------------------------------------------------

MASK64 = (1 << 64) - 1
GOLDEN_GAMMA = 0x9E3779B97F4A7C15


def splitmix64(z: np.ndarray) -> np.ndarray:
    """SplitMix64's finaliser on a uint64 array; products wrap modulo 2^64 as in C++."""
    with np.errstate(over="ignore"):
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def fnv1a64(name: str) -> int:
    h = 0xCBF29CE484222325
    for c in name.encode():
        h = ((h ^ c) * 0x100000001B3) & MASK64
    return h


def stream_bits(seed: int, name: str, count: int) -> np.ndarray:
    """bits[i] = splitmix64(key + (i + 1) * gamma), key = splitmix64(seed) ^ fnv1a64(name)."""
    key = int(splitmix64(np.array([seed & MASK64], dtype=np.uint64))[0]) ^ fnv1a64(name)
    with np.errstate(over="ignore"):
        counters = np.uint64(key) + np.arange(1, count + 1, dtype=np.uint64) * np.uint64(GOLDEN_GAMMA)
    return splitmix64(counters)


def counter_uniform(seed: int, name: str, shape: tuple[int, ...], center: float, half_width: float) -> np.ndarray:
    """float32(center + half_width * (2u - 1)) with u the top 24 bits / 2^24, in double, rounded once."""
    u = (stream_bits(seed, name, math.prod(shape)) >> np.uint64(40)).astype(np.float64) * 2.0**-24
    return (center + half_width * (2.0 * u - 1.0)).astype(np.float32).reshape(shape)


# reference/weights.cpp, is_scale: norm scales, router scales and layer_scalar.
SCALE = re.compile(r"(norm[^.]*\.weight|router\.scale|per_expert_scale|layer_scalar)$")


def generated_weight(seed: int, name: str, shape: tuple[int, ...]) -> np.ndarray:
    """A weight as reference/weights.cpp random_weights draws it, in float32 (before the dtype)."""
    if SCALE.search(name):
        return counter_uniform(seed, name, shape, 1.0, 0.5)
    # Variance 1 for embedding tables, 1/fan_in (the last dim) for projections.
    variance = 1.0 if "embed_tokens" in name else 1.0 / float(shape[-1])
    return counter_uniform(seed, name, shape, 0.0, math.sqrt(3.0 * variance))


def self_test() -> None:
    """The vectorised generator against plain Python integers mod 2^64 at a few indices, so
    that a NumPy whose uint64 arithmetic does not wrap cannot pass files by accident."""

    def splitmix64_int(z: int) -> int:
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
        return z ^ (z >> 31)

    for seed, name in ((0, "layers.0.mlp.up_proj.weight"), (2**63 + 12345, "embed_tokens.weight")):
        indices = [0, 1, 4097]
        bits = stream_bits(seed, name, max(indices) + 1)
        key = splitmix64_int(seed) ^ fnv1a64(name)
        for i in indices:
            want = splitmix64_int((key + (i + 1) * GOLDEN_GAMMA) & MASK64)
            if int(bits[i]) != want:
                raise SystemExit(f"self-test failed: {name} seed {seed} index {i}: {int(bits[i]):#x} != {want:#x}")


# --------------------------------------------------------------------------------------------
# Rounding to the file's dtype
# --------------------------------------------------------------------------------------------

def round_to(values: np.ndarray, dtype: str) -> np.ndarray:
    """float32 values rounded to `dtype` (round to nearest even) and widened back to float32."""
    if dtype == "f32":
        return values
    if dtype == "f16":
        return values.astype(np.float16).astype(np.float32)
    bits = values.view(np.uint32)
    with np.errstate(over="ignore"):
        rounded = (bits + np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))) & np.uint32(0xFFFF0000)
    return rounded.view(np.float32)


def representable(values: np.ndarray, dtype: str) -> bool:
    return np.array_equal(round_to(values, dtype).view(np.uint32), values.view(np.uint32))


# --------------------------------------------------------------------------------------------
# The checks
# --------------------------------------------------------------------------------------------

COMMON_ATTRS = ("kind", "case", "description", "generator", "config", "dtype", "device", "seed",
                "torch_version", "tolerance_class")
KIND_ATTRS = {"model": ("weights", "kv_key"), "layer": ("weights", "layer"), "op": ()}
ALLOWED = {
    "kind": set(KIND_ATTRS),
    "dtype": {"f32", "bf16", "f16"},
    "device": {"cpu", "cuda"},
    "tolerance_class": {"fp32", "reduced-precision"},
    "weights": {"stored", "generated", "constructed"},
    "kv_key": {"layer-type", "layer-index"},
    "truth_dtype": {"f32"},
}
INT_ATTRS = ("format_version", "seed", "layer", "construction")
# Computed in float32 whatever the dtype: transformers' loss upcasts the logits (reference/GEMMA4.md,
# Forward step 7), so a bf16 run's loss is not a bf16 value.
FP32_ALWAYS = {"expected/outputs/loss"}


def read_attrs(f: h5py.File) -> dict[str, object]:
    """Root attributes with strings decoded (fixed-length strings read as bytes)."""
    attrs = {}
    for key, value in f.attrs.items():
        attrs[key] = value.decode() if isinstance(value, (bytes, np.bytes_)) else value
    return attrs


def check_attrs(attrs: dict[str, object]) -> None:
    if "format_version" not in attrs:
        raise CheckError("no format_version attribute")
    if attrs["format_version"] != 2:
        raise CheckError(f"format_version {attrs['format_version']}, this checker reads 2")
    required = list(COMMON_ATTRS)
    required += KIND_ATTRS.get(attrs.get("kind"), ())
    if attrs.get("device") == "cuda":
        required += ["cuda_version", "gpu_name"]
    if attrs.get("dtype") in ("bf16", "f16"):
        required += ["truth_dtype", "baseline_family"]
    if attrs.get("weights") == "constructed":
        required += ["construction"]
    missing = [name for name in required if name not in attrs]
    if missing:
        raise CheckError(f"missing root attributes: {', '.join(missing)}")
    for name in required:
        value = attrs[name]
        if name in INT_ATTRS:
            if not isinstance(value, (int, np.integer)) or isinstance(value, (bool, np.bool_)):
                raise CheckError(f"attribute {name} is {type(value).__name__}, not an integer")
        elif not isinstance(value, str):
            raise CheckError(f"attribute {name} is {type(value).__name__}, not a string")
        if name in ALLOWED and value not in ALLOWED[name]:
            raise CheckError(f"attribute {name} = {value!r}, not one of {sorted(ALLOWED[name])}")
    try:
        json.loads(attrs["config"])
    except json.JSONDecodeError as e:
        raise CheckError(f"config is not JSON: {e}") from None


def datasets_under(f: h5py.File, group: str) -> dict[str, h5py.Dataset]:
    """Every dataset below `group`, by its path relative to it."""
    found: dict[str, h5py.Dataset] = {}
    if group in f:
        f[group].visititems(lambda name, obj: found.__setitem__(name, obj) if isinstance(obj, h5py.Dataset) else None)
    return found


def check_groups(f: h5py.File, dtype: str) -> None:
    for group in ("inputs", "expected/outputs", "expected/grads"):
        if not isinstance(f.get(group), h5py.Group):
            raise CheckError(f"no group {group}/")
    if not datasets_under(f, "expected/outputs"):
        raise CheckError("expected/outputs/ holds no dataset")
    reduced = dtype in ("bf16", "f16")
    if ("truth" in f) != reduced:
        raise CheckError(f"truth/ {'missing' if reduced else 'present'} in a {dtype} file")
    if reduced:
        expected, truth = set(datasets_under(f, "expected")), set(datasets_under(f, "truth"))
        if expected != truth:
            raise CheckError(f"truth/ and expected/ differ in datasets: {sorted(expected ^ truth)[:5]}")


def check_judged(f: h5py.File) -> None:
    """judged/<name>: int64 0/1, broadcastable to expected/<name> (FORMAT.md, Don't-care positions)."""
    expected = datasets_under(f, "expected")
    for name, mask in sorted(datasets_under(f, "judged").items()):
        if name not in expected:
            raise CheckError(f"judged/{name} names no dataset of expected/")
        shape = expected[name].shape
        if mask.dtype != np.dtype("<i8") or len(mask.shape) != len(shape):
            raise CheckError(f"judged/{name} must be int64 of rank {len(shape)}")
        if any(m not in (1, s) for m, s in zip(mask.shape, shape)):
            raise CheckError(f"judged/{name} {mask.shape} does not broadcast to {shape}")
        if not np.isin(mask[()], (0, 1)).all():
            raise CheckError(f"judged/{name} holds values other than 0 and 1")


def check_baseline(f: h5py.File, attrs: dict[str, object]) -> int:
    """baseline/<name>: float32 [M, 2] (max-abs, RMS error of each family member). Returns M."""
    try:
        family = json.loads(attrs["baseline_family"])
    except json.JSONDecodeError as e:
        raise CheckError(f"baseline_family is not JSON: {e}") from None
    if not isinstance(family, list) or not family or not all(isinstance(m, str) for m in family):
        raise CheckError("baseline_family must be a non-empty JSON list of names")
    tables = datasets_under(f, "baseline")
    for name in sorted(datasets_under(f, "expected")):
        if name not in tables:
            raise CheckError(f"baseline/{name} is missing")
        table = tables[name]
        if table.shape != (len(family), 2):
            raise CheckError(f"baseline/{name} is {table.shape}, expected ({len(family)}, 2): one row per member")
        if (table[()] < 0).any():
            raise CheckError(f"baseline/{name} holds a negative error")
    return len(family)


def check_datasets(f: h5py.File, dtype: str) -> int:
    """float32 and finite, or int64; reduced-precision values representable. Returns the count."""
    everything = datasets_under(f, "/")
    for path, dataset in sorted(everything.items()):
        if dataset.dtype.kind == "f":
            if dataset.dtype != np.dtype("<f4"):
                raise CheckError(f"{path} is {dataset.dtype}, not float32")
            values = dataset[()]
            if not np.isfinite(values).all():
                raise CheckError(f"{path} has non-finite values")
            top = path.split("/", 1)[0]
            if top in ("inputs", "weights", "expected") and path not in FP32_ALWAYS and not representable(values, dtype):
                raise CheckError(f"{path} holds values that are not {dtype}")
        elif dataset.dtype != np.dtype("<i8"):
            raise CheckError(f"{path} is {dataset.dtype}, not float32 or int64")
    return len(everything)


def check_generated_weights(f: h5py.File, seed: int, dtype: str) -> int:
    """Every stored weight recreated from the seed, bit for bit. Returns how many."""
    weights = datasets_under(f, "weights")
    if not weights:
        raise CheckError("weights = stored but weights/ holds no dataset")
    for name, dataset in sorted(weights.items()):
        want = round_to(generated_weight(seed, name, dataset.shape), dtype)
        got = dataset[()]
        if not np.array_equal(want.view(np.uint32), got.view(np.uint32)):
            where = np.flatnonzero(want.view(np.uint32) != got.view(np.uint32))[0]
            raise CheckError(f"weights/{name} differs from the generator at flat index {where}: "
                             f"stored {float(got.flat[where])!r}, generated {float(want.flat[where])!r}")
    return len(weights)


def check_file(path: Path) -> str:
    """All checks on one file; returns the summary line's details or raises CheckError."""
    try:
        f = h5py.File(path, "r")
    except OSError as e:
        raise CheckError(f"cannot open as HDF5: {e}") from None
    with f:
        attrs = read_attrs(f)
        check_attrs(attrs)
        dtype = attrs["dtype"]
        check_groups(f, dtype)
        check_judged(f)
        count = check_datasets(f, dtype)
        summary = f"kind={attrs['kind']} dtype={dtype} datasets={count}"
        if dtype != "f32":
            summary += f" baseline members={check_baseline(f, attrs)}"
        if attrs.get("weights") == "stored" and attrs["generator"].startswith("reference"):
            regenerated = check_generated_weights(f, int(attrs["seed"]), dtype)
            summary += f" weights regenerated {regenerated}/{regenerated}"
    return summary


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("files", nargs="+", type=Path, metavar="FILE", help="golden files (.h5)")
    args = parser.parse_args(argv)
    self_test()
    failures = 0
    for path in args.files:
        try:
            print(f"ok  {path}  {check_file(path)}")
        except CheckError as e:
            print(f"FAIL  {path}: {e}")
            failures += 1
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
