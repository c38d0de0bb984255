#!/usr/bin/env python3
"""Negative controls of golden/generators/golden_h5py_check.py: a committed golden file passes, and copies of
it with a wrong seed (the weights no longer follow the generator), a NaN in expected/, a
bf16 value that is not representable, a missing attribute, a judged/ mask that does not
broadcast, and a baseline/ table with a row missing each fail with a message."""
from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import h5py
import numpy as np

CHECKER = Path(__file__).resolve().parent.parent / "golden_h5py_check.py"


def run(path: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(CHECKER), str(path)], capture_output=True, text=True)


def mutated(source: Path, tmp: Path, name: str, mutate) -> Path:
    path = tmp / name
    shutil.copy(source, path)
    with h5py.File(path, "r+") as f:
        mutate(f)
    return path


def set_first(dataset_path: str, value: float):
    def mutate(f):
        data = f[dataset_path][()]
        data.flat[0] = value
        del f[dataset_path]
        f[dataset_path] = data.astype(np.float32)
    return mutate


def replace(dataset_path: str, value: np.ndarray):
    def mutate(f):
        if dataset_path in f:
            del f[dataset_path]
        f[dataset_path] = value
    return mutate


def main(argv: list[str]) -> int:
    source = Path(argv[1])  # a reference-made bf16 model golden
    failures = []
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        if run(source).returncode != 0:
            failures.append(f"the unchanged file failed: {run(source).stdout}")
        cases = {
            "wrong seed": (lambda f: f.attrs.__setitem__("seed", np.int64(int(f.attrs["seed"]) + 1)), "differs from the generator"),
            "NaN": (set_first("expected/outputs/logits", np.nan), "non-finite"),
            "not bf16": (set_first("expected/outputs/logits", 1.0 + 2.0 ** -20), "not bf16"),
            "no dtype": (lambda f: f.attrs.__delitem__("dtype"), "missing root attributes"),
            "bad mask": (replace("judged/outputs/logits", np.ones((3, 1, 1), dtype=np.int64)), "does not broadcast"),
            "short table": (replace("baseline/outputs/logits", np.zeros((1, 2), dtype=np.float32)), "one row per member"),
        }
        for label, (mutate, phrase) in cases.items():
            result = run(mutated(source, tmp, label.replace(" ", "_") + ".h5", mutate))
            text = result.stdout + result.stderr
            if result.returncode == 0 or phrase not in text:
                failures.append(f"{label}: exit {result.returncode}, wanted '{phrase}' in: {text.strip()}")
            else:
                print(f"ok  {label}: {text.strip().splitlines()[-1]}")
    for f in failures:
        print("FAIL", f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
