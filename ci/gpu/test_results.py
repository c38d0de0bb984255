"""ci/gpu/results.py on made-up stages, on the CPU (CTest ci_gpu_results): the stage's verdict and
exit status, and its JUnit written through the report module, count what results.tsv says."""
import json
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results.py"


def stage(tmp_path: Path, name: str, lines: list[str]):
    directory = tmp_path / name
    directory.mkdir()
    (directory / "results.tsv").write_text("".join(line + "\n" for line in lines))
    proc = subprocess.run([sys.executable, str(RESULTS), "stage", str(directory), name, "12"],
                          capture_output=True, text=True)
    return proc, directory


def suites(path: Path):
    root = ET.parse(path).getroot()
    assert root.tag == "testsuites"
    return {s.get("name"): s for s in root.findall("testsuite")}


def test_a_passing_stage_passes_and_a_failing_run_fails_it(tmp_path):
    ok, ok_dir = stage(tmp_path, "test", ["suite\treference-bf16\tpass\t0\t0\t30\tall pass\tlogs/a.log",
                                          "suite\tliger-bf16\tskipped\t\t0\t0\tcannot import liger_kernel\t"])
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert ok.stdout.startswith("test: pass (1 pass, 0 fail, 1 skipped; 12 s)")
    suite = suites(ok_dir / "junit.xml")["gpu-test"]
    assert (suite.get("tests"), suite.get("failures"), suite.get("skipped")) == ("2", "0", "1")

    bad, bad_dir = stage(tmp_path, "bench", ["bench\tsliding\tpass\t0\t0\t5\t\t",
                                             "bench\tgate\tfail\t1\t0\t9\tslower than the baseline\tlogs/gate.log",
                                             "bench\tglobal\tnot-run\t\t0\t0\tthe time limit\t"])
    assert bad.returncode == 1
    assert "bench: FAIL" in bad.stdout and "failed: bench/gate" in bad.stdout and "not run: global" in bad.stdout
    suite = suites(bad_dir / "junit.xml")["gpu-bench"]
    assert (suite.get("tests"), suite.get("failures")) == ("3", "2")
    failures = {c.get("name"): c.find("failure").get("message") for c in suite.iter("testcase")
                if c.find("failure") is not None}
    assert set(failures) == {"bench/gate", "bench/global"}
    assert failures["bench/gate"] == "exit 1 (expected 0): slower than the baseline (log: logs/gate.log)"
    assert failures["bench/global"] == "not run: the time limit"

    merged = subprocess.run([sys.executable, str(RESULTS), "merge", str(tmp_path), "test", "bench",
                             "--not-run", "memory=the time limit"], capture_output=True, text=True)
    assert merged.returncode == 0, merged.stderr
    all_suites = suites(tmp_path / "junit.xml")
    assert set(all_suites) == {"gpu-test", "gpu-bench", "gpu-memory"}
    assert all_suites["gpu-bench"].get("failures") == "2"
    memory = all_suites["gpu-memory"].find("testcase/failure")
    assert memory is not None and "not run: the time limit" in memory.get("message")


def test_a_stage_that_recorded_nothing_fails(tmp_path):
    proc, _ = stage(tmp_path, "memory", [])
    assert proc.returncode == 1 and "memory: FAIL: no run recorded" in proc.stdout


def test_failures_counts_a_reports_failing_checks(tmp_path):
    # The mutations step's caught check (ci/gpu/test.sh run_mutant): a report with a failing check
    # passes it; a report of passing checks only, or no report (the run ended in an error before
    # writing one), fails it.
    def failures(report):
        path = tmp_path / "report.json"
        if report is not None:
            path.write_text(json.dumps(report))
        return subprocess.run([sys.executable, str(RESULTS), "failures", str(path)], capture_output=True, text=True)

    row = {"test": "op_sweep/attention/full-s77", "case": "grads/q", "status": "pass"}
    run = {"subject": "reference", "results": [row, {**row, "status": "fail"}]}
    caught = failures({"tool": "gemma4-conform", "runs": [run]})
    assert caught.returncode == 0 and "1 failing check(s)" in caught.stdout, caught.stdout + caught.stderr
    passing = failures({"tool": "gemma4-conform", "runs": [{"subject": "reference", "results": [row]}]})
    assert passing.returncode == 1 and "0 failing check(s)" in passing.stdout
    (tmp_path / "report.json").unlink()
    missing = failures(None)
    assert missing.returncode == 1 and "no failing check read (FileNotFoundError" in missing.stdout
