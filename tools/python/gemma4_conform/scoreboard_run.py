"""Running one subject in one dtype and turning its report into the scoreboard's cells.

Each run is a child process of the suite's own runner (`conform` or `conform-model`, with --report),
so a subject that crashes or hangs costs its row, not the scoreboard. A cell is one category of one
run: pass, fail (how many tests failed, the worst failing error / bound, the failing rows), not
supported (the subject's reason) or not applicable (the runner has no such category).
"""
from __future__ import annotations

import enum
import importlib.machinery
import importlib.metadata
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from .scoreboard_candidates import candidate_report
from .scoreboard_subjects import Subject, SubjectKind

# The suite's categories, in its order (conformance/categories.cpp); conform-model has a subset.
CATEGORIES = ("golden", "op_sweep", "finite_grads", "multithreaded_recompute", "key_conventions", "memory_flatness",
              "determinism", "bad_input", "decode", "real_size")
FAILING_ROWS_KEPT = 20  # per cell: the page links to these; the run's JSON report has them all


class Verdict(enum.Enum):
    PASS = "pass"
    FAIL = "fail"
    NOT_SUPPORTED = "not_supported"
    NOT_APPLICABLE = "not_applicable"
    NOT_RUN = "not_run"  # left out by an option (--filter, --skip-real-size) or the subject's own filter
    CANNOT_RUN = "cannot_run"


def version(subject: Subject, ours: str) -> str:
    """The installed version of the subject's distribution; `ours` for this project's own rows."""
    if subject.fixed_version:
        return subject.fixed_version
    if not subject.version_of:
        return ours
    try:
        if subject.site:  # the pinned environment's own copy
            return next(d.version for d in importlib.metadata.distributions(path=[str(Path(subject.site).resolve())])
                        if d.metadata["Name"].lower() == subject.version_of)
        return importlib.metadata.version(subject.version_of)
    except (StopIteration, importlib.metadata.PackageNotFoundError):
        return "not installed"


def why_cannot_run(subject: Subject, device: str) -> str:
    """"" when the subject can run here on `device`, else why not (one line)."""
    if device not in subject.devices:
        return f"runs on {' or '.join(subject.devices)} only"
    if subject.site and not (Path(subject.site) / ".complete").is_file():
        return f"{subject.site} is not built (impl/third_party/pinned_envs.sh)"
    for package in subject.packages:
        if not importable(package, subject.site):
            return f"the Python package '{package}' is not installed"
    if device == "cuda":
        import torch
        if not torch.cuda.is_available():
            return "no CUDA device on this machine"
    if subject.needs_cuda_build and subject.spec not in builtin_backends():
        return "this build has no CUDA backends (configured without CUDA)"
    return ""


def importable(package: str, site: str = "") -> bool:
    """Whether `package` imports here, or in the pinned environment `site` when one is given."""
    if site:
        return importlib.machinery.PathFinder.find_spec(package, [str(Path(site).resolve())]) is not None
    try:
        return importlib.util.find_spec(package) is not None
    except (ImportError, ValueError):  # a parent missing, or sys.modules[package] set to None
        return False


_BUILTIN: list[str] = []


def builtin_backends() -> list[str]:
    """The in-tree backends' names, from `gemma4-conform backends` (first column)."""
    if not _BUILTIN:
        out = subprocess.run([sys.executable, "-m", "gemma4_conform", "backends"], capture_output=True, text=True)
        _BUILTIN.extend(line.split()[0] for line in out.stdout.splitlines() if line.strip())
    return _BUILTIN


def both(a: str, b: str) -> str:
    """A regex (search semantics, Python's and ECMAScript's) matching where both a and b match."""
    if not a or not b:
        return a or b
    return f"^(?=.*(?:{a}))(?=.*(?:{b}))"


def command(subject: Subject, device: str, dtype: str, report: Path, options: RunOptions) -> list[str]:
    base = [sys.executable, "-m", "gemma4_conform"]
    checks = both(options.filter, subject.filter)
    filter_args = ["--filter", checks] if checks else []
    if subject.kind is SubjectKind.MODEL:
        return base + ["conform-model", "--factory", subject.spec, "--device", device, "--dtype", dtype,
                       "--report", str(report), *filter_args]
    if options.skip_real_size:
        filter_args = ["--filter", both("^(?!real_size/)", checks)]
    return base + ["conform", "--backend", subject.spec, "--device", device, "--dtype", dtype, "--report", str(report),
                   *filter_args]


def ratio(row: dict) -> float:
    """error / bound of a report row: the report module's rule (Result::ratio; infinity for NaN or a
    failure without a measurement)."""
    from . import _core
    return _core.Result.from_dict(row).ratio()


@dataclass(frozen=True)
class RunOptions:
    timeout: float = 3600
    skip_real_size: bool = False
    filter: str = ""  # passed to the runner (conform's or conform-model's --filter)
    threads: int = 0  # OMP_NUM_THREADS of each run (0: inherited); runs side by side share the cores


def child_env(subject: Subject, options: RunOptions) -> dict:
    """A run's environment: the subject's pinned environment first on PYTHONPATH, its share of threads."""
    env = dict(os.environ)
    if subject.site:
        env["PYTHONPATH"] = os.pathsep.join([str(Path(subject.site).resolve()), env.get("PYTHONPATH", "")])
    if options.threads:
        env["OMP_NUM_THREADS"] = str(options.threads)
    return env


def cells(report: dict, applicable: tuple[str, ...], options: RunOptions, filtered: bool = False) -> dict[str, dict]:
    """The report's rows (one run) grouped into one cell per category."""
    rows = [r for run in report.get("runs", []) for r in run.get("results", [])]
    out = {}
    for category in CATEGORIES:
        mine = [r for r in rows if r.get("category") == category]
        if category not in applicable and not mine:
            out[category] = {"verdict": Verdict.NOT_APPLICABLE.value}
            continue
        if not mine and (options.filter or filtered or (options.skip_real_size and category == "real_size")):
            out[category] = {"verdict": Verdict.NOT_RUN.value, "why": "left out by --filter or --skip-real-size"}
            continue
        tests = sorted({r["test"] for r in mine})
        failing = [r for r in mine if r["status"] == "fail"]
        judged = [t for t in tests if any(r["test"] == t and r["status"] != "not_supported" for r in mine)]
        if failing:
            worst = max(failing, key=ratio)
            failed_tests = sorted({r["test"] for r in failing})
            out[category] = {"verdict": Verdict.FAIL.value, "tests": len(tests), "failed_tests": len(failed_tests),
                             "worst_ratio": ratio(worst), "worst_at": f"{worst['test']} {worst.get('case', '')}".strip(),
                             "failing": [slim(r) for r in sorted(failing, key=ratio, reverse=True)[:FAILING_ROWS_KEPT]]}
        elif judged:
            out[category] = {"verdict": Verdict.PASS.value, "tests": len(tests), "judged_tests": len(judged)}
        elif mine:
            reasons = sorted({r.get("detail", "") for r in mine if r.get("detail")})
            out[category] = {"verdict": Verdict.NOT_SUPPORTED.value, "tests": len(tests),
                             "why": "; ".join(reasons[:3]) or "not supported"}
        else:
            out[category] = {"verdict": Verdict.NOT_SUPPORTED.value, "tests": 0, "why": "no check ran"}
    return out


def slim(row: dict) -> dict:
    keep = ("test", "case", "metric", "value", "bound", "baseline", "detail")
    return {k: row[k] for k in keep if k in row and row[k] is not None}


# conform-model's categories (gemma4_conform/model_checks.py); conform has them all.
MODEL_CATEGORIES = ("golden", "finite_grads", "multithreaded_recompute", "key_conventions", "memory_flatness", "decode")
APPLICABLE = {SubjectKind.MODEL: MODEL_CATEGORIES, SubjectKind.CANDIDATE: ("golden",)}


def run_subject(subject: Subject, device: str, dtype: str, options: RunOptions, ours: str) -> dict:
    """One row of the scoreboard: the subject in one device and dtype."""
    row = {"subject": subject.name, "implementation": subject.implementation, "path": subject.path,
           "kind": subject.kind.value, "spec": subject.spec, "version": version(subject, ours), "note": subject.note,
           "device": device, "dtype": dtype}
    why = why_cannot_run(subject, device)
    if why:
        return {**row, "ran": False, "why": why,
                "cells": {c: {"verdict": Verdict.CANNOT_RUN.value, "why": why} for c in CATEGORIES}}
    applicable = APPLICABLE.get(subject.kind, CATEGORIES)
    if subject.kind is SubjectKind.CANDIDATE:
        start = time.monotonic()
        report = candidate_report(subject, device, dtype, options.timeout, both(options.filter, subject.filter),
                                  child_env(subject, options))
        return {**row, "ran": True, "seconds": round(time.monotonic() - start, 1),
                "cells": cells(report, applicable, options, bool(subject.filter))}
    with tempfile.TemporaryDirectory() as work:
        report_path = Path(work) / "report.json"
        start = time.monotonic()
        try:
            proc = subprocess.run(command(subject, device, dtype, report_path, options), capture_output=True,
                                  text=True, timeout=options.timeout, env=child_env(subject, options))
            tail = (proc.stdout + proc.stderr).strip().splitlines()[-3:]
        except subprocess.TimeoutExpired:
            proc, tail = None, [f"timed out after {options.timeout:.0f} s"]
        seconds = round(time.monotonic() - start, 1)
        if proc is None or not report_path.is_file():
            why = "the run ended without a report: " + " | ".join(tail)
            return {**row, "ran": False, "why": why, "seconds": seconds,
                    "cells": {c: {"verdict": Verdict.FAIL.value, "why": why} for c in applicable}}
        report = json.loads(report_path.read_text())
    return {**row, "ran": True, "seconds": seconds, "cells": cells(report, applicable, options, bool(subject.filter))}
