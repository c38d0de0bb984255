#!/usr/bin/env python3
"""The suite's power in one category (golden/FORMAT.md, "Power at real size"): for every faulty backend
that declares it, the largest ratio of error to bound its results reached there, per report and dtype,
beside the worst legitimate ratio. A faulty ratio above 1 is a failure (the bug caught); at or below 1
the bug passed. Reads `conform --report` and `calibrate --report` files (conformance/report.h), each
row's ratio by the report module's own rule (_core.Result.ratio).

    python conformance/quality/power_table.py [--category real_size] [--markdown] LABEL=REPORT.json...

LABEL names the report's column group ("CPU after", "H200 before"); a backend or dtype a report does
not hold is "-". Needs the package (PYTHONPATH=build/python, or installed).
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from collections import defaultdict


def ratios(report: dict, category: str) -> dict[tuple[str, str], tuple[float, str]]:
    """(subject, dtype) -> (largest ratio over its rows in `category`, where)."""
    from gemma4_conform import _core

    out: dict[tuple[str, str], tuple[float, str]] = {}
    for run in report.get("runs", []):
        key = (run["subject"].split(",")[0], run.get("dtype", ""))
        best = out.get(key, (0.0, ""))
        if run.get("error"):
            best = (math.inf, "run error: " + run["error"][:60])
        for row in run.get("results", []):
            if row.get("category") != category or row.get("status") == "not_supported":
                continue
            ratio = _core.Result.from_dict(row).ratio()
            if ratio >= best[0]:
                best = (ratio, f"{row['test'].split('/', 1)[-1]} {row['case']}")
        if any(r.get("category") == category for r in run.get("results", [])) or run.get("error"):
            out[key] = best
    return out


def fmt(ratio: float | None) -> str:
    if ratio is None:
        return "-"
    return "fails" if math.isinf(ratio) else f"{ratio:.3g}"


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("reports", nargs="+", metavar="LABEL=REPORT.json")
    p.add_argument("--category", default="real_size")
    p.add_argument("--markdown", action="store_true", help="a markdown table (passing faulty ratios in bold)")
    p.add_argument("--all", action="store_true", help="also the faulty backends that do not declare the category")
    args = p.parse_args(argv)
    from gemma4_conform import _core

    kinds = {b["name"]: b for b in _core.builtin_backends()}
    columns, cells = [], defaultdict(dict)  # cells[subject][(label, dtype)] = (ratio, where)
    for spec in args.reports:
        label, _, path = spec.rpartition("=")
        with open(path) as f:
            for (subject, dtype), value in ratios(json.load(f), args.category).items():
                if (label, dtype) not in columns:
                    columns.append((label, dtype))
                held = cells[subject].get((label, dtype))  # several reports of a label: the largest
                if held is None or value[0] > held[0]:
                    cells[subject][(label, dtype)] = value
    legit = [s for s in cells if kinds.get(s, {}).get("kind") in ("reference", "fused", "variant")]
    faulty = sorted(s for s in cells if kinds.get(s, {}).get("kind") == "faulty"
                    and (args.all or args.category in kinds[s]["fails_in"]))
    header = ["backend"] + [f"{label} {dtype}" for label, dtype in columns]
    rows = []
    worst = []
    for col in columns:
        values = [cells[s][col] for s in legit if col in cells[s]]
        worst.append(max(values, default=None, key=lambda v: v[0]))
    rows.append(["worst legitimate"] + [fmt(w[0]) if w else "-" for w in worst])
    for s in faulty:
        notes = [n for n, on in (("below bf16/f16 resolution", kinds[s]["below_reduced_precision"]),
                                  (f"does not declare {args.category}", args.category not in kinds[s]["fails_in"])) if on]
        row = [s + (f" ({'; '.join(notes)})" if notes else "")]
        for col in columns:
            value = cells[s].get(col)
            text = fmt(value[0] if value else None)
            row.append(f"**{text}**" if args.markdown and value and value[0] <= 1 else text)
        rows.append(row)
    if args.markdown:
        print("| " + " | ".join(header) + " |\n|" + "---|" * len(header))
        for row in rows:
            print("| " + " | ".join(row) + " |")
    else:
        widths = [max(len(r[i]) for r in [header] + rows) for i in range(len(header))]
        for row in [header] + rows:
            print("  ".join(c.ljust(w) for c, w in zip(row, widths)))
    for (label, dtype), w in zip(columns, worst):
        if w:
            print(f"worst legitimate, {label} {dtype}: {fmt(w[0])} at {w[1]}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
