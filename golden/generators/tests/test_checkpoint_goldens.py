#!/usr/bin/env python3
"""checkpoint_goldens.py on a checkpoint saved from the constructed E2B (a stand-in for a released
one, which is not here): the f32 golden it makes equals the committed golden/real/e2b.f32.h5 in
every dataset (the same weights, inputs and computation; only where the weights come from differs),
the reference passes it through `conform --golden-dir` and faulty-no-window fails it; the file
without its checkpoint directory is refused in one line naming the directory.

    python golden/generators/tests/test_checkpoint_goldens.py --cli build/bin/gemma4-conform
"""
from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

GENERATORS = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(GENERATORS))
REPO = GENERATORS.parents[1]


def run(*cmd: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(c) for c in cmd], capture_output=True, text=True)


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cli", required=True)
    args = p.parse_args(argv)
    import hf_real_cases as real

    failures = 0

    def report(ok: bool, what: str) -> None:
        nonlocal failures
        print(f"{'ok  ' if ok else 'FAIL'} {what}", flush=True)
        failures += not ok

    with tempfile.TemporaryDirectory() as tmp:
        checkpoint, goldens = Path(tmp) / "e2b-constructed", Path(tmp) / "goldens"
        real.build_model(real.real_config("e2b"), "f32", real.SEED, True, "cpu").save_pretrained(checkpoint)
        made = run(sys.executable, GENERATORS / "checkpoint_goldens.py", checkpoint, "--out", goldens / "real",
                   "--dtype", "f32")
        report(made.returncode == 0, f"checkpoint_goldens.py exit {made.returncode} {made.stderr[-300:]}")
        golden = goldens / "real" / "e2b-constructed.f32.h5"
        diff = run(args.cli, "golden", "diff", REPO / "golden" / "real" / "e2b.f32.h5", golden)
        summary = diff.stdout.strip().splitlines()[-1] if diff.stdout.strip() else diff.stderr
        attributes = {line.split(":")[0] for line in diff.stdout.splitlines() if line.startswith("attribute ")}
        report(" 0 differences" not in summary and "datasets identical" in summary and
               attributes <= {"attribute case", "attribute config", "attribute weights"} and
               not any(line.startswith(("only in", "grads/", "outputs/")) for line in diff.stdout.splitlines()),
               f"datasets equal to the committed constructed golden: {summary}")
        verdicts = run(args.cli, "conform", "--backend", "^(reference|faulty-no-window)$", "--golden-dir", goldens,
                       "--filter", "^real_size/golden/", "--expect-declared")
        judged = [line.split() for line in verdicts.stdout.splitlines() if " expected " in line]
        report(verdicts.returncode == 0 and "PASS: 2/2 judged runs as declared in real_size" in verdicts.stdout and
               [(words[0], words[4], words[5]) for words in judged] == [("reference,", "pass", "ok"),
                                                                       ("faulty-no-window,", "fail", "ok")],
               "reference passes, faulty-no-window fails: " + " | ".join(" ".join(w) for w in judged))
        shutil.rmtree(checkpoint)
        gone = run(args.cli, "golden", "verify", golden)
        report(gone.returncode != 0 and "no config.json" in gone.stdout + gone.stderr,
               "without its checkpoint: " + (gone.stdout + gone.stderr).strip().splitlines()[0][:160])
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
