#!/usr/bin/env python3
"""CTest bench_summarize_cut_short: bench/summarize.py on a real gemma4-bench report (bench_tiny_cpu's)
cut short at several points, as a time limit leaves one. Each cut must still give a table, every
row of which is the whole report's row for that benchmark (a median is written after its
repetitions, so a median in the cut text is whole) or says that its repetitions were cut, and it
must read every entry begun in the text but the last (which may be cut). Negative control: a
salvage that keeps a partial entry, or drops a whole one, prints a row the whole report does not,
or misses entries, and fails this.

usage: test_summarize.py REPORT.json
"""
import importlib.util
import json
import pathlib
import sys
import tempfile

spec = importlib.util.spec_from_file_location("summarize", pathlib.Path(__file__).parents[1] / "summarize.py")
summarize = importlib.util.module_from_spec(spec)
spec.loader.exec_module(summarize)
CUT_ROW = "no median"


def check_cut(text, whole, fraction, tmp):
    """The failures of the report cut at this fraction of its text (read as summarize.py reads a file)."""
    cut = text[: int(len(text) * fraction)]
    tmp.write_text(cut)
    report = summarize.load_report(tmp)
    if "incomplete" not in report:
        return [f"cut at {fraction:.1%}: not flagged incomplete"]
    rows = dict(summarize.rows(report))
    failures = [f"{name}: {row!r}, the whole report says {whole.get(name)!r}" for name, row in rows.items()
                if row != whole.get(name) and not row.startswith(CUT_ROW)]
    begun, read = cut.count('"run_name":'), len(report["benchmarks"])
    if read not in (begun - 1, begun) or (begun >= 2 and read == 0):
        failures.append(f"{read} entries read of {begun} begun")
    print(f"cut at {fraction:6.1%}: {read:4d} entries read of {begun} begun, {len(rows)} rows, "
          f"context {'read' if report['context'] else 'cut'}, {len(failures)} failures")
    return [f"cut at {fraction:.1%}: {failure}" for failure in failures]


def main(path):
    text = pathlib.Path(path).read_text()
    whole = dict(summarize.rows(json.loads(text)))
    if len(whole) < 2:
        sys.exit(f"{path}: a report of {len(whole)} benchmarks tells nothing")
    with tempfile.TemporaryDirectory() as tmp:
        cut_file = pathlib.Path(tmp) / "cut.json"
        failures = [f for fraction in (0.002, 0.05, 0.3, 0.5, 0.9, 0.999)
                    for f in check_cut(text, whole, fraction, cut_file)]
    if failures:
        sys.exit("FAIL\n" + "\n".join(failures))
    print(f"pass: every cut's rows are the whole report's ({len(whole)} benchmarks)")


if __name__ == "__main__":
    main(sys.argv[1])
