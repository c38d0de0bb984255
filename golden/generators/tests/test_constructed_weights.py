#!/usr/bin/env python3
"""The two halves of the constructed weights agree bit for bit: golden/generators/constructed_weights.py
(NumPy, what the real-size goldens were made with) and reference/constructed_weights.cpp (what the
suite recomputes them with), read through the package's `seeded_weights`. Every real-size geometry's
config, and E2B at its released hidden width. Negative controls: one construction constant changed
in the NumPy half, and the plain generated weights, each differ from the C++ construction.

    python golden/generators/tests/test_constructed_weights.py [--build build]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
import constructed_weights as cw  # noqa: E402
from golden_h5py_check import generated_weight  # noqa: E402
from hf_real_cases import GEOMETRIES, real_config  # noqa: E402


def differing(config: dict, seed: int, cpp: dict, numpy_weight) -> list[str]:
    """Names whose NumPy value differs from the C++ one in any bit."""
    out = []
    for name, tensor in cpp.items():
        want = tensor.numpy()
        got = numpy_weight(config, seed, name, want.shape)
        if got.dtype != np.float32 or got.shape != want.shape or not np.array_equal(got.view(np.uint32), want.view(np.uint32)):
            out.append(name)
    return out


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--build", default=str(HERE.parents[2] / "build"), help="build tree with python/gemma4_conform")
    args = p.parse_args(argv)
    sys.path.insert(0, str(Path(args.build) / "python"))
    from gemma4_conform import _core

    seed = 20261126
    configs = {g: real_config(g) for g in sorted(GEOMETRIES)}
    configs["e2b-width-1536"] = real_config("e2b", full_width=True)
    failures = 0
    for label, config in configs.items():
        cpp = _core.seeded_weights(config, seed, "constructed")
        bad = differing(config, seed, cpp, cw.constructed_weight)
        print(f"{'ok  ' if not bad else 'FAIL'} {label}: {len(cpp) - len(bad)}/{len(cpp)} weights equal bit for bit"
              + (f"; differ: {bad[:4]}" if bad else ""), flush=True)
        failures += bool(bad)

    # Negative controls on E2B: each must differ somewhere, or the comparison cannot fail.
    config = configs["e2b"]
    cpp = _core.seeded_weights(config, seed, "constructed")
    saved = dict(cw.GAINS)
    cw.GAINS["full_attention"] = (0.45, 0.21, 0.25)
    changed = differing(config, seed, cpp, cw.constructed_weight)
    cw.GAINS.update(saved)
    plain = differing(config, seed, cpp, lambda c, s, n, shape: generated_weight(s, n, shape))
    for label, bad, want in (("a global sink gain of 0.21", changed, "k_norm"), ("generated weights", plain, "q_proj")):
        caught = any(want in n for n in bad)
        print(f"{'ok  ' if caught else 'FAIL'} negative control, {label}: {len(bad)} weights differ", flush=True)
        failures += not caught
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
