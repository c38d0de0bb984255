"""Running one subject in one dtype and turning its report into the scoreboard's cells.

Each run happens in a child process, so a subject that crashes or hangs costs its row, not the
scoreboard: a backend through the engine (gemma4_conform.conform(..., isolate=True)), a whole model
through conform-model, another framework through its adapter and `golden check`. A cell is one
category of one run, read by the report module's one rule (_core.category_verdict): pass, fail (how
many tests failed, the worst failing error / bound, the failing rows), not supported (the subject's
reason), not run, or not applicable (the runner has no such category).
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

from .. import _core, conform
from ..model_checks import MODEL_CATEGORIES
from .candidates import backend_envelope, candidate_report, quantized_report
from .subjects import DATA, Subject, SubjectKind

# The suite's categories, in its order (impl/category.h, bound); conform-model has a subset.
CATEGORIES = tuple(_core.Category.__members__)
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
    if subject.sites or subject.venv:  # the pinned environment's own copy, else this environment's
        pinned = [d.version for d in importlib.metadata.distributions(path=pinned_paths(subject))
                  if d.metadata["Name"].lower() == subject.version_of]
        if pinned:
            return pinned[0]
    try:
        return importlib.metadata.version(subject.version_of)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def why_cannot_run(subject: Subject, device: str) -> str:
    """"" when the subject can run here on `device`, else why not (one line)."""
    if device not in subject.devices:
        return f"runs on {' or '.join(subject.devices)} only"
    for pinned in (*subject.sites, *([subject.venv] if subject.venv else [])):
        if not (DATA / pinned / ".complete").is_file():
            return f"{pinned} is not built (impl/third_party/pinned_envs.sh)"
    paths = pinned_paths(subject)
    for package in subject.packages:
        if not importable(package, paths):
            return f"the Python package '{package}' is not installed"
    if device == "cuda":
        import torch
        if not torch.cuda.is_available():
            return "no CUDA device on this machine"
    if subject.needs_cuda_build and subject.spec not in builtin_backends():
        return "this build has no CUDA backends (configured without CUDA)"
    return ""


def pinned_paths(subject: Subject) -> list[str]:
    """Where the subject's pinned environment keeps its packages: the --target directory, or the
    venv's site-packages and the directories its .pth files add (the interpreter's own); [] = none."""
    if subject.sites:
        return [str((DATA / site).resolve()) for site in subject.sites]
    if not subject.venv:
        return []
    out = []
    for site_packages in sorted((DATA / subject.venv).resolve().glob("lib/python3*/site-packages")):
        out.append(str(site_packages))
        for pth in sorted(site_packages.glob("*.pth")):
            out += [line.strip() for line in pth.read_text().splitlines()
                    if line.strip() and not line.startswith(("#", "import")) and Path(line.strip()).is_dir()]
    return out


def importable(package: str, paths: list[str] | None = None) -> bool:
    """Whether `package` imports here, or in the pinned environment at `paths` when given."""
    if paths:
        return importlib.machinery.PathFinder.find_spec(package, paths) is not None
    try:
        return importlib.util.find_spec(package) is not None
    except (ImportError, ValueError):  # a parent missing, or sys.modules[package] set to None
        return False


def builtin_backends() -> list[str]:
    """The in-tree backends' names (bound: impl/builtin_backends)."""
    return [b["name"] for b in _core.builtin_backends()]


def both(a: str, b: str) -> str:
    """A regex (search semantics, Python's and ECMAScript's) matching where both a and b match."""
    if not a or not b:
        return a or b
    return f"^(?=.*(?:{a}))(?=.*(?:{b}))"


def checks(subject: Subject, options: RunOptions) -> str:
    """The run's --filter: the scoreboard's and the subject's own, without real_size when skipped."""
    chosen = both(options.filter, subject.filter)
    if options.skip_real_size and subject.kind is SubjectKind.BACKEND:
        return both("^(?!real_size/)", chosen)
    return chosen


@dataclass(frozen=True)
class RunOptions:
    timeout: float = 3600
    skip_real_size: bool = False
    filter: str = ""  # passed to the runner (conform's or conform-model's --filter)
    threads: int = 0  # OMP_NUM_THREADS of each run (0: inherited); runs side by side share the cores


# The subjects' adapters and model factories (impl/python, impl/third_party of the data directory),
# importable in every run's child process.
ADAPTER_PATHS = (DATA / "impl" / "python", DATA / "impl" / "third_party")
# Stand-ins for a venv subject's unneeded heavy imports (impl/third_party/stubs: kauldron's TensorFlow).
STUBS = DATA / "impl" / "third_party" / "stubs"


def child_env(subject: Subject, options: RunOptions) -> dict:
    """A run's environment: the subject's pinned environment first on PYTHONPATH, then the adapters and
    this process's sys.path (the package itself, wherever it is installed); its share of threads."""
    env = dict(os.environ)
    if subject.venv:  # another Python: the adapters and the stand-ins it needs, nothing of this one's
        env["PYTHONPATH"] = os.pathsep.join(str(p) for p in (*ADAPTER_PATHS, STUBS))
        return {**env, "OMP_NUM_THREADS": str(options.threads)} if options.threads else env
    paths = pinned_paths(subject)
    paths += [str(p) for p in ADAPTER_PATHS] + [p for p in sys.path if p]
    env["PYTHONPATH"] = os.pathsep.join(paths + [env.get("PYTHONPATH", "")])
    if options.threads:
        env["OMP_NUM_THREADS"] = str(options.threads)
    return env


def cells(run, applicable: tuple[str, ...], options: RunOptions, filtered: bool = False) -> dict[str, dict]:
    """The run's rows (a _core.Run) as one cell per category, each read by _core.category_verdict."""
    out = {}
    for category in CATEGORIES:
        v = _core.category_verdict(run, getattr(_core.Category, category))
        if v["verdict"] == "not_run":
            if category not in applicable:
                out[category] = {"verdict": Verdict.NOT_APPLICABLE.value}
            elif options.filter or filtered or (options.skip_real_size and category == "real_size"):
                out[category] = {"verdict": Verdict.NOT_RUN.value, "why": "left out by --filter or --skip-real-size"}
            else:
                out[category] = {"verdict": Verdict.NOT_SUPPORTED.value, "tests": 0, "why": "no check ran"}
        elif v["verdict"] == "fail":
            out[category] = {"verdict": Verdict.FAIL.value, "tests": v["tests"], "failed_tests": v["failed_tests"],
                             "worst_ratio": v["worst_ratio"], "worst_at": v["worst_at"],
                             "failing": [slim(r) for r in kept_failing(v["failing"])]}
        elif v["verdict"] == "pass":
            out[category] = {"verdict": Verdict.PASS.value, "tests": v["tests"], "judged_tests": v["judged_tests"]}
        else:
            out[category] = {"verdict": Verdict.NOT_SUPPORTED.value, "tests": v["tests"], "why": v["why"]}
    return out


def kept_failing(failing: list[dict]) -> list[dict]:
    """The failing rows a cell keeps (FAILING_ROWS_KEPT): the first row of each failing test, then the
    rest in order, so that one test with many failing tensors does not hide the other failing tests
    from the page's links and the history's case names (summary.failing_cases)."""
    tests: set[str] = set()
    firsts = [i for i, r in enumerate(failing) if not (r.get("test") in tests or tests.add(r.get("test")))]
    first = set(firsts)
    order = firsts + [i for i in range(len(failing)) if i not in first]
    return [failing[i] for i in order[:FAILING_ROWS_KEPT]]


def one_run(report: dict, device: str, dtype: str):
    """A runner's JSON report (every row of its runs) as one _core.Run."""
    rows = [r for run in report.get("runs", []) for r in run.get("results", [])]
    return _core.Run.from_dict({"subject": "", "device": device, "dtype": dtype, "results": rows})


def slim(row: dict) -> dict:
    keep = ("test", "case", "metric", "value", "bound", "baseline", "detail")
    return {k: row[k] for k in keep if k in row and row[k] is not None}


def row_dtype(subject: Subject, dtype: str) -> str:
    """The row's dtype column: a quantized model's type, a backend's dtype with what its KV cache stores."""
    if subject.kind is SubjectKind.QUANTIZED:
        return subject.quantization
    return f"{dtype}, {subject.quantization}" if subject.quantization else dtype


def row_head(subject: Subject, device: str, dtype: str, ours: str) -> dict:
    """What a row says of its subject, whatever the run gave."""
    return {"subject": subject.name, "implementation": subject.implementation, "path": subject.path,
            "kind": subject.kind.value, "spec": subject.spec, "version": version(subject, ours), "note": subject.note,
            "device": device, "dtype": row_dtype(subject, dtype)}


def not_judged(subject: Subject, device: str, dtype: str, ours: str, error: BaseException) -> dict:
    """The row of a run that this harness broke down in (an exception out of run_subject): not judged,
    the error named, never a verdict on the subject."""
    why = f"not judged: the scoreboard failed: {type(error).__name__}: {str(error).splitlines()[0][:240] if str(error) else ''}"
    return {**row_head(subject, device, dtype, ours), "ran": False, "why": why,
            "cells": {c: {"verdict": Verdict.NOT_RUN.value, "why": why} for c in CATEGORIES}}


def run_subject(subject: Subject, device: str, dtype: str, options: RunOptions, ours: str) -> dict:
    """One row of the scoreboard: the subject in one device and dtype."""
    row = row_head(subject, device, dtype, ours)
    why = why_cannot_run(subject, device)
    if why:
        return {**row, "ran": False, "why": why,
                "cells": {c: {"verdict": Verdict.CANNOT_RUN.value, "why": why} for c in CATEGORIES}}
    applicable = {SubjectKind.MODEL: tuple(c.name for c in MODEL_CATEGORIES), SubjectKind.CANDIDATE: ("golden",),
                  SubjectKind.QUANTIZED: ("golden",)}.get(subject.kind, CATEGORIES)
    filtered = bool(subject.filter)
    start = time.monotonic()
    if subject.kind is SubjectKind.CANDIDATE:
        report = candidate_report(subject, device, dtype, options.timeout, both(options.filter, subject.filter),
                                  child_env(subject, options))
        return {**row, "ran": True, "seconds": round(time.monotonic() - start, 1),
                "cells": cells(one_run(report, device, dtype), applicable, options, filtered)}
    if subject.kind is SubjectKind.QUANTIZED:
        report, envelope = quantized_report(subject, device, options.timeout, child_env(subject, options))
        return {**row, "ran": True, "seconds": round(time.monotonic() - start, 1), "envelope": envelope,
                "cells": cells(one_run(report, device, dtype), applicable, options, filtered)}
    if subject.kind is SubjectKind.BACKEND:
        env = child_env(subject, options)
        threads = {"OMP_NUM_THREADS": env["OMP_NUM_THREADS"]} if "OMP_NUM_THREADS" in env else {}
        run = conform(subject.spec, device=device, dtype=dtype, filter=checks(subject, options), isolate=True,
                      timeout=options.timeout, child_env=threads, quiet=True).runs[0]
        seconds = round(time.monotonic() - start, 1)
        if run.error:
            return ended_without_report(row, run.error, seconds, applicable)
        envelope_of, envelope = backend_envelope(run.to_dict().get("measurements", []))
        measured = {"envelope_of": envelope_of, "envelope": envelope} if envelope else {}
        return {**row, "ran": True, "seconds": seconds, **measured, "cells": cells(run, applicable, options, filtered)}
    with tempfile.TemporaryDirectory() as work:  # a whole model: conform-model, the model harness
        report_path = Path(work) / "report.json"
        command = [sys.executable, "-m", "gemma4_conform", "conform-model", "--factory", subject.spec, "--device",
                   device, "--dtype", dtype, "--report", str(report_path)]
        if checks(subject, options):
            command += ["--filter", checks(subject, options)]
        if subject.workers > 1:
            command += ["--workers", str(subject.workers)]
        try:
            proc = subprocess.run(command, capture_output=True, text=True, timeout=options.timeout,
                                  env=child_env(subject, options))
            tail = (proc.stdout + proc.stderr).strip().splitlines()[-3:]
        except subprocess.TimeoutExpired:
            proc, tail = None, [f"timed out after {options.timeout:.0f} s"]
        seconds = round(time.monotonic() - start, 1)
        if proc is None or not report_path.is_file():
            return ended_without_report(row, " | ".join(tail), seconds, applicable)
        report = json.loads(report_path.read_text())
    return {**row, "ran": True, "seconds": seconds,
            "cells": cells(one_run(report, device, dtype), applicable, options, filtered)}


def ended_without_report(row: dict, why: str, seconds: float, applicable: tuple[str, ...]) -> dict:
    why = "the run ended without a report: " + why
    return {**row, "ran": False, "why": why, "seconds": seconds,
            "cells": {c: {"verdict": Verdict.FAIL.value, "why": why} for c in applicable}}
