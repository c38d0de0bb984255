#!/usr/bin/env python3
"""The GPU CI's result files, from the runs a stage recorded (ci/gpu/common.sh `record`).

    ci/gpu/results.py stage DIR NAME SECONDS   DIR/results.tsv -> DIR/junit.xml, DIR/summary.json,
                                               DIR/summary.txt (its first line: the stage's one-line
                                               summary, also printed); exit 0 when the stage passed
                                               or was skipped, 1 when a run failed or was not run
    ci/gpu/results.py merge OUT STAGE... [--not-run STAGE=REASON]...
                                               OUT/STAGE/summary.json -> OUT/junit.xml (one testsuite
                                               per stage; a stage that did not start: a failing one
                                               with why) and OUT/summary.json
    ci/gpu/results.py failures REPORT.json     how many checks a conform report holds failing (read by
                                               the package's Report, the report's one reader);
                                               exit 0 when at least one, 1 when none or unreadable (the
                                               mutations step: a mutant is caught only by a failing check)

results.tsv: one run a line, tab-separated: step, run, verdict (pass, fail, skipped, not-run),
exit code, expected exit code, seconds, detail, log (relative to DIR).

JUnit goes through the project's one report module (conformance/report.h, gemma4_conform._core):
a stage is a run of the report, each GPU run a row (skipped: not supported; not run: a failure).
Where the Python module was not built (the build failed), no junit.xml is written and the summary
says so; the stage's exit status still tells.
"""
import argparse
import json
import os
import sys

FIELDS = ("step", "run", "verdict", "exit", "expected", "seconds", "detail", "log")


def read_runs(directory):
    path = os.path.join(directory, "results.tsv")
    runs = []
    if os.path.exists(path):
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                parts = line.rstrip("\n").split("\t")
                if len(parts) < len(FIELDS):
                    parts += [""] * (len(FIELDS) - len(parts))
                runs.append(dict(zip(FIELDS, parts[: len(FIELDS)])))
    return runs


def seconds(value):
    try:
        return float(value)
    except ValueError:
        return 0.0


def stage_verdict(name, runs, elapsed):
    counts = {v: sum(r["verdict"] == v for r in runs) for v in ("pass", "fail", "skipped", "not-run")}
    if counts["fail"]:
        verdict = "FAIL"
    elif counts["not-run"]:
        verdict = "INCOMPLETE"
    elif runs and counts["skipped"] == len(runs):
        verdict = "skipped"
    elif not runs:
        verdict = "FAIL"  # a stage that recorded nothing did not run
    else:
        verdict = "pass"
    if verdict == "skipped":
        reasons = sorted({r["detail"] for r in runs})
        line = f"{name}: skipped: {'; '.join(reasons)}"
    elif not runs:
        line = f"{name}: FAIL: no run recorded ({elapsed} s)"
    else:
        parts = [f"{counts['pass']} pass", f"{counts['fail']} fail"]
        if counts["skipped"]:
            parts.append(f"{counts['skipped']} skipped")
        if counts["not-run"]:
            parts.append(f"{counts['not-run']} not run")
        line = f"{name}: {verdict} ({', '.join(parts)}; {elapsed} s)"
        failed = [f"{r['step']}/{r['run']}" for r in runs if r["verdict"] == "fail"]
        if failed:
            line += "; failed: " + ", ".join(failed[:6]) + (f" and {len(failed) - 6} more" if len(failed) > 6 else "")
        not_run = [r["run"] for r in runs if r["verdict"] == "not-run"]
        if not_run:
            line += "; not run: " + ", ".join(not_run[:6]) + (f" and {len(not_run) - 6} more" if len(not_run) > 6 else "")
    return verdict, counts, line


def stage_run(name, runs, elapsed, error=""):
    """One stage as a run of the project's report (conformance/report.h): a row per GPU run."""
    status = {"pass": "pass", "fail": "fail", "skipped": "not_supported", "not-run": "fail"}
    rows = []
    for r in runs:
        detail = f"exit {r['exit']} (expected {r['expected']}): {r['detail']}"
        if r["verdict"] == "not-run":
            detail = f"not run: {r['detail']}"
        elif r["verdict"] == "skipped":
            detail = r["detail"]
        if r["log"]:
            detail += f" (log: {r['log']})"
        rows.append({"test": f"{r['step']}/{r['run']}", "case": "", "status": status.get(r["verdict"], "fail"),
                     "metric": "", "value": 0, "bound": 0, "detail": detail})
    return {"subject": f"gpu-{name}", "device": "", "dtype": "", "seconds": elapsed, "error": error,
            "results": rows}


def write_junit(runs, path):
    """JUnit XML through the report module; False where the Python module is not built."""
    try:
        from gemma4_conform import _core
    except ImportError as e:
        print(f"no {path}: gemma4_conform._core cannot be imported ({e}); was the build run?", file=sys.stderr)
        return False
    _core.write_junit({"tool": "gpu-ci", "runs": runs}, path)
    return True


def stage(args):
    runs = read_runs(args.dir)
    verdict, counts, line = stage_verdict(args.name, runs, args.seconds)
    write_junit([stage_run(args.name, runs, args.seconds)], os.path.join(args.dir, "junit.xml"))
    with open(os.path.join(args.dir, "summary.json"), "w") as f:
        json.dump({"stage": args.name, "verdict": verdict, "seconds": args.seconds, "counts": counts,
                   "summary": line, "runs": runs}, f, indent=1)
    with open(os.path.join(args.dir, "summary.txt"), "w") as f:
        f.write(line + "\n")
        for r in runs:
            f.write(f"  {r['verdict']:8} {r['step'] + '/' + r['run']:50} exit {r['exit']:>4} (expected {r['expected']}), "
                    f"{r['seconds']:>5} s  {r['detail']}\n")
    print(line)
    return 0 if verdict in ("pass", "skipped") else 1


def merge(args):
    runs = []
    summary = {"stages": []}
    for item in args.not_run:  # STAGE=REASON: a stage that did not start
        name, _, reason = item.partition("=")
        runs.append(stage_run(name, [], 0, error=f"not run: {reason}"))
        summary["stages"].append({"stage": name, "verdict": "NOT RUN", "summary": f"{name}: not run: {reason}"})
    for name in args.stages:
        path = os.path.join(args.out, name, "summary.json")
        if not os.path.exists(path):
            runs.append(stage_run(name, [], 0, error="no summary.json: the stage did not finish"))
            continue
        with open(path) as f:
            entry = json.load(f)
        runs.append(stage_run(name, entry.pop("runs", []), entry.get("seconds", 0)))
        summary["stages"].append(entry)
    write_junit(runs, os.path.join(args.out, "junit.xml"))
    with open(os.path.join(args.out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
    return 0


def failures(args):
    try:
        from gemma4_conform import Report
        with open(args.report) as f:
            failing = Report.from_dict(json.load(f)).failures
    except (ImportError, OSError, ValueError, KeyError, TypeError, RuntimeError) as e:
        print(f"{args.report}: no failing check read ({type(e).__name__}: {e})")
        return 1
    print(f"{args.report}: {len(failing)} failing check(s)")
    return 0 if failing else 1


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    p = commands.add_parser("stage", help="one stage's results.tsv into junit.xml, summary.json, summary.txt")
    p.add_argument("dir")
    p.add_argument("name")
    p.add_argument("seconds", type=int)
    p.set_defaults(func=stage)
    p = commands.add_parser("merge", help="the stages' summary.json into OUT's junit.xml and summary.json")
    p.add_argument("out")
    p.add_argument("stages", nargs="*")
    p.add_argument("--not-run", action="append", default=[], metavar="STAGE=REASON",
                   help="a stage that did not start, with why (an error testcase)")
    p.set_defaults(func=merge)
    p = commands.add_parser("failures", help="whether a conform report holds a failing check")
    p.add_argument("report")
    p.set_defaults(func=failures)
    args = parser.parse_args()
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
