#!/usr/bin/env python3
"""Prints the medians of gemma4-bench JSON reports as a table: one line per benchmark, with its
time, TFLOP/s, GB/s, peak memory and label, or the reason it was skipped.

usage: bench/summarize.py REPORT.json...
       bench/summarize.py --counts REPORT.json    one line: how many benchmarks ran and were skipped
"""
import json
import sys


def cells(b):
    out = [f"{b['real_time']:10.3f} {b['time_unit']}"]
    for counter, fmt in (("TFLOP/s", "{:9.4g} TFLOP/s"), ("GB/s", "{:9.4g} GB/s"), ("peak_mem_GiB", "{:6.1f} GiB peak")):
        if counter in b:
            out.append(fmt.format(b[counter]))
    if b.get("label"):
        out.append(f"({b['label']})")
    return "  ".join(out)


def rows(report):
    """(name, text) per benchmark in report order: its median, else the reason it was skipped."""
    medians, errors, order = {}, {}, {}  # order: the names as first seen (a dict keeps insertion order)
    for b in report["benchmarks"]:
        name = b["run_name"].removesuffix("/manual_time")
        order.setdefault(name)
        if b.get("error_occurred"):
            errors.setdefault(name, "skipped: " + b.get("error_message", ""))
        elif b.get("aggregate_name") == "median" or b.get("repetitions", 1) == 1:
            medians[name] = cells(b)
    for name in order:
        yield name, medians.get(name, errors.get(name))


def counts(path):
    with open(path) as f:
        texts = [text for _, text in rows(json.load(f))]
    skipped = sum(1 for text in texts if text is None or text.startswith("skipped: "))
    return f"{len(texts)} benchmarks, {len(texts) - skipped} timed, {skipped} skipped"


def main(paths):
    if paths[:1] == ["--counts"]:
        print("; ".join(counts(path) for path in paths[1:]))
        return
    for path in paths:
        with open(path) as f:
            report = json.load(f)
        context = report["context"]
        print(f"== {path}: {context.get('gpu')} (driver {context.get('nvidia_driver')}), torch {context.get('torch')}, "
              f"git {context.get('git_sha')}")
        for name, text in rows(report):
            print(f"{name:58s} {text}")


if __name__ == "__main__":
    main(sys.argv[1:])
