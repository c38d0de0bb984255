"""The report of conform-model and of its --distributed mode: the project's one report module
(conformance/report.h, bound in ``_core``), so that their rows, table, summary, JSON and JUnit are
the suite's own.

A check's rows are ``_core.Result`` (test, category: a ``_core.Category``, case, status, metric,
value, bound, baseline, detail); between processes (the worker's pipe, the ranks' store) they travel
as ``Result.to_dict()``, the report's JSON row. The report is the report module's JSON schema,
``{"tool", "passed", "runs": [{"subject", "device", "dtype", "tests", "failed_tests", "passed",
"seconds", "results"}]}``, one run, plus the harness's own keys: ``"notes"`` and ``"seconds"``
(per test), and whatever the mode adds (--distributed: world size, sharding, ...).
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Iterable

from . import _core

Result, Status = _core.Result, _core.Status


def rows_of(test: str, category, rows: Iterable) -> list:
    """A check's rows (Result) as the report's dicts, under its test and category."""
    out = []
    for row in rows:
        row.test, row.category = test, category
        out.append(row.to_dict())
    return out


def failure(test: str, category, detail: str, case: str = "") -> dict:
    """The one row of a test that failed without a measurement (a crash, a timeout, a rank that raised)."""
    return Result(test=test, category=category, case=case, status=Status.FAIL, detail=detail).to_dict()


def build(tool: str, subject: str, device: str, dtype: str, results: dict, **extra) -> dict:
    """The report of one run: `results` is {test: {"rows": [row dicts], "notes": [...], "seconds": s}};
    `extra` are the mode's own keys. Tests, failures and verdicts are the report module's."""
    report = {"tool": tool,
              "runs": [{"subject": subject, "device": device, "dtype": dtype,
                        "seconds": round(sum(r["seconds"] for r in results.values()), 3),
                        "results": [row for r in results.values() for row in r["rows"]]}],
              "notes": {t: r["notes"] for t, r in results.items() if r["notes"]},
              "seconds": {t: round(r["seconds"], 3) for t, r in results.items()},
              **extra}
    return _core.report_dict(report)


def publish(report: dict, path: str, junit: str = "", verbose: bool = False, label: str = "") -> None:
    """Prints the failing rows (every row and note with `verbose`) and the summary, then writes the
    JSON report (whole, then renamed: a reader never sees half of it) and the JUnit XML."""
    _core.print_rows(report, all_rows=verbose)
    if verbose:
        for test, notes in report["notes"].items():
            for note in notes:
                print(f"  {test:52} note: {note}")
    if label:
        print(f"\n{label}", end="")
    _core.print_summary(report)
    partial = Path(path).with_name(Path(path).name + ".partial")
    _core.write_report_json(report, str(partial))
    os.replace(partial, path)
    print(f"report: {path}")
    if junit:
        _core.write_junit(report, junit)
        print(f"junit: {junit}")
