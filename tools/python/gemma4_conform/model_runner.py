"""python -m gemma4_conform conform-model: judge a whole Gemma-4 nn.Module.

    python -m gemma4_conform conform-model --factory MODULE:FACTORY [--device cpu|cuda]
        [--dtype f32|bf16|f16] [--filter REGEX] [--steps N] [--timeout S] [--report F.json]
        [--junit F.xml] [--verbose] [--list]
    torchrun --nproc-per-node N -m gemma4_conform conform-model --distributed --factory MODULE:FACTORY ...
        (model_distributed.py: FSDP2 with activation checkpointing; --distributed --help for its options)

FACTORY(config: dict, dtype: str, device: str) returns a module that behaves like a transformers
causal LM (gemma4_conform/model_under_test.py has the contract). The harness loads every model
golden's weights into fresh modules and runs the model-level checks (model_checks.py). The checks
run in a worker process: a check whose module raises is a failure row with the one-line error; one
that kills the worker (a crash) or outlives --timeout is a failure row naming the signal or the
time, and the remaining checks go on in a new worker. Exit 0 when every check passes, 1 otherwise,
2 on a usage error.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import select
import signal
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

PROGRAM = "python -m gemma4_conform conform-model"


def resolve(spec: str, option: str = "--factory"):
    """MODULE:FACTORY -> the callable; raises ValueError with one line (naming `option`) when it cannot."""
    import importlib

    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise ValueError(f"{option} {spec!r}: expected MODULE:FACTORY")
    try:
        obj = importlib.import_module(module_name)
    except Exception as e:  # the user's module: whatever its import raises is reported
        raise ValueError(f"{option} {spec}: cannot import {module_name}: {type(e).__name__}: {e}") from e
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise ValueError(f"{option} {spec}: {module_name} has no attribute {attr!r}")
        obj = getattr(obj, part)
    if not callable(obj):
        raise ValueError(f"{option} {spec}: {attr} is not callable")
    return obj


# --- the worker: runs checks, one JSON line per event on its results pipe ------------------------


def worker(args) -> int:
    from .model_checks import Context, model_checks, run_check
    from .model_under_test import ModelUnderTest

    out = os.fdopen(args.results_fd, "w", buffering=1)

    def send(**msg):
        out.write(json.dumps(msg) + "\n")

    try:
        factory = resolve(args.factory)
    except ValueError as e:
        send(fatal=str(e))
        return 3
    wanted = set(Path(args.checks).read_text().split("\n")) - {""}
    ctx = Context(ModelUnderTest(factory, args.factory, args.device, args.dtype), args.steps)
    for check in model_checks(args.dtype):
        if check.test not in wanted:
            continue
        send(start=check.test)
        started = time.monotonic()
        outcome = run_check(check, ctx)
        send(done=check.test, seconds=time.monotonic() - started, notes=outcome.notes,
             rows=[r.to_dict(check.test, check.category) for r in outcome.rows])
    return 0


# --- the parent: runs workers, survives their deaths, reports ----------------------------------


def _worker_env() -> dict:
    env = dict(os.environ)
    paths = [str(Path(__file__).resolve().parent.parent)] + [p or os.getcwd() for p in sys.path if p != ""]
    env["PYTHONPATH"] = os.pathsep.join([p for p in paths if os.path.isdir(p)] + [env.get("PYTHONPATH", "")])
    return env


def _died(code: int) -> str:
    if code < 0:
        try:
            return f"signal {signal.Signals(-code).name}"
        except ValueError:
            return f"signal {-code}"
    return f"exit code {code}"


def _last_line(path: Path) -> str:
    lines = [ln for ln in path.read_text(errors="replace").splitlines() if ln.strip()] if path.exists() else []
    return lines[-1][:300] if lines else "(no output)"


def run_workers(args, tests: list, work: Path, progress) -> dict:
    """test -> {"rows", "notes", "seconds"}: every test, done by a worker or failed by its death."""
    results, remaining, attempt = {}, list(tests), 0
    while remaining:
        attempt += 1
        before = len(remaining)
        checks_file, log = work / f"checks-{attempt}.txt", work / f"worker-{attempt}.log"
        checks_file.write_text("\n".join(remaining) + "\n")
        read_fd, write_fd = os.pipe()
        cmd = [sys.executable, "-m", "gemma4_conform.model_runner", "--worker", "--factory", args.factory,
               "--device", args.device, "--dtype", args.dtype, "--steps", str(args.steps or 0),
               "--results-fd", str(write_fd), "--checks", str(checks_file)]
        with open(log, "w") as log_file:
            proc = subprocess.Popen(cmd, stdout=log_file, stderr=subprocess.STDOUT, pass_fds=(write_fd,),
                                    env=_worker_env())
        os.close(write_fd)
        current, started, buffer = None, time.monotonic(), b""
        with os.fdopen(read_fd, "rb") as pipe:
            while True:
                ready, _, _ = select.select([pipe], [], [], 1.0)
                if current and time.monotonic() - started > args.timeout:
                    proc.kill()
                    results[current] = _failed(current, f"timed out after {args.timeout} s (the worker was killed)")
                    remaining.remove(current)
                    current = None
                    break
                if not ready:
                    continue
                chunk = os.read(pipe.fileno(), 1 << 16)
                if not chunk:
                    break
                buffer += chunk
                while b"\n" in buffer:
                    line, buffer = buffer.split(b"\n", 1)
                    msg = json.loads(line)
                    if "fatal" in msg:
                        proc.wait()
                        raise ValueError(msg["fatal"])
                    if "start" in msg:
                        current, started = msg["start"], time.monotonic()
                        progress(len(results) + 1, len(tests), current)
                    else:
                        results[msg["done"]] = msg
                        remaining.remove(msg["done"])
                        current = None
        code = proc.wait()
        progressed = len(remaining) < before
        if current:
            results[current] = _failed(current, f"the worker process died ({_died(code)}) during this check; "
                                                f"its last output: {_last_line(log)}")
            remaining.remove(current)
        elif remaining and not progressed:
            raise RuntimeError(f"the worker exited ({_died(code)}) without running a check: {_last_line(log)}")
    return results


def _failed(test: str, detail: str) -> dict:
    from .model_checks import Category, Row, Status

    category = Category(test.split("/", 1)[0])
    return {"rows": [Row("", Status.FAIL, detail=detail).to_dict(test, category)], "notes": [], "seconds": 0}


def check_status(rows: list) -> str:
    statuses = {r["status"] for r in rows}
    return "fail" if "fail" in statuses else ("not_supported" if statuses == {"not_supported"} else "pass")


def print_rows(results: dict, verbose: bool) -> None:
    for test, res in results.items():
        for r in res["rows"]:
            if r["status"] == "pass" and not verbose:
                continue
            numbers = ""
            if r["metric"]:
                numbers = f"{r['metric']}={r['value']:.2e} "
                numbers += f"baseline={r['baseline']:.2e} " if "baseline" in r else ""
                numbers += f"bound={r['bound']:.2e} "
            print(f"{r['status'].upper():13} {test:52} {r['case']:40} {numbers}{r['detail']}")
        if verbose:
            for note in res["notes"]:
                print(f"{'note':13} {test:52} {note}")


def summary(results: dict) -> tuple:
    by_category, failed = {}, 0
    for test, res in results.items():
        counts = by_category.setdefault(test.split("/", 1)[0], {"pass": 0, "fail": 0, "not_supported": 0})
        for r in res["rows"]:
            counts[r["status"]] += 1
        failed += check_status(res["rows"]) == "fail"
    return by_category, failed


def write_junit(path: str, results: dict, label: str) -> None:
    suites = ET.Element("testsuites", name=label)
    by_category = {}
    for test, res in results.items():
        by_category.setdefault(test.split("/", 1)[0], []).append((test, res))
    for category, items in by_category.items():
        suite = ET.SubElement(suites, "testsuite", name=category, tests=str(len(items)),
                              failures=str(sum(check_status(r["rows"]) == "fail" for _, r in items)))
        for test, res in items:
            case = ET.SubElement(suite, "testcase", classname=category, name=test.split("/", 1)[1],
                                 time=f"{res['seconds']:.3f}")
            status = check_status(res["rows"])
            bad = [r for r in res["rows"] if r["status"] == status]
            text = "\n".join(f"{r['case']}: {r['metric']} {r['value']} bound {r['bound']} {r['detail']}" for r in bad)
            if status == "fail":
                ET.SubElement(case, "failure", message=bad[0]["detail"][:200] or "failed").text = text
            elif status == "not_supported":
                ET.SubElement(case, "skipped", message=bad[0]["detail"][:200])
    ET.ElementTree(suites).write(path, encoding="utf-8", xml_declaration=True)


def parse(argv):
    p = argparse.ArgumentParser(prog=PROGRAM, description=__doc__.split("\n\n")[1].replace("\n", " "),
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--factory", help="MODULE:FACTORY; FACTORY(config, dtype, device) returns the nn.Module")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--dtype", choices=("f32", "bf16", "f16"), default="f32")
    p.add_argument("--filter", default="", help="regex on '<category>/<check>' (re.search)")
    p.add_argument("--steps", type=int, default=0, help="memory_flatness steps (default 50 on cpu, 200 on cuda)")
    p.add_argument("--timeout", type=float, default=900, help="seconds one check may take before it fails")
    p.add_argument("--report", help="write the JSON report here")
    p.add_argument("--junit", help="write a JUnit XML report here")
    p.add_argument("--verbose", action="store_true", help="print every row and note, not only failures")
    p.add_argument("--list", action="store_true", help="list the checks and exit")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--results-fd", type=int, help=argparse.SUPPRESS)
    p.add_argument("--checks", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if not args.list and not args.factory:
        p.error("--factory MODULE:FACTORY is required")
    if args.steps < 0 or args.timeout <= 0:
        p.error("--steps must be >= 0 and --timeout > 0")
    try:
        re.compile(args.filter)
    except re.error as e:
        p.error(f"--filter {args.filter!r} is not a regular expression: {e}")
    return args


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if "--distributed" in argv:  # one rank under torchrun (model_distributed.py)
        from . import model_distributed
        return model_distributed.main(argv)
    try:
        args = parse(argv)
    except SystemExit as e:
        return int(e.code or 0)
    if args.worker:
        return worker(args)
    from .model_checks import model_checks

    tests = [c.test for c in model_checks(args.dtype) if re.search(args.filter, c.test)]
    if args.list:
        print("\n".join(tests))
        return 0
    if not tests:
        print(f"{PROGRAM}: error: --filter {args.filter!r} selects no check", file=sys.stderr)
        return 2
    tty = sys.stderr.isatty()

    def progress(i, n, test):
        print(f"\r[{i}/{n}] {test}\033[K" if tty else f"[{i}/{n}] {test}", end="" if tty else "\n", file=sys.stderr,
              flush=True)

    work = Path(tempfile.mkdtemp(prefix="gemma4-conform-model-"))
    try:
        results = run_workers(args, tests, work, progress)
    except (ValueError, RuntimeError) as e:
        print(f"\n{PROGRAM}: error: {e}", file=sys.stderr)
        return 1
    if tty:
        print(file=sys.stderr)
    results = {t: results[t] for t in tests}
    print_rows(results, args.verbose)
    by_category, failed = summary(results)
    print("\nsummary by category (results: pass / fail / not supported):")
    for category, n in by_category.items():
        print(f"  {category:26}{n['pass']} / {n['fail']} / {n['not_supported']}")
    label = f"{args.factory} ({args.device}, {args.dtype})"
    print(f"{'FAIL' if failed else 'PASS'}: {len(tests) - failed}/{len(tests)} checks passed: {label}")
    report = {"factory": args.factory, "device": args.device, "dtype": args.dtype, "checks": len(tests),
              "failed_checks": failed, "passed": failed == 0,
              "notes": {t: r["notes"] for t, r in results.items() if r["notes"]},
              "seconds": {t: round(r["seconds"], 3) for t, r in results.items()},
              "results": [row for r in results.values() for row in r["rows"]]}
    path = args.report or str(work / "report.json")
    Path(path).write_text(json.dumps(report, indent=2) + "\n")
    print(f"report: {path}")
    if args.junit:
        write_junit(args.junit, results, label)
        print(f"junit: {args.junit}")
    print(f"worker logs: {work}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
