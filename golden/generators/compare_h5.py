#!/usr/bin/env python3
"""Compare the tensors of two HDF5 files (expected vs actual); report, do not judge.

For every dataset present in both files (logits, loss, hidden_states/<i>, grads/<key>, ...):

    cosine       cosine similarity of the flattened tensors
    max_abs      max |actual - expected|
    max_rel      max_abs / max |expected|
    nmse         mean((actual - expected)^2) / mean(expected^2)

With --truth TRUTH.h5 (an fp32 reference, e.g. expected.h5 when comparing bf16 runs), it also
prints, per tensor, the error of each low-precision run against the truth and their ratio:

    err(actual, truth) / err(expected, truth)

for max-abs error and for RMSE. This is the FlashAttention rule: a candidate kernel is fine when
its error against fp32 is at most a small multiple of what the same-dtype eager reference makes.

Then one summary line per group (top-level names, hidden_states, grads): worst cosine, worst
max_rel, worst nmse (and worst ratios with --truth), each with the tensor it came from.

Exit status: 0 whenever both files were read (whatever the numbers), 2 if a file is unreadable.
Tensors are read in chunks, so grads of real-geometry layers (GBs) fit in memory.
"""
from __future__ import annotations

import argparse
import math
import re
import signal
import sys
from dataclasses import dataclass, field

import h5py
import numpy as np

CHUNK_ELEMENTS = 1 << 24  # per read; float64 work arrays stay ~128 MB


@dataclass
class Sums:
    """Running sums over chunks: enough for cosine, max-abs, nmse and rmse."""
    dot: float = 0.0
    aa: float = 0.0
    bb: float = 0.0
    diff2: float = 0.0
    max_abs: float = 0.0
    max_b: float = 0.0
    count: int = 0
    nonfinite: int = 0

    def add(self, a: np.ndarray, b: np.ndarray) -> None:
        a = a.astype(np.float64, copy=False).ravel()
        b = b.astype(np.float64, copy=False).ravel()
        finite = np.isfinite(a) & np.isfinite(b)
        self.nonfinite += int(finite.size - finite.sum())
        a, b = a[finite], b[finite]
        d = a - b
        self.dot += float(a @ b)
        self.aa += float(a @ a)
        self.bb += float(b @ b)
        self.diff2 += float(d @ d)
        if d.size:
            self.max_abs = max(self.max_abs, float(np.abs(d).max()))
            self.max_b = max(self.max_b, float(np.abs(b).max()))
        self.count += int(a.size)

    @property
    def cosine(self) -> float:
        if self.aa == 0.0 and self.bb == 0.0:
            return 1.0
        if self.aa == 0.0 or self.bb == 0.0:
            return 0.0
        return self.dot / math.sqrt(self.aa * self.bb)

    @property
    def max_rel(self) -> float:
        return self.max_abs / self.max_b if self.max_b > 0 else (0.0 if self.max_abs == 0 else math.inf)

    @property
    def nmse(self) -> float:
        return self.diff2 / self.bb if self.bb > 0 else (0.0 if self.diff2 == 0 else math.inf)

    @property
    def rmse(self) -> float:
        return math.sqrt(self.diff2 / self.count) if self.count else 0.0


@dataclass
class Row:
    name: str
    shape: tuple
    vs_expected: Sums
    actual_vs_truth: Sums | None = None
    expected_vs_truth: Sums | None = None
    note: str = ""

    @property
    def ratio_max(self) -> float:
        return ratio(self.actual_vs_truth.max_abs, self.expected_vs_truth.max_abs)

    @property
    def ratio_rmse(self) -> float:
        return ratio(self.actual_vs_truth.rmse, self.expected_vs_truth.rmse)


def ratio(num: float, den: float) -> float:
    if den > 0:
        return num / den
    return 1.0 if num == 0 else math.inf


# --------------------------------------------------------------------------------------------
# Reading
# --------------------------------------------------------------------------------------------

def dataset_names(f: h5py.File) -> list[str]:
    names: list[str] = []
    f.visititems(lambda name, obj: names.append(name) if isinstance(obj, h5py.Dataset) else None)
    return names


def natural_key(name: str) -> list:
    # hidden_states/10 after hidden_states/9; layers.10 after layers.9
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name)]


GROUP_ORDER = {"(top level)": 0, "hidden_states": 1, "grads": 3}


def display_key(name: str) -> tuple:
    """Top-level tensors (logits, loss) first, then hidden states, then grads."""
    return (GROUP_ORDER.get(group_of(name), 2), natural_key(name))


def chunks(*datasets: h5py.Dataset):
    """Yield aligned slices of same-shaped datasets along their first axis."""
    shape = datasets[0].shape
    if len(shape) == 0:
        yield tuple(np.asarray(d[()]) for d in datasets)
        return
    row = int(np.prod(shape[1:])) if len(shape) > 1 else 1
    step = max(1, CHUNK_ELEMENTS // max(row, 1))
    for start in range(0, shape[0], step):
        yield tuple(d[start : start + step] for d in datasets)


def accumulate(a: h5py.Dataset, b: h5py.Dataset) -> Sums:
    sums = Sums()
    for ca, cb in chunks(a, b):
        sums.add(ca, cb)
    return sums


def compare_dataset(name: str, expected: h5py.File, actual: h5py.File, truth: h5py.File | None) -> Row:
    e, a = expected[name], actual[name]
    if e.shape != a.shape:
        return Row(name, e.shape, Sums(), note=f"SHAPE MISMATCH expected {e.shape} actual {a.shape}")
    row = Row(name, e.shape, accumulate(a, e))
    if truth is not None and name in truth and truth[name].shape == e.shape:
        t = truth[name]
        row.actual_vs_truth = accumulate(a, t)
        row.expected_vs_truth = accumulate(e, t)
    if row.vs_expected.nonfinite:
        row.note = f"{row.vs_expected.nonfinite} non-finite values skipped"
    return row


# --------------------------------------------------------------------------------------------
# Printing
# --------------------------------------------------------------------------------------------

def fmt(x: float) -> str:
    return f"{x:.3e}" if math.isfinite(x) else str(x)


def print_table(rows: list[Row], with_truth: bool) -> None:
    width = max([len(r.name) for r in rows] + [4])
    header = f"{'name':<{width}}  {'shape':<18} {'cosine':>12} {'max_abs':>10} {'max_rel':>10} {'nmse':>10}"
    if with_truth:
        header += f" | {'max(a,t)':>10} {'max(e,t)':>10} {'ratio':>8} {'rmse(a,t)':>10} {'rmse(e,t)':>10} {'ratio':>8}"
    print(header)
    print("-" * len(header))
    for r in rows:
        s = r.vs_expected
        line = f"{r.name:<{width}}  {str(tuple(r.shape)):<18} {s.cosine:>12.8f} {fmt(s.max_abs):>10} {fmt(s.max_rel):>10} {fmt(s.nmse):>10}"
        if with_truth and r.actual_vs_truth is not None:
            at, et = r.actual_vs_truth, r.expected_vs_truth
            line += (f" | {fmt(at.max_abs):>10} {fmt(et.max_abs):>10} {r.ratio_max:>8.3f}"
                     f" {fmt(at.rmse):>10} {fmt(et.rmse):>10} {r.ratio_rmse:>8.3f}")
        if r.note:
            line += f"  [{r.note}]"
        print(line)


def group_of(name: str) -> str:
    return name.split("/", 1)[0] if "/" in name else "(top level)"


def print_summaries(rows: list[Row], with_truth: bool) -> None:
    print("\nsummary by group")
    groups: dict[str, list[Row]] = {}
    for r in rows:
        if not r.note.startswith("SHAPE"):
            groups.setdefault(group_of(r.name), []).append(r)
    for group, members in groups.items():
        worst_cos = min(members, key=lambda r: r.vs_expected.cosine)
        worst_rel = max(members, key=lambda r: r.vs_expected.max_rel)
        worst_nmse = max(members, key=lambda r: r.vs_expected.nmse)
        print(f"  {group} ({len(members)} tensors)")
        print(f"    worst cosine  {worst_cos.vs_expected.cosine:.8f}  {worst_cos.name}")
        print(f"    worst max_rel {fmt(worst_rel.vs_expected.max_rel)}  {worst_rel.name}")
        print(f"    worst nmse    {fmt(worst_nmse.vs_expected.nmse)}  {worst_nmse.name}")
        truthful = [r for r in members if r.actual_vs_truth is not None]
        if with_truth and truthful:
            worst_rmax = max(truthful, key=lambda r: r.ratio_max)
            worst_rrmse = max(truthful, key=lambda r: r.ratio_rmse)
            print(f"    worst err ratio vs truth (max_abs) {worst_rmax.ratio_max:.3f}  {worst_rmax.name}")
            print(f"    worst err ratio vs truth (rmse)    {worst_rrmse.ratio_rmse:.3f}  {worst_rrmse.name}")
    bad = [r for r in rows if r.note.startswith("SHAPE")]
    if bad:
        print(f"  {len(bad)} shape mismatches: " + ", ".join(r.name for r in bad))


def print_unpaired(expected_names: set[str], actual_names: set[str]) -> None:
    only_e = sorted(expected_names - actual_names, key=natural_key)
    only_a = sorted(actual_names - expected_names, key=natural_key)
    if only_e:
        print(f"\nonly in expected ({len(only_e)}): " + ", ".join(only_e[:20]) + (" ..." if len(only_e) > 20 else ""))
    if only_a:
        print(f"only in actual ({len(only_a)}): " + ", ".join(only_a[:20]) + (" ..." if len(only_a) > 20 else ""))


def print_attrs(label: str, f: h5py.File) -> None:
    attrs = {k: (v.decode() if isinstance(v, bytes) else v) for k, v in f.attrs.items()}
    if attrs:
        print(f"{label}: " + ", ".join(f"{k}={attrs[k]}" for k in sorted(attrs)))


# --------------------------------------------------------------------------------------------

def open_h5(path: str) -> h5py.File:
    try:
        return h5py.File(path, "r")
    except (OSError, ValueError) as err:
        print(f"compare_h5: cannot read {path}: {err}", file=sys.stderr)
        sys.exit(2)


def main(argv: list[str]) -> int:
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # `compare_h5.py ... | head` ends quietly
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("expected", help="reference file (e.g. transformers' expected.h5)")
    parser.add_argument("actual", help="file under test (e.g. ours_f32.h5)")
    parser.add_argument("--truth", help="fp32 reference for the error-ratio columns")
    args = parser.parse_args(argv)

    expected, actual = open_h5(args.expected), open_h5(args.actual)
    truth = open_h5(args.truth) if args.truth else None
    print(f"expected: {args.expected}\nactual:   {args.actual}" + (f"\ntruth:    {args.truth}" if truth else ""))
    print_attrs("expected attrs", expected)
    print_attrs("actual attrs", actual)

    try:
        e_names, a_names = set(dataset_names(expected)), set(dataset_names(actual))
        common = sorted(e_names & a_names, key=display_key)
        rows = [compare_dataset(name, expected, actual, truth) for name in common]
    except (OSError, KeyError) as err:
        print(f"compare_h5: read error: {err}", file=sys.stderr)
        return 2

    print()
    if rows:
        print_table(rows, truth is not None)
        print_summaries(rows, truth is not None)
    else:
        print("no dataset is present in both files")
    print_unpaired(e_names, a_names)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
