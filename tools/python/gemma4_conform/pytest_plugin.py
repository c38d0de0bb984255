"""pytest plugin: the conformance suite in a kernel library's own tests.

Installed with the package (entry point ``pytest11``), it gives a fixture and a test factory:

    from gemma4_conform.pytest_plugin import conformance_test
    test_gemma4 = conformance_test("mylib.gemma4:backend", dtypes=["f32", "bf16"], devices=["cuda"])

or, for more control, the ``gemma4_conform`` fixture:

    def test_my_kernels(gemma4_conform):
        gemma4_conform("mylib.gemma4:backend", dtype="bf16", device="cuda").assert_passed()

Each run goes through the engine (gemma4_conform.conform) in a child process that imports the factory
and sees this process's sys.path: a kernel that crashes fails its test instead of the session.
``--gemma4-conform-reports DIR`` keeps every run's JSON and JUnit reports.
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional, Sequence

import pytest

from . import Report, conform


def explain(spec: str, report: Report) -> str:
    """Why a run failed: the failing rows with both errors and the bound, or why it did not complete."""
    run = report.runs[0]
    head = f"gemma4_conform: {spec} on {run.label}"
    if run.error:
        return f"{head}: {run.error}"
    rows = []
    for r in report.failures:
        baseline = f" baseline={r.baseline:.2e}" if r.baseline is not None else ""
        measured = f" {r.metric}={r.value:.2e}{baseline} bound={r.bound:.2e}" if r.metric else ""
        rows.append(f"  {r.test} {r.case}{measured} {r.detail}".rstrip())
    return head + f": {len(rows)} failing results\n" + "\n".join(rows)


class ConformRun:
    """One run of the suite on a factory's backend: the engine's Report, and assert_passed()."""

    def __init__(self, spec: str, report: Report):
        self.spec, self.report = spec, report

    @property
    def passed(self) -> bool:
        return self.report.passed

    @property
    def failures(self) -> list:
        return self.report.failures

    def explain(self) -> str:
        return explain(self.spec, self.report)

    def assert_passed(self) -> None:
        if not self.passed:
            pytest.fail(self.explain(), pytrace=False)


def run_conform(spec: str, report_dir: Path, device: str = "cpu", dtype: str = "f32", filter: Optional[str] = None,
                steps: Optional[int] = None, timeout: Optional[float] = None) -> ConformRun:
    """Runs the suite on the backend FACTORY in MODULE returns, in a child process."""
    report_dir.mkdir(parents=True, exist_ok=True)
    stem = report_dir / f"{spec.replace(':', '.')}-{device}-{dtype}"
    report = conform(spec, device=device, dtype=dtype, filter=filter, steps=steps, isolate=True,
                     timeout=timeout or 1800, report=f"{stem}.json", junit=f"{stem}.xml", quiet=True)
    return ConformRun(spec, report)


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
