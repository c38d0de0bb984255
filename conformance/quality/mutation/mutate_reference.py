#!/usr/bin/env python3
"""Mutation testing of the conformance suite against the reference's own source.

One small textual change at a time in reference/*.cpp (operator, constant, index, comparison),
an incremental rebuild of gemma4-conform in a private clone, and `gemma4-conform conform
--backend reference` in f32: every mutant that builds and is not equivalent should be killed.
See conformance/quality/mutation/README.md. Standard library only.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import random
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List

sys.path.insert(0, str(Path(__file__).resolve().parent))
from campaign import (TARGET, VERDICTS, Campaign, Interrupted, _raise_interrupt, git, line_of, log, now,  # noqa: E402
                      write_json_atomic)
from mutants import Candidate, candidates_for  # noqa: E402

REPORT_VERSION = 1
DEFAULT_WORKDIR = "/tmp/gemma4-mutation"
SCRIPT_REPO = Path(__file__).resolve().parents[3]


# ------------------------------------------------------------------------------------------------
# Summary
# ------------------------------------------------------------------------------------------------

def summarize(mutants: List[dict]) -> dict:
    per_file: Dict[str, Dict[str, int]] = {}
    for m in mutants:
        row = per_file.setdefault(m["file"], {v: 0 for v in VERDICTS})
        row[m["verdict"]] = row.get(m["verdict"], 0) + 1
    tot = {v: sum(r[v] for r in per_file.values()) for v in VERDICTS}

    def score(r):
        k = r["killed"] + r["timeout"]
        d = k + r["unit_tests"] + r["survived"]
        return {"killed": k, "judged": d, "score": (k / d) if d else None,
                "score_with_unit_tests": ((k + r["unit_tests"]) / d) if d else None}

    undetected = [{"id": m["id"], "verdict": m["verdict"], "where": "%s:%d" % (m["file"], m["line"]),
                   "operator": m["operator"], "change": "%s -> %s" % (m["original"], m["replacement"] or "<removed>"),
                   "before": m["line_before"].strip(), "after": m["line_after"].strip()}
                  for m in mutants if m["verdict"] in ("survived", "unit_tests")]
    return {"per_file": {f: dict(r, **score(r)) for f, r in sorted(per_file.items())},
            "totals": dict(tot, **score(tot)), "undetected": undetected}


def print_summary(summary: dict) -> None:
    log()
    log("%-32s %6s %6s %6s %7s %8s %6s %6s  %s" % ("file", "killed", "tmout", "unit", "surviv", "build_f",
                                                    "equiv", "total", "conform score"))
    rows = list(summary["per_file"].items()) + [("TOTAL", summary["totals"])]
    for f, r in rows:
        total = sum(r[v] for v in VERDICTS)
        sc = "%d/%d = %.1f%%" % (r["killed"], r["judged"], 100.0 * r["score"]) if r["judged"] else "-"
        log("%-32s %6d %6d %6d %7d %8d %6d %6d  %s" % (f, r["killed"] - r["timeout"], r["timeout"], r["unit_tests"],
                                                       r["survived"], r["build_failed"], r["equivalent"], total, sc))
    t = summary["totals"]
    log()
    if t["judged"]:
        log("mutation score of conform: %d killed / %d judged = %.1f%%; with the reference's unit tests: %.1f%%"
            % (t["killed"], t["judged"], 100 * t["score"], 100 * t["score_with_unit_tests"]))
        log("(timeouts count as killed; build failures and object-identical mutants are not judged)")
    for title, key in (("killed only by the reference's unit tests (conform passed):", "unit_tests"),
                       ("survivors (judge each: equivalent, or a gap in the suite):", "survived")):
        rows = [m for m in summary["undetected"] if m["verdict"] == key]
        if rows:
            log()
            log(title)
        for m in rows:
            log("  %s  [%s %s]" % (m["where"], m["operator"], m["change"]))
            log("      before: %s" % m["before"])
            log("      after:  %s" % m["after"])


# ------------------------------------------------------------------------------------------------
# main
# ------------------------------------------------------------------------------------------------

def parse_args(argv: List[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="mutate_reference.py",
        description="Mutation testing of `gemma4-conform conform --backend reference` against the "
                    "reference's own source: one textual mutation at a time (operator, constant, index, "
                    "comparison) in a private clone, rebuild of gemma4-conform, conform in f32. Every "
                    "mutant that builds and is not equivalent should be killed. The repository's own "
                    "checkout is never modified.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("files", nargs="*",
                   help="source files to mutate, relative to the repository root (default: every .cpp "
                        "under reference/ except reference/tests/)")
    p.add_argument("--list", action="store_true", help="print the candidate mutations (after --include/"
                   "--exclude and sampling) and their count per file, and exit; builds and runs nothing")
    p.add_argument("--setup-only", action="store_true",
                   help="prepare the clone and its build, run the unmutated suite once, and stop (no report)")
    p.add_argument("--max-mutants", type=int, default=0, metavar="N",
                   help="run at most N mutants: a seeded random sample when there are more candidates (0: all)")
    p.add_argument("--sample-seed", type=int, default=1, metavar="S", help="seed of that sample (reproducible)")
    p.add_argument("--mutant", action="append", metavar="ID",
                   help="run exactly this candidate, by the id a report gives it (mutants[].id, e.g. "
                        "reference/config.cpp:180:24:comparison:<); repeatable; replaces sampling. For "
                        "judging a campaign's survivors again after tests were added")
    p.add_argument("--include", metavar="REGEX", help="only files whose path matches REGEX (re.search)")
    p.add_argument("--exclude", metavar="REGEX", help="leave out files whose path matches REGEX")
    p.add_argument("--operators", metavar="LIST",
                   help="only these mutation operators, comma-separated: arithmetic, comparison, logical, "
                        "boolean, constant, offset, float_constant, sign_flip, unary_minus, negation")
    p.add_argument("--workdir", default=DEFAULT_WORKDIR, metavar="DIR",
                   help="where the private clone (DIR/src), its build (DIR/build) and logs live")
    p.add_argument("--commit", default="HEAD", metavar="REV", help="the revision of the repository to mutate")
    p.add_argument("--torch-prefix", metavar="DIR",
                   help="LibTorch's CMake prefix (default: from the repository's .venv/bin/python)")
    p.add_argument("--shared-dir", metavar="DIR",
                   help="only for commits before the released configs moved into reference/configs: the "
                        "folder holding configs/ (passed to conform as GEMMA4_SHARED_DIR)")
    p.add_argument("--build-type", default="RelWithDebInfo", help="CMAKE_BUILD_TYPE of the mutation build "
                   "(the project's default)")
    p.add_argument("--with-cuda-backend", action="store_true",
                   help="also build the fused CUDA backend when nvcc is found (off: it is not under test, "
                        "and nvcc would add many minutes to the first build)")
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 2, help="parallel build jobs")
    p.add_argument("--dtype", default="f32", choices=["f32", "bf16", "f16"], help="conform --dtype")
    p.add_argument("--timeout", type=float, default=0, metavar="SECONDS",
                   help="limit per conform run; a mutant that exceeds it is 'timeout' (counted as killed). "
                        "0: max(120, 10 x the unmutated run)")
    p.add_argument("--memory-limit-gb", type=float, default=8.0,
                   help="RLIMIT_DATA of each conform run, so that a mutant that allocates without bound "
                        "crashes instead of pushing the machine into swap or the OOM killer (0: none)")
    p.add_argument("--float-factor", type=float, default=2.0,
                   help="a floating literal x becomes x * this (0.0 becomes 1.0); e.g. 1.01 for subtle changes")
    p.add_argument("--include-messages", action="store_true",
                   help="also mutate inside `throw ...;` and TORCH_CHECK messages (off: those change only "
                        "error text)")
    p.add_argument("--report", metavar="FILE.json", help="JSON report (default: WORKDIR/report.json); "
                   "rewritten after every mutant")
    p.add_argument("--resume", action="store_true",
                   help="continue the campaign in --report: mutants already judged there are not run again")
    p.add_argument("--no-unit-tests", dest="unit_tests", action="store_false",
                   help="do not run the reference's unit tests (test_reference) on mutants that conform passes")
    p.add_argument("--recheck", action="store_true",
                   help="with --resume: run again the mutants that survived or were killed only by unit tests "
                        "(after tests were added)")
    p.add_argument("--keep-logs", action="store_true",
                   help="keep the conform output of every mutant (default: only survivors, timeouts, crashes)")
    p.add_argument("--repo", default=str(SCRIPT_REPO), help="the repository (default: the one holding this script)")
    return p.parse_args(argv)


def select_files(repo: Path, commit: str, args: argparse.Namespace) -> List[str]:
    if args.files:
        files = []
        for f in args.files:
            p = Path(f)
            if p.is_absolute():
                try:
                    p = p.resolve().relative_to(repo.resolve())
                except ValueError:
                    sys.exit("error: %s is not inside %s" % (f, repo))
            files.append(p.as_posix())
    else:
        listing = git(repo, "ls-tree", "-r", "--name-only", commit, "reference/").split()
        files = [f for f in listing if f.endswith(".cpp") and not f.startswith("reference/tests/")]
    if args.include:
        files = [f for f in files if re.search(args.include, f)]
    if args.exclude:
        files = [f for f in files if not re.search(args.exclude, f)]
    return sorted(dict.fromkeys(files))


def main(argv: List[str]) -> int:
    args = parse_args(argv)
    repo = Path(args.repo).resolve()
    try:
        commit = git(repo, "rev-parse", "--verify", args.commit + "^{commit}").strip()
    except subprocess.CalledProcessError as e:
        sys.exit("error: %s: %s" % (args.commit, e.stderr.strip()))
    files = select_files(repo, commit, args)
    if not files:
        sys.exit("error: no source files selected")
    sources: Dict[str, bytes] = {}
    all_cands: List[Candidate] = []
    per_file_count: Dict[str, int] = {}
    ops = set(args.operators.split(",")) if args.operators else None
    for f in files:
        try:
            data = subprocess.run(["git", "-C", str(repo), "show", "%s:%s" % (commit, f)], check=True,
                                  capture_output=True).stdout
        except subprocess.CalledProcessError:
            sys.exit("error: %s is not in commit %s" % (f, commit[:12]))
        sources[f] = data
        cands = candidates_for(f, data.decode("utf-8"), args.float_factor, args.include_messages)
        if ops:
            cands = [c for c in cands if c.operator in ops]
        per_file_count[f] = len(cands)
        all_cands.extend(cands)

    selected = all_cands
    if args.mutant:
        by_id = {c.id: c for c in all_cands}
        unknown = [m for m in args.mutant if m not in by_id]
        if unknown:
            sys.exit("error: --mutant: no candidate %s at commit %s (the line or column moved?)"
                     % (", ".join(unknown), commit[:12]))
        selected = [by_id[m] for m in dict.fromkeys(args.mutant)]
    elif args.max_mutants and len(all_cands) > args.max_mutants:
        rng = random.Random(args.sample_seed)
        # In the sample's random order, so that a campaign stopped early is still a fair sample.
        idx = rng.sample(range(len(all_cands)), args.max_mutants)
        selected = [all_cands[i] for i in idx]

    if args.list:
        for c in selected:
            text = sources[c.file].decode("utf-8")
            log("%s:%d:%d  %-14s %r -> %r   | %s" % (c.file, c.line, c.col, c.operator, c.original,
                                                     c.replacement, line_of(text, c.line).strip()))
        log()
        log("candidates per file (commit %s):" % commit[:12])
        for f in files:
            log("  %-34s %5d" % (f, per_file_count[f]))
        log("  %-34s %5d" % ("total", len(all_cands)))
        if selected is not all_cands:
            log("  sampled (--max-mutants %d, --sample-seed %d): %d" % (args.max_mutants, args.sample_seed,
                                                                       len(selected)))
        return 0

    if args.shared_dir is not None:
        args.shared_dir = str(Path(args.shared_dir).resolve())
        if not (Path(args.shared_dir) / "configs").is_dir():
            sys.exit("error: %s/configs not found (--shared-dir)" % args.shared_dir)

    camp = Campaign(args, repo, commit)
    camp.check_workdir_safe()
    report_path = Path(args.report).resolve() if args.report else camp.workdir / "report.json"
    camp.workdir.mkdir(parents=True, exist_ok=True)
    lock = open(camp.workdir / "lock", "w")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        sys.exit("error: another campaign is running in %s" % camp.workdir)

    done: Dict[str, dict] = {}
    report: dict = {}
    if args.resume:
        if not report_path.exists():
            sys.exit("error: --resume: %s does not exist" % report_path)
        report = json.loads(report_path.read_text())
        if report.get("commit") != commit:
            # Another commit is fine when the mutated files are the same there (tests added since).
            changed = subprocess.run(["git", "-C", str(repo), "diff", "--quiet", report.get("commit", ""), commit,
                                      "--", *files], capture_output=True).returncode
            if changed != 0:
                sys.exit("error: --resume: %s was made at commit %s, where %s differ from this run's commit %s: "
                         "line numbers would not match (use another --report, or --commit %s)"
                         % (report_path, report.get("commit"), " ".join(files), commit, report.get("commit")))
            log("resuming a campaign of commit %s at %s: the mutated files are identical" % (report["commit"][:12],
                                                                                           commit[:12]))
            report["commit"] = commit
        done = {m["id"]: m for m in report.get("mutants", [])}
        if args.recheck:
            # Judge again what the suite let through, after tests were added.
            done = {k: m for k, m in done.items() if m["verdict"] not in ("survived", "unit_tests")}
        log("resuming %s: %d mutants already judged" % (report_path, len(done)))
    elif report_path.exists() and not args.setup_only:
        sys.exit("error: %s exists; pass --resume to continue it, or another --report" % report_path)

    signal.signal(signal.SIGTERM, _raise_interrupt)
    signal.signal(signal.SIGHUP, _raise_interrupt)

    started = time.monotonic()
    todo = [c for c in selected if c.id not in done]
    report.update({
        "tool": "conformance/quality/mutation/mutate_reference.py", "version": REPORT_VERSION, "commit": commit,
        "updated": now(), "command": [sys.argv[0], *argv],
        "options": {k: v for k, v in vars(args).items() if k not in ("list", "resume")},
        "workdir": str(camp.workdir),
        "candidates_per_file": {**report.get("candidates_per_file", {}), **per_file_count},
        "candidates_total": len(all_cands), "selected": len(selected),
    })
    report.setdefault("started", now())
    mutants: List[dict] = list(done.values())

    def save():
        report["mutants"] = mutants
        report["summary"] = summarize(mutants)
        report["updated"] = now()
        write_json_atomic(report_path, report)

    interrupted = False
    camp.running = False
    try:
        camp.prepare_tree()
        camp.configure()
        log("building %s (first time: LibTorch-heavy, long on 2 cores) ..." % TARGET)
        ok, secs = camp.build_target("build-baseline.log")
        if not ok:
            sys.exit("error: the unmutated tree does not build (%s):\n%s"
                     % (camp.logs / "build-baseline.log", "\n".join(tail(camp.logs / "build-baseline.log", 30))))
        log("built in %.0f s" % secs)
        for f in sorted({c.file for c in todo}):
            h = camp.object_code_hash(f)
            if h:
                camp.pristine_obj[f] = h
        log("unmutated run of conform ...")
        base = camp.conform("baseline", timeout=1800)
        if base["exit_code"] != 0:
            sys.exit("error: conform fails on the unmutated tree (exit %s, see %s): %s"
                     % (base["exit_code"], base["log"], base.get("first_failure") or base.get("output_tail")))
        timeout = args.timeout if args.timeout > 0 else max(120.0, 10 * base["conform_seconds"])
        report["baseline"] = {"build_seconds": round(secs, 1), "conform_seconds": base["conform_seconds"],
                              "checks": base.get("checks"), "timeout_used": timeout}
        log("unmutated: %s checks pass in %.1f s; timeout per mutant %.0f s" % (base.get("checks"),
                                                                              base["conform_seconds"], timeout))
        if args.setup_only:
            log("setup done: %s builds and passes; no mutants run (--setup-only)" % camp.build)
            return 0
        save()
        log("%d candidates in %d files, %d selected, %d to run" % (len(all_cands), len(files), len(selected),
                                                                   len(todo)))
        width = len(str(len(selected)))
        position = {c.id: k + 1 for k, c in enumerate(selected)}
        camp.running = True
        for c in todo:
            rec = camp.run_mutant(c, sources[c.file], timeout)
            rec["index"] = position[c.id]
            mutants.append(rec)
            save()
            why = ""
            if rec["verdict"] in ("killed", "timeout") and rec.get("failed_categories"):
                why = " (" + ", ".join("%s:%d" % kv for kv in rec["failed_categories"].items()) + ")"
            if rec.get("note"):
                why += " [" + rec["note"] + "]"
            times = "build %.0fs" % rec.get("build_seconds", 0)
            if "conform_seconds" in rec:
                times += " conform %.1fs" % rec["conform_seconds"]
            log("[%*d/%d] %s:%d %-13s %r -> %r  %s%s  %s, %.0fs" % (
                width, position[c.id], len(selected), c.file, c.line, c.operator, c.original,
                c.replacement, rec["verdict"].upper(), why, times, rec["seconds"]))
    except (KeyboardInterrupt, Interrupted):
        interrupted = True
        if camp.running:
            log("\ninterrupted: the mutated file is restored; continue with --resume --report %s" % report_path)
        else:
            log("\ninterrupted during setup")
            return 130
    finally:
        if not args.setup_only and (mutants or report.get("baseline")):
            report["elapsed_seconds_this_run"] = round(time.monotonic() - started, 1)
            save()
    summary = summarize(mutants)
    print_summary(summary)
    log()
    log("report: %s" % report_path)
    return 130 if interrupted else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
