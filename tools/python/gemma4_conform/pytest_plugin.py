"""pytest plugin: the conformance suite in a kernel library's own tests.

Installed with the package (entry point ``pytest11``), it gives a fixture and a test factory:

    from gemma4_conform.pytest_plugin import conformance_test
    test_gemma4 = conformance_test("mylib.gemma4:backend", dtypes=["f32", "bf16"], devices=["cuda"])

or, for more control, the ``gemma4_conform`` fixture:

    def test_my_kernels(gemma4_conform):
        gemma4_conform("mylib.gemma4:backend", dtype="bf16", device="cuda").assert_passed()

Each run is ``python -m gemma4_conform conform --backend MODULE:FACTORY`` in a child process: a
kernel that crashes fails its test instead of the session.
``--gemma4-conform-reports DIR`` keeps every run's JSON and JUnit reports.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Optional, Sequence

import pytest

from . import ConformResult

# Where the output of a failing run is cut, so an assertion message stays readable.
TAIL_CHARS = 4000


class ConformRun(ConformResult):
    """One run of the suite in a child process: ConformResult's exit code and JSON report, plus
    what was run and its output."""

    def __init__(self, spec: str, args: list, exit_code: int, output: str, report: Optional[dict]):
        super().__init__(exit_code, report)
        self.spec, self.args, self.output = spec, args, output

    def explain(self) -> str:
        """Why it failed: the failing rows with both errors and the bound, or the output's tail."""
        head = f"gemma4_conform: {self.spec} {' '.join(self.args)} exited {self.exit_code}"
        if not self.failures:
            return head + "\n" + self.output[-TAIL_CHARS:]
        rows = []
        for r in self.failures:
            baseline = f" baseline={r['baseline']:.2e}" if "baseline" in r else ""
            measured = f" {r['metric']}={r['value']:.2e}{baseline} bound={r['bound']:.2e}" if r["metric"] else ""
            rows.append(f"  {r['test']} {r['case']}{measured} {r['detail']}".rstrip())
        return head + f": {len(self.failures)} failing results\n" + "\n".join(rows)

    def assert_passed(self) -> None:
        if not self.passed:
            pytest.fail(self.explain(), pytrace=False)


def run_conform(spec: str, report_dir: Path, device: str = "cpu", dtype: str = "f32", filter: Optional[str] = None,
                steps: Optional[int] = None, timeout: Optional[float] = None) -> ConformRun:
    """Runs the suite on the backend FACTORY in MODULE returns, in a child process that sees this
    process's sys.path (so test-local modules import there too)."""
    report_dir.mkdir(parents=True, exist_ok=True)
    stem = f"{spec.replace(':', '.')}-{device}-{dtype}"
    report, junit = report_dir / f"{stem}.json", report_dir / f"{stem}.xml"
    args = ["--device", device, "--dtype", dtype, "--report", str(report), "--junit", str(junit)]
    if filter:
        args += ["--filter", filter]
    if steps:
        args += ["--steps", str(steps)]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    proc = subprocess.run([sys.executable, "-m", "gemma4_conform", "conform", "--backend", spec, *args], env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout)
    data = json.loads(report.read_text()) if report.exists() else None
    return ConformRun(spec, args, proc.returncode, proc.stdout, data)


def pytest_addoption(parser):
    parser.addoption("--gemma4-conform-reports", metavar="DIR", default=None,
                     help="keep the JSON and JUnit report of every gemma4_conform run in DIR")


def _cuda_available() -> bool:
    import torch
    return torch.cuda.is_available()


@pytest.fixture
def gemma4_conform(request, tmp_path):
    """A function (spec, device="cpu", dtype="f32", filter=None, steps=None) -> ConformRun; skips
    the test when device is cuda and no GPU is present."""
    keep = request.config.getoption("--gemma4-conform-reports")

    def run(spec: str, device: str = "cpu", dtype: str = "f32", filter: Optional[str] = None,
            steps: Optional[int] = None, timeout: Optional[float] = None) -> ConformRun:
        if device == "cuda" and not _cuda_available():
            pytest.skip("gemma4_conform: no CUDA device")
        return run_conform(spec, Path(keep) if keep else tmp_path, device, dtype, filter, steps, timeout)

    return run


def conformance_test(spec: str, dtypes: Sequence[str] = ("f32",), devices: Sequence[str] = ("cpu",),
                     filter: Optional[str] = None, steps: Optional[int] = None):
    """A test function, parametrized over devices x dtypes, that runs the suite on MODULE:FACTORY and
    fails with the failing rows. Assign it to a name starting with test_ in a test module."""

    @pytest.mark.parametrize("dtype", list(dtypes))
    @pytest.mark.parametrize("device", list(devices))
    def test(gemma4_conform, device, dtype):
        gemma4_conform(spec, device=device, dtype=dtype, filter=filter, steps=steps).assert_passed()

    return test
