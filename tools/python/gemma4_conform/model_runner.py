"""python -m gemma4_conform conform-model: judge a whole Gemma-4 nn.Module.

    python -m gemma4_conform conform-model --factory MODULE:FACTORY [--device cpu|cuda]
        [--dtype f32|bf16|f16] [--filter REGEX] [--steps N] [--timeout S] [--report F.json]
        [--workers N] [--junit F.xml] [--verbose] [--list]
    torchrun --nproc-per-node N -m gemma4_conform conform-model --distributed --factory MODULE:FACTORY ...
        (model_distributed.py: FSDP2 with activation checkpointing; --distributed --help for its options)

FACTORY(config: dict, dtype: torch.dtype, device: str) returns a module that behaves like a
transformers causal LM (gemma4_conform/model_under_test.py has the contract; a factory whose dtype
parameter is annotated str gets "f32", "bf16" or "f16"). The harness loads every model golden's
weights into fresh modules and runs the model-level checks (model_checks.py). The checks
run in a worker process: a check whose module raises is a failure row with the one-line error; one
that kills the worker (a crash) or outlives --timeout is a failure row naming the signal or the
time, and the remaining checks go on in a new worker. --workers N splits the checks over N workers at
once, a golden's checks in one of them (they share its plain and fp32 steps). Exit 0 when every
check passes, 1 otherwise, 2 on a usage error. The rows, table, JSON and JUnit are the suite's report (model_report.py).
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
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

PROGRAM = "python -m gemma4_conform conform-model"


# --- the worker: runs checks, one JSON line per event on its results pipe ------------------------


def worker(args) -> int:
    from .model_checks import Context, model_checks, run_check
    from .model_report import rows_of
    from .model_under_test import ModelUnderTest, resolve

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
             rows=rows_of(check.test, check.category, outcome.rows))
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


def golden_of(test: str) -> str:
    """The golden a check runs on: its name's last two parts ("transformers/dense_keqv", "model/e2b")."""
    return "/".join(test.split("/")[-2:])


def lanes(tests: dict, n: int) -> list[dict]:
    """The checks split into at most n lanes, each golden's checks in one lane (a worker caches a
    golden's plain and fp32 steps), the goldens with most checks placed first, each in the emptiest lane."""
    by_golden: dict[str, list[str]] = {}
    for test in tests:
        by_golden.setdefault(golden_of(test), []).append(test)
    out: list[dict] = [{} for _ in range(max(1, min(n, len(by_golden))))]
    for group in sorted(by_golden.values(), key=len, reverse=True):
        lane = min(out, key=len)
        lane.update({t: tests[t] for t in group})
    return out


def run_all(args, tests: dict, work: Path, progress) -> dict:
    """run_workers over --workers lanes at once (threads that each wait on their own worker process);
    the progress count is shared."""
    split = lanes(tests, args.workers)
    if len(split) == 1:
        return run_workers(args, tests, work, progress)
    count, lock = [0], threading.Lock()

    def counted(_i, _n, test):
        with lock:
            count[0] += 1
            progress(count[0], len(tests), test)

    with ThreadPoolExecutor(len(split)) as pool:
        done = [pool.submit(run_workers, args, lane, work / f"lane-{i}", counted) for i, lane in enumerate(split)]
        results = {}
        for future in done:
            results.update(future.result())
    return results


def run_workers(args, tests: dict, work: Path, progress) -> dict:
    """test -> {"rows", "notes", "seconds"}: every test (a dict test -> category), done by a worker or
    failed by its death."""
    work.mkdir(parents=True, exist_ok=True)
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
                    results[current] = _failed(current, tests[current],
                                               f"timed out after {args.timeout} s (the worker was killed)")
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
            results[current] = _failed(current, tests[current], f"the worker process died ({_died(code)}) during "
                                                                f"this check; its last output: {_last_line(log)}")
            remaining.remove(current)
        elif remaining and not progressed:
            raise RuntimeError(f"the worker exited ({_died(code)}) without running a check: {_last_line(log)}")
    return results


def _failed(test: str, category, detail: str) -> dict:
    from .model_report import failure

    return {"rows": [failure(test, category, detail)], "notes": [], "seconds": 0}


def parse(argv):
    p = argparse.ArgumentParser(prog=PROGRAM, description=__doc__.split("\n\n")[1].replace("\n", " "),
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--factory", help="MODULE:FACTORY; FACTORY(config, dtype, device) returns the nn.Module "
                   "(dtype: a torch.dtype, or the name where the parameter is annotated str)")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--dtype", choices=("f32", "bf16", "f16"), default="f32")
    p.add_argument("--filter", default="", help="regex on the check's name, '<group>/<check>' (re.search; --list)")
    p.add_argument("--steps", type=int, default=0, help="memory_flatness steps (default 50 on cpu, 200 on cuda)")
    p.add_argument("--timeout", type=float, default=900, help="seconds one check may take before it fails")
    p.add_argument("--workers", type=int, default=1,
                   help="worker processes at once, each with a share of the goldens (default 1)")
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
    if args.steps < 0 or args.timeout <= 0 or args.workers < 1:
        p.error("--steps must be >= 0, --timeout > 0 and --workers >= 1")
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

    tests = {c.test: c.category for c in model_checks(args.dtype) if re.search(args.filter, c.test)}
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
        results = run_all(args, tests, work, progress)
    except (ValueError, RuntimeError) as e:
        print(f"\n{PROGRAM}: error: {e}", file=sys.stderr)
        return 1
    if tty:
        print(file=sys.stderr)
    from .model_report import build, publish

    report = build("conform-model", args.factory, args.device, args.dtype, {t: results[t] for t in tests})
    publish(report, args.report or str(work / "report.json"), args.junit, args.verbose,
            label=f"{args.factory} ({args.device}, {args.dtype})")
    print(f"worker logs: {work}")
    return 0 if report["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
