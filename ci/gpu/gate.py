#!/usr/bin/env python3
"""The performance gate's checks around gemma4-bench and bench-compare (ci/gpu/bench.sh's baseline and
compare steps). Standard library only: it runs with the GPU host's python3.

    ci/gpu/gate.py idle [--seconds S]       is the GPU otherwise idle? No compute process, no
                                            utilisation over S seconds (default 2), little memory
                                            used. Exit 0 idle, 1 busy (why on stdout).
    ci/gpu/gate.py monitor DIR              what DIR/samples.csv and DIR/apps.csv (nvidia-smi, every
                                            500 ms during a benchmark run: common.sh gpu_monitor_start)
                                            saw: the SM clock, power, temperature, the throttle
                                            reasons, and every compute process that was not
                                            gemma4-bench. Exit 0 when the run had the GPU alone.
    ci/gpu/gate.py flagged COMPARE.json     the benchmarks bench-compare --json judged a regression,
                                            one per line, as anchored gemma4-bench filters
    ci/gpu/gate.py merge OUT.json IN.json...
                                            one report holding the repetitions of several gemma4-bench
                                            runs (the rounds of an interleaved re-measurement)
    ci/gpu/gate.py verdict DIR              the gate's verdict from DIR/bench-compare.json (the first
                                            pass), DIR/confirm-*-compare.json (each flagged benchmark
                                            re-measured on its own) and DIR/monitor*.txt: gate.txt and
                                            gate.json in DIR. Exit 0 no regression, 1 a confirmed
                                            regression or a run that did not have the GPU alone.
    ci/gpu/gate.py rates --cli CLI [--pooled] REPORT.json...
                                            the first pass's error rates, from gate runs of one
                                            commit (gemma4-bench reports): each ordered pair of runs
                                            on one GPU (gpu_uuid; --pooled: each run against all the
                                            others pooled) compared by bench-compare as they are (a
                                            flag is a false positive) and with every repetition of
                                            the judged run made 2.5-10% slower (a miss is a false
                                            negative): the measured noise, not a model of it
    ci/gpu/gate.py trials DIR --runs N [--mutant-benchmark RE] [--contended-first]
                                            gate_trials.sh's table of its runs' gate.json: exit 0
                                            when each ended as expected (no regression; RE
                                            reported every time; run 1 not judged)
    ci/gpu/gate.py load --seconds S         keeps the GPU busy with bf16 matmuls for S seconds (the
                                            contention experiment: ci/gpu/gate_trials.sh --contend)

The policy (bench/README.md, "The regression gate"): a benchmark is a regression only when the first
pass flags it (median slower by more than the threshold, one-sided Mann-Whitney p < 0.05) and its
re-measurement in a fresh process, on its own, flags it again. A run during which another process
used the GPU is not judged: its figures measure the sharing, not the code.
"""
import argparse
import csv
import glob
import json
import os
import re
import subprocess
import sys
import time

SMI = "nvidia-smi"
# A process that holds this much device memory, or a GPU this busy, is "another process on the GPU".
BUSY_UTILISATION_PERCENT = 5
IDLE_MEMORY_MIB = 1024
# How idle and monitor begin their line (monitor-*.txt): verdict reads a run's state from it.
IDLE, NOT_IDLE, ALONE, NOT_ALONE = "GPU idle", "GPU not idle", "GPU alone", "GPU not alone"
SHARED = (NOT_IDLE, NOT_ALONE)


def smi(*args):
    # The GPU the benchmarks run on: CUDA_VISIBLE_DEVICES's first, else GPU 0.
    gpu = (os.environ.get("CUDA_VISIBLE_DEVICES") or "0").split(",")[0].strip()
    out = subprocess.run([SMI, "-i", gpu, *args, "--format=csv,noheader,nounits"], capture_output=True, text=True,
                         timeout=60)
    if out.returncode != 0:
        raise RuntimeError(f"nvidia-smi {' '.join(args)} failed: {(out.stderr or out.stdout).strip()[:200]}")
    return [[c.strip() for c in row] for row in csv.reader(out.stdout.splitlines()) if row]


def ours(process_name):
    return "gemma4-bench" in process_name


def idle(args):
    apps = smi("--query-compute-apps=pid,process_name,used_memory")
    busy = []
    for pid, name, mem in apps:
        busy.append(f"process {pid} ({name}) holds {mem} MiB of device memory")
    utilisation, memory = [], []
    end = time.time() + args.seconds
    while True:
        util, used = smi("--query-gpu=utilization.gpu,memory.used")[0][:2]
        utilisation.append(float(util))
        memory.append(float(used))
        if time.time() >= end:
            break
        time.sleep(0.25)
    mean = sum(utilisation) / len(utilisation)
    if mean > BUSY_UTILISATION_PERCENT:
        busy.append(f"utilisation {mean:.0f}% over {args.seconds:g} s with nothing of ours running")
    if min(memory) > IDLE_MEMORY_MIB and not apps:
        busy.append(f"{min(memory):.0f} MiB of device memory in use by processes nvidia-smi does not list")
    if busy:
        print(f"{NOT_IDLE}: " + "; ".join(busy))
        return 1
    print(f"{IDLE}: no compute process, utilisation {mean:.0f}% over {args.seconds:g} s, {max(memory):.0f} MiB used")
    return 0


def monitor(args):
    samples_path, apps_path = os.path.join(args.dir, "samples.csv"), os.path.join(args.dir, "apps.csv")
    rows = []
    if os.path.exists(samples_path):
        with open(samples_path) as f:
            rows = [[c.strip() for c in r] for r in csv.reader(f) if len(r) >= 7]
    others, mine = {}, set()
    if os.path.exists(apps_path):
        with open(apps_path) as f:
            for r in csv.reader(f):
                if len(r) < 4:
                    continue
                pid = r[1].strip()
                if ours(r[2]):
                    mine.add(pid)
                else:
                    others.setdefault(pid, (r[2].strip(), r[3].strip()))
    # nvidia-smi sometimes names a process "[No data]" for one sample (seen on an H200 for
    # gemma4-bench's own pid): a pid named gemma4-bench in any sample is ours.
    others = {pid: v for pid, v in others.items() if pid not in mine}

    def number(value):
        try:
            return float(value)
        except ValueError:
            return None

    def column(i):
        return sorted(v for v in (number(r[i]) for r in rows) if v is not None)

    lines = []
    if rows:
        sm, power, temp = column(2), column(4), column(5)
        reasons = sorted({r[6] for r in rows if r[6] not in ("0x0000000000000000", "[N/A]")})
        lines.append(f"{len(rows)} samples: SM clock median {sm[len(sm) // 2]:.0f} MHz (min {sm[0]:.0f}, max {sm[-1]:.0f}), "
                     f"power max {power[-1]:.0f} W, temperature max {temp[-1]:.0f} C, "
                     f"throttle reasons {', '.join(reasons) if reasons else 'none'}")
    else:
        lines.append("no samples (nvidia-smi did not run beside the benchmark)")
    for pid, (name, mem) in others.items():
        lines.append(f"another process used the GPU during the run: pid {pid} ({name}), {mem} MiB")
    print(f"{NOT_ALONE if others else ALONE}: " + "; ".join(lines))
    return 1 if others else 0


def flagged(args):
    report = json.load(open(args.compare))
    for row in report["rows"]:
        if row["verdict"] == "regression":
            name = row["name"].removesuffix("/manual_time")
            print("^" + re.sub(r"([.+*?()\[\]{}|^$\\])", r"\\\1", name) + "(/manual_time)?$")
    return 0


def merged(paths):
    """One report: the first's context, every report's repetitions (aggregates left out)."""
    out = None
    for path in paths:
        report = json.load(open(path))
        if out is None:
            out = {"context": report["context"], "benchmarks": []}
        out["benchmarks"] += [b for b in report["benchmarks"] if b.get("run_type") != "aggregate"]
    return out


def merge(args):
    json.dump(merged(args.inputs), open(args.out, "w"), indent=1)
    return 0


def verdict(args):
    first = json.load(open(os.path.join(args.dir, "bench-compare.json")))
    confirms = {}
    for path in sorted(glob.glob(os.path.join(args.dir, "confirm-*-compare.json"))):
        for row in json.load(open(path))["rows"]:
            if not row["name"].startswith("ceiling/") and row["verdict"] != "only in base":
                confirms[row["name"]] = row
    monitors = {}
    for path in sorted(glob.glob(os.path.join(args.dir, "monitor*.txt"))):
        monitors[os.path.basename(path)] = open(path).read().strip()
    shared = [f"{name}: {text}" for name, text in monitors.items() if text.startswith(SHARED)]

    rows = []
    for row in first["rows"]:
        if row["verdict"] != "regression":
            continue
        again = confirms.get(row["name"])
        if again is None:
            outcome = "not re-measured"
        elif again["verdict"] == "regression":
            outcome = "regression"
        else:
            outcome = "not confirmed"
        rows.append({"name": row["name"].removesuffix("/manual_time"), "first_change_percent": row["change_percent"],
                     "first_p": row["p"], "again_change_percent": again and again["change_percent"],
                     "again_p": again and again["p"], "verdict": outcome})
    regressions = [r for r in rows if r["verdict"] in ("regression", "not re-measured")]
    if shared:
        summary = f"not judged: another process used the GPU ({len(shared)} run(s)); {len(rows)} flagged"
    else:
        summary = (f"{len(regressions)} regression(s), {len(rows) - len(regressions)} flagged and not confirmed, "
                   f"of {len(first['rows'])} benchmarks")
    result = {"summary": summary, "passed": not shared and not regressions, "flagged": rows,
              "first_pass_counts": first.get("counts", {}), "monitor": monitors, "warnings": first.get("warnings", [])}
    json.dump(result, open(os.path.join(args.dir, "gate.json"), "w"), indent=1)

    def pct(v):
        return "-" if v is None else f"{v:+.1f}%"

    def p(v):
        return "-" if v is None else f"{v:.2g}"

    text = [f"gate: {summary}"]
    text += [f"  {name}: {line}" for name, line in monitors.items()]
    if rows:
        text.append(f"  {'flagged benchmark':60s} {'first':>8s} {'p':>8s} {'again':>8s} {'p':>8s}  verdict")
    for r in rows:
        text.append(f"  {r['name']:60s} {pct(r['first_change_percent']):>8s} {p(r['first_p']):>8s} "
                    f"{pct(r['again_change_percent']):>8s} {p(r['again_p']):>8s}  {r['verdict']}")
    open(os.path.join(args.dir, "gate.txt"), "w").write("\n".join(text) + "\n")
    print("\n".join(text))
    return 0 if result["passed"] else 1


def rates(args):
    import tempfile

    reports = [(path, json.load(open(path))) for path in args.reports]
    # The baselines each run is judged against: each other run of its GPU (one process each, as
    # the gate's first pass sees a baseline), or with --pooled the repetitions of all the others
    # pooled (a baseline that samples the spread between processes and GPUs).
    trials = []
    for j, (b_path, b) in enumerate(reports):
        if args.pooled:
            trials.append(([p for i, (p, _) in enumerate(reports) if i != j], b))
        else:
            uuid = b["context"].get("gpu_uuid", "?")
            trials += [([a_path], b) for a_path, a in reports
                       if a_path != b_path and a["context"].get("gpu_uuid", "?") == uuid]
    slowdowns = [0, 2.5, 5, 7.5, 10]
    flagged = {d: 0 for d in slowdowns}
    judged = {d: 0 for d in slowdowns}
    wrong = {}  # (slowdown, benchmark) -> in how many trials it was judged wrongly
    with tempfile.TemporaryDirectory() as tmp:
        base, new, out = (os.path.join(tmp, f) for f in ("base.json", "new.json", "compare.json"))
        for base_paths, b in trials:
            json.dump(merged(base_paths), open(base, "w"))
            for d in slowdowns:
                slow = json.loads(json.dumps(b))
                for row in slow["benchmarks"]:
                    if not row["name"].startswith("ceiling/") and "real_time" in row:
                        row["real_time"] *= 1 + d / 100
                json.dump(slow, open(new, "w"))
                subprocess.run([args.cli, "bench-compare", base, new, "--json", out], capture_output=True, check=False)
                for row in json.load(open(out))["rows"]:
                    if row["name"].startswith("ceiling/") or row["verdict"] not in ("regression", "same", "faster"):
                        continue
                    judged[d] += 1
                    flagged[d] += row["verdict"] == "regression"
                    if (d == 0 and row["verdict"] == "regression") or (d >= 7.5 and row["verdict"] != "regression"):
                        key = (d, row["name"].removesuffix("/manual_time"))
                        wrong[key] = wrong.get(key, 0) + 1
    print(f"{len(reports)} runs, {len(trials)} trials (" + ("each run against the others pooled" if args.pooled
          else "each ordered pair of runs on one GPU") + ")")
    print(f"{'slowdown':>8s} {'judged':>7s} {'flagged':>8s} {'first pass':>10s} {'and confirmed (squared)':>24s}")
    for d in slowdowns:
        rate = flagged[d] / judged[d] if judged[d] else float("nan")
        print(f"{d:7.1f}% {judged[d]:7d} {flagged[d]:8d} {rate:10.4f} {rate * rate:24.6f}  "
              + ("false positives" if d == 0 else "caught"))
    for (d, name), n in sorted(wrong.items()):
        print(f"  at {d:4.1f}%: {name} {'flagged' if d == 0 else 'missed'} in {n} trial(s)")
    return 0


def trials(args):
    """gate_trials.sh's table: per run, the first pass's flags, the confirmed ones and the verdict."""
    as_expected = True
    print(f"{'run':5s} {'first pass':>10s} {'confirmed':>9s}  verdict")
    for i in range(1, args.runs + 1):
        path = os.path.join(args.dir, f"run-{i}", "gate.json")
        if not os.path.exists(path):
            print(f"{i:<5d} no gate.json (the run failed before the gate: {args.dir}/run-{i}.log)")
            as_expected = False
            continue
        gate = json.load(open(path))
        flagged = gate["flagged"]
        confirmed = [f["name"] for f in flagged if f["verdict"] != "not confirmed"]
        print(f"{i:<5d} {len(flagged):>10d} {len(confirmed):>9d}  {gate['summary']}")
        for f in flagged:
            again = "-" if f["again_change_percent"] is None else f"{f['again_change_percent']:+.1f}%"
            print(f"      {f['name']}: {f['first_change_percent']:+.1f}% then {again}: {f['verdict']}")
        if args.contended_first and i == 1:  # another process on the GPU: the gate must not judge
            as_expected &= gate["summary"].startswith("not judged")
        elif args.mutant_benchmark:
            caught = any(re.match(args.mutant_benchmark, name) for name in confirmed)
            print(f"      mutant's benchmark {args.mutant_benchmark}: {'reported' if caught else 'MISSED'}")
            as_expected &= caught
        else:
            as_expected &= gate["passed"]
    print("trials: " + ("as expected" if as_expected else "NOT as expected"))
    return 0 if as_expected else 1


def load(args):
    import torch  # only here: the other subcommands run without torch

    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    end = time.time() + args.seconds
    while time.time() < end:
        for _ in range(20):
            a @ a
        torch.cuda.synchronize()
    return 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=__doc__.split("\n\n", 1)[1])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("idle", help="is the GPU otherwise idle?")
    p.add_argument("--seconds", type=float, default=2)
    p.set_defaults(fn=idle)
    p = sub.add_parser("monitor", help="what nvidia-smi saw beside a benchmark run")
    p.add_argument("dir")
    p.set_defaults(fn=monitor)
    p = sub.add_parser("flagged", help="the regressions of a bench-compare --json file, as filters")
    p.add_argument("compare")
    p.set_defaults(fn=flagged)
    p = sub.add_parser("merge", help="the repetitions of several gemma4-bench reports in one")
    p.add_argument("out")
    p.add_argument("inputs", nargs="+")
    p.set_defaults(fn=merge)
    p = sub.add_parser("verdict", help="the gate's verdict over a bench stage's directory")
    p.add_argument("dir")
    p.set_defaults(fn=verdict)
    p = sub.add_parser("rates", help="the first pass's error rates over gate runs of one commit")
    p.add_argument("--cli", required=True, help="gemma4-conform (its bench-compare judges)")
    p.add_argument("--pooled", action="store_true", help="judge each run against all the others pooled")
    p.add_argument("reports", nargs="+")
    p.set_defaults(fn=rates)
    p = sub.add_parser("trials", help="gate_trials.sh's table over its run-I directories")
    p.add_argument("dir")
    p.add_argument("--runs", type=int, required=True)
    p.add_argument("--mutant-benchmark", help="a regex the gate must report in every run")
    p.add_argument("--contended-first", action="store_true", help="run 1 had another process on the GPU")
    p.set_defaults(fn=trials)
    p = sub.add_parser("load", help="keep the GPU busy (the contention experiment)")
    p.add_argument("--seconds", type=float, required=True)
    p.set_defaults(fn=load)
    args = parser.parse_args()
    try:
        return args.fn(args)
    except (OSError, RuntimeError, KeyError, ValueError, subprocess.TimeoutExpired) as e:
        print(f"ci/gpu/gate.py {args.command}: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
