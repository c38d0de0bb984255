#!/usr/bin/env python3
"""The GPU CI's result files, from the runs a stage recorded (ci/gpu/common.sh `record`).

    ci/gpu/results.py stage DIR NAME SECONDS   DIR/results.tsv -> DIR/junit.xml, DIR/summary.json,
                                               DIR/summary.txt (its first line: the stage's one-line
                                               summary, also printed); exit 0 when the stage passed
                                               or was skipped, 1 when a run failed or was not run
    ci/gpu/results.py merge OUT STAGE... [--not-run STAGE=REASON]...
                                               OUT/STAGE/{junit.xml,summary.json} -> OUT/junit.xml (one
                                               testsuite per stage; a stage that did not start: one
                                               error testcase) and OUT/summary.json

results.tsv: one run a line, tab-separated: step, run, verdict (pass, fail, skipped, not-run),
exit code, expected exit code, seconds, detail, log (relative to DIR). Standard library only.
"""
import argparse
import json
import os
import sys
import xml.etree.ElementTree as ET

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


def log_tail(directory, log, lines=60):
    if not log:
        return ""
    path = os.path.join(directory, log)
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.readlines()[-lines:]
    except OSError:
        return ""
    # XML 1.0 cannot hold most control characters (a progress bar's \r is fine, \x1b is not).
    return "".join(ch for ch in "".join(text) if ch in "\t\n\r" or ch >= " ")


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


def junit_suite(name, directory, runs, elapsed):
    counts = {v: sum(r["verdict"] == v for r in runs) for v in ("fail", "skipped", "not-run")}
    suite = ET.Element("testsuite", name=f"gpu-{name}", tests=str(len(runs)), failures=str(counts["fail"]),
                       errors=str(counts["not-run"]), skipped=str(counts["skipped"]), time=str(elapsed))
    for r in runs:
        case = ET.SubElement(suite, "testcase", classname=f"gpu.{name}.{r['step']}", name=r["run"],
                             time=f"{seconds(r['seconds']):.0f}")
        message = f"exit {r['exit']} (expected {r['expected']}): {r['detail']}"
        if r["verdict"] == "fail":
            ET.SubElement(case, "failure", message=message).text = log_tail(directory, r["log"])
        elif r["verdict"] == "skipped":
            ET.SubElement(case, "skipped", message=f"skipped: {r['detail']}")
        elif r["verdict"] == "not-run":  # an error: the stage did not complete
            ET.SubElement(case, "error", message=f"not run: {r['detail']}")
        if r["log"]:
            ET.SubElement(case, "system-out").text = f"log: {r['log']}"
    return suite


def write_xml(root, path):
    ET.indent(root)
    ET.ElementTree(root).write(path, encoding="utf-8", xml_declaration=True)


def stage(args):
    runs = read_runs(args.dir)
    verdict, counts, line = stage_verdict(args.name, runs, args.seconds)
    write_xml(junit_suite(args.name, args.dir, runs, args.seconds), os.path.join(args.dir, "junit.xml"))
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
    suites = ET.Element("testsuites", name="gpu-ci")
    summary = {"stages": []}
    for item in args.not_run:  # STAGE=REASON: a stage that did not start
        name, _, reason = item.partition("=")
        suite = ET.SubElement(suites, "testsuite", name=f"gpu-{name}", tests="1", failures="0", errors="1",
                              skipped="0", time="0")
        case = ET.SubElement(suite, "testcase", classname=f"gpu.{name}", name=name, time="0")
        ET.SubElement(case, "error", message=f"not run: {reason}")
        summary["stages"].append({"stage": name, "verdict": "NOT RUN", "summary": f"{name}: not run: {reason}"})
    for name in args.stages:
        directory = os.path.join(args.out, name)
        junit = os.path.join(directory, "junit.xml")
        if os.path.exists(junit):
            suites.append(ET.parse(junit).getroot())
        path = os.path.join(directory, "summary.json")
        if os.path.exists(path):
            with open(path) as f:
                entry = json.load(f)
            entry.pop("runs", None)
            summary["stages"].append(entry)
    write_xml(suites, os.path.join(args.out, "junit.xml"))
    with open(os.path.join(args.out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
    return 0


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    p = commands.add_parser("stage", help="one stage's results.tsv into junit.xml, summary.json, summary.txt")
    p.add_argument("dir")
    p.add_argument("name")
    p.add_argument("seconds", type=int)
    p.set_defaults(func=stage)
    p = commands.add_parser("merge", help="the stages' junit.xml and summary.json into OUT's")
    p.add_argument("out")
    p.add_argument("stages", nargs="*")
    p.add_argument("--not-run", action="append", default=[], metavar="STAGE=REASON",
                   help="a stage that did not start, with why (an error testcase)")
    p.set_defaults(func=merge)
    args = parser.parse_args()
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
