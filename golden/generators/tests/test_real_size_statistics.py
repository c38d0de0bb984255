#!/usr/bin/env python3
"""The committed real-size goldens meet the trained-like criteria (golden/FORMAT.md, "Constructed
weights"), measured by `gemma4-conform golden inspect --check`; and the criteria can fail: the same
geometry made with plain generated weights (hf_real_cases.py --weights generated, written to a
temporary directory) misses the attention-entropy criteria.

    python golden/generators/tests/test_real_size_statistics.py --cli build/bin/gemma4-conform FILE...
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

GENERATORS = Path(__file__).resolve().parent.parent


def inspect(cli: str, files: list[str], json_path: Path) -> tuple[int, list[dict]]:
    done = subprocess.run([cli, "golden", "inspect", *files, "--check", "--json", str(json_path)],
                          capture_output=True, text=True)
    print(done.stdout[-3000:], end="", flush=True)
    if done.returncode not in (0, 1):
        raise SystemExit(f"golden inspect exited {done.returncode}: {done.stderr[-2000:]}")
    return done.returncode, json.loads(json_path.read_text())


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cli", required=True)
    p.add_argument("--geometry", default="e2b", help="the geometry of the negative control")
    p.add_argument("files", nargs="+", help="committed real-size goldens")
    args = p.parse_args(argv)
    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        code, files = inspect(args.cli, args.files, Path(tmp) / "committed.json")
        missed = [(f["path"], c["name"]) for f in files for c in f["criteria"] if not c["met"]]
        print(f"{'ok  ' if code == 0 and not missed else 'FAIL'} committed: {len(files)} files, criteria missed {missed}")
        failures += code != 0 or bool(missed)

        subprocess.run([sys.executable, str(GENERATORS / "hf_real_cases.py"), "--out", tmp, "--geometry", args.geometry,
                        "--dtype", "f32", "--weights", "generated"], check=True, capture_output=True)
        code, files = inspect(args.cli, [str(Path(tmp) / f"{args.geometry}.f32.h5")], Path(tmp) / "random.json")
        missed = [c["name"] for c in files[0]["criteria"] if not c["met"]]
        caught = code == 1 and any("entropy" in name for name in missed)
        print(f"{'ok  ' if caught else 'FAIL'} negative control, generated weights: exit {code}, missed {missed}")
        failures += not caught
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
