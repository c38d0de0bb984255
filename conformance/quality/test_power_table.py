#!/usr/bin/env python3
"""power_table.py on two made-up reports in the report module's schema: each faulty backend's largest
ratio per report and dtype (a failing row with no bound counts as "fails"), the worst legitimate
ratio, a declared backend that passed in bold; rows outside the category are ignored. Negative
control: a report whose faulty row is moved below its bound shows the pass. Two reports under one
label show the larger ratio, whichever comes first."""
from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

TOOL = Path(__file__).resolve().parent / "power_table.py"


def row(test: str, value: float, bound: float, status: str, category: str = "real_size") -> dict:
    return {"test": test, "category": category, "case": "grads/norm.weight", "status": status, "metric": "rms",
            "value": value, "bound": bound, "baseline": 0.0, "detail": ""}


def report(ratio_window: float) -> dict:
    return {"tool": "conform", "passed": False, "runs": [
        {"subject": "reference, cpu, bf16", "dtype": "bf16", "results": [row("real_size/golden/e2b", 0.2, 1.0, "pass")]},
        {"subject": "faulty-global-window, cpu, bf16", "dtype": "bf16",
         "results": [row("real_size/golden/e2b", ratio_window, 1.0, "fail" if ratio_window > 1 else "pass"),
                     row("golden/model/e2b", 500.0, 1.0, "fail", "golden")]},
        {"subject": "faulty-no-window, cpu, bf16", "dtype": "bf16",
         "results": [row("real_size/decode/e2b", float("nan"), 0.0, "fail")]},
    ]}


def table(*reports: dict, labels: list[str] | None = None) -> str:
    with tempfile.TemporaryDirectory() as tmp:
        paths = []
        for i, r in enumerate(reports):
            path = Path(tmp) / f"r{i}.json"
            path.write_text(json.dumps(r))
            paths.append(f"{labels[i] if labels else f'run{i}'}={path}")
        done = subprocess.run([sys.executable, str(TOOL), "--markdown", *paths], capture_output=True, text=True)
        if done.returncode:
            raise SystemExit(done.stderr)
        return done.stdout


def rows_of(out: str) -> dict[str, list[str]]:
    return {line.split("|")[1].strip(): [c.strip() for c in line.split("|")[2:-1]] for line in out.splitlines()
            if line.startswith("| ") and not line.startswith("| backend")}


def main() -> int:
    out = table(report(37.5), report(0.5))
    merged = rows_of(table(report(37.5), report(0.5), labels=["one", "one"]))
    print(out)
    lines = rows_of(out)
    checks = [
        (merged.get("faulty-global-window") == ["37.5"], "one label, two reports: the larger ratio (37.5, not the later 0.5)"),
        (lines.get("worst legitimate") == ["0.2", "0.2"], "worst legitimate 0.2 in both"),
        (lines.get("faulty-global-window") == ["37.5", "**0.5**"], "global-window 37.5, then a pass in bold"),
        (lines.get("faulty-no-window") == ["fails", "fails"], "a failing row without a ratio is 'fails'"),
    ]
    for ok, what in checks:
        print(f"{'ok  ' if ok else 'FAIL'} {what}")
    return 0 if all(ok for ok, _ in checks) else 1


if __name__ == "__main__":
    sys.exit(main())
