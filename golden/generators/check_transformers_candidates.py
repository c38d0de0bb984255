#!/usr/bin/env python3
"""Run `gemma4-conform golden check` on candidates written by transformers (transformers_candidate.py).

For every case under golden/transformers/ and every dtype: transformers with eager and with SDPA
attention (and grouped-GEMM experts, f32) must pass every golden (correct code; SDPA differs in
the don't-care rows). Each planted bug must be caught in every dtype, as the suite catches a faulty
backend: at least one golden of that dtype fails (a small model may hide a bug on one case: the
RoPE base in bf16 on `moe` reaches 0.97 of its bound), except the exact GELU in bf16/f16, whose
effect is below their resolution (it must fail in f32; FORMAT.md, Separation). Prints one row per
candidate, then one per bug and dtype, and exits 1 when any verdict is not the expected one. CTest
runs it where transformers is installed (golden_check_transformers).

--real DIR adds the real-size goldens (golden/real/<geometry>.<dtype>.h5 of --real-geometries, in
the dtypes of --dtypes that have a file): transformers with SDPA attention must pass, and with the
final logit soft-cap dropped must fail (hf_real_cases.py --candidate).
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import transformers_candidate as tc  # noqa: E402

# Real-size candidates: (attention, bug) -> golden check's verdict in every dtype.
REAL_RUNS = {("sdpa", "none"): "pass", ("eager", "no-softcap"): "fail"}

# (attention, experts, bug) -> what golden check must say per dtype: "pass", "fail" or "either";
# a dtype left out is not run (grouped_mm needs 16-byte strides, which bf16/f16 lack at these sizes).
RUNS = {
    ("eager", "eager", "none"): {"f32": "pass", "bf16": "pass", "f16": "pass"},
    ("sdpa", "eager", "none"): {"f32": "pass", "bf16": "pass", "f16": "pass"},
    ("eager", "grouped_mm", "none"): {"f32": "pass"},
    ("eager", "eager", "attention-scale"): {"f32": "fail", "bf16": "fail", "f16": "fail"},
    ("eager", "eager", "rope-theta"): {"f32": "fail", "bf16": "fail", "f16": "fail"},
    ("eager", "eager", "gelu-exact"): {"f32": "fail", "bf16": "either", "f16": "either"},
}


def main(argv: list[str]) -> int:
    root = Path(__file__).resolve().parents[2]
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cli", type=Path, default=root / "build/bin/gemma4-conform", help="the gemma4-conform binary")
    p.add_argument("--cases", type=Path, default=root / "golden/transformers", help="the transformers cases")
    p.add_argument("--dtypes", default="f32,bf16,f16")
    p.add_argument("--real", type=Path, help="also the real-size goldens in this directory (golden/real)")
    p.add_argument("--real-geometries", default="e2b,e4b,31b,26b-a4b",
                   help="with --real: which geometries (<geometry>-full-width for the full-width files)")
    p.add_argument("--real-only", action="store_true", help="with --real: the real-size goldens only")
    p.add_argument("--device", default="cpu", help="where transformers computes the real-size candidates")
    args = p.parse_args(argv)

    cases = sorted(d for d in args.cases.iterdir() if (d / "inputs.safetensors").is_file())
    if not cases:
        p.error(f"no cases under {args.cases}")
    unexpected = 0
    print(f"{'case':14} {'dtype':5} {'attention':9} {'experts':10} {'bug':16} {'expected':8} {'verdict':8} summary")
    total = 0
    caught: dict[tuple[str, str, str], list[bool]] = {}  # (bug, dtype, expected) -> failed, per case
    with tempfile.TemporaryDirectory() as work:
        for case in [] if args.real_only else cases:
            inputs = tc.load_file(str(case / "inputs.safetensors"))
            for dtype in args.dtypes.split(","):
                for (attn, experts, bug), expected in RUNS.items():
                    if dtype not in expected:
                        continue
                    total += 1
                    torch.manual_seed(0)
                    model = tc.load_model(case, tc.DTYPES[dtype], attn, bug, experts)
                    path = Path(work) / f"{case.name}-{dtype}-{attn}-{experts}-{bug}.h5"
                    tc.write(path, tc.candidate(model, inputs, forward_only=False), {"generator": "transformers"})
                    r = subprocess.run([str(args.cli), "golden", "check", "--quiet", str(case / f"golden.{dtype}.h5"),
                                        str(path)], capture_output=True, text=True)
                    verdict = {0: "pass", 1: "fail"}.get(r.returncode, f"exit {r.returncode}")
                    if expected[dtype] == "fail" and verdict == "pass":
                        ok = True  # judged over all cases below
                    else:
                        ok = expected[dtype] == verdict or (expected[dtype] == "either" and verdict in ("pass", "fail"))
                    unexpected += 0 if ok else 1
                    caught.setdefault((bug, dtype, expected[dtype]), []).append(verdict == "fail")
                    lines = (r.stdout + r.stderr).strip().splitlines()
                    summary = lines[-1].split("): ")[-1] if lines else ""
                    print(f"{case.name:14} {dtype:5} {attn:9} {experts:10} {bug:16} {expected[dtype]:8} {verdict:8} {summary}"
                          + ("" if ok else "   <-- UNEXPECTED"), flush=True)
        unexpected += check_real(args, Path(work)) if args.real else 0
        total += len(REAL_RUNS) * len(real_goldens(args)) if args.real else 0
    print("\nplanted bugs: goldens that caught each, per dtype")
    for (bug, dtype, expected), fails in caught.items():
        if bug == "none":
            continue
        missed = expected == "fail" and not any(fails)
        unexpected += 1 if missed else 0
        print(f"  {bug:16} {dtype:5} {sum(fails)}/{len(fails)} cases fail   expected: {expected}"
              + ("   <-- NOT CAUGHT" if missed else ""))
    print(f"{'PASS' if unexpected == 0 else 'FAIL'}: {total} candidates, "
          f"{'every verdict as expected' if unexpected == 0 else f'{unexpected} unexpected'}")
    return 0 if unexpected == 0 else 1


def real_goldens(args: argparse.Namespace) -> list[Path]:
    names = [f"{g}.{d}.h5" for g in args.real_geometries.split(",") for d in args.dtypes.split(",")]
    return [args.real / n for n in names if (args.real / n).is_file()]


def check_real(args: argparse.Namespace, work: Path) -> int:
    """The real-size rows; returns how many verdicts were not the expected one."""
    import hf_real_cases as real
    unexpected = 0
    for golden in real_goldens(args):
        geometry, dtype = golden.name.split(".")[:2]
        full_width = geometry.endswith("-full-width")
        for (attn, bug), expected in REAL_RUNS.items():
            path = work / f"real-{geometry}-{dtype}-{attn}-{bug}.h5"
            real.candidate(geometry.removesuffix("-full-width"), dtype, path, args.device, real.SEED, attn, bug,
                           full_width=full_width)
            r = subprocess.run([str(args.cli), "golden", "check", "--quiet", str(golden), str(path)],
                               capture_output=True, text=True)
            verdict = {0: "pass", 1: "fail"}.get(r.returncode, f"exit {r.returncode}")
            unexpected += 0 if verdict == expected else 1
            lines = (r.stdout + r.stderr).strip().splitlines()
            summary = lines[-1].split("): ")[-1] if lines else ""
            print(f"{'real/' + geometry:14} {dtype:5} {attn:9} {'eager':10} {bug:16} {expected:8} {verdict:8} {summary}"
                  + ("" if verdict == expected else "   <-- UNEXPECTED"), flush=True)
    return unexpected


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
