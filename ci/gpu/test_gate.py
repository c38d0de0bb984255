"""ci/gpu/gate.py on the CPU (CTest ci_gpu_results): the gate's idle check against a fake nvidia-smi,
the monitor's reading of what nvidia-smi saw beside a run, the flagged benchmarks as filters, the
merge of interleaved rounds, and the verdict: a regression only when the re-measurement confirms it,
nothing judged when another process shared the GPU. Each with the case that must come out the other
way. The slowdown mutants' edits are checked to change their files."""
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
GATE = [sys.executable, str(HERE / "gate.py")]


def gate(*args, env=None):
    return subprocess.run([*GATE, *map(str, args)], capture_output=True, text=True, env=env, timeout=60)


def fake_smi(tmp_path: Path, apps: str, util: int, used: int):
    """A PATH whose nvidia-smi answers the two queries `gate.py idle` makes."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    script = bin_dir / "nvidia-smi"
    script.write_text(f"""#!/bin/sh
case "$*" in
  *--query-compute-apps=*) printf '%s' '{apps}' ;;
  *) echo '{util}, {used}' ;;
esac
""")
    script.chmod(0o755)
    return {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}


def test_idle_passes_an_idle_gpu_and_fails_a_busy_one(tmp_path):
    idle = gate("idle", "--seconds", "0.3", env=fake_smi(tmp_path, "", 0, 300))
    assert idle.returncode == 0, idle.stdout + idle.stderr
    assert idle.stdout.startswith("GPU idle")
    other = gate("idle", "--seconds", "0.3", env=fake_smi(tmp_path, "4242, python3, 20000\n", 0, 20300))
    assert other.returncode == 1 and "process 4242 (python3) holds 20000 MiB" in other.stdout
    unlisted = gate("idle", "--seconds", "0.3", env=fake_smi(tmp_path, "", 97, 30000))
    assert unlisted.returncode == 1 and "utilisation 97%" in unlisted.stdout and "does not list" in unlisted.stdout


def monitor_dir(tmp_path: Path, apps: list):
    d = tmp_path / "monitor"
    d.mkdir(parents=True)
    (d / "samples.csv").write_text("".join(
        f"2026/11/29 08:00:0{i}.000, 100, {1980 - 10 * i}, 3201, {600 + i}, 45, 0x0000000000000000\n" for i in range(5)))
    (d / "apps.csv").write_text("".join(f"2026/11/29 08:00:01.000, {pid}, {name}, 5000\n" for pid, name in apps))
    return d


def test_monitor_tells_a_run_alone_from_a_shared_one(tmp_path):
    alone = gate("monitor", monitor_dir(tmp_path / "a", [(11, "/repo/build/bin/gemma4-bench")]))
    assert alone.returncode == 0 and alone.stdout.startswith("GPU alone"), alone.stdout
    assert "SM clock median 1960 MHz (min 1940, max 1980)" in alone.stdout
    # A sample that lost our own process's name is still ours; another pid without a name is not.
    unnamed = gate("monitor", monitor_dir(tmp_path / "c", [(11, "/repo/build/bin/gemma4-bench"), (11, "[No data]")]))
    assert unnamed.returncode == 0, unnamed.stdout
    shared = gate("monitor", monitor_dir(tmp_path / "b", [(11, "/repo/build/bin/gemma4-bench"), (12, "[No data]")]))
    assert shared.returncode == 1 and shared.stdout.startswith("GPU not alone") and "pid 12" in shared.stdout


def compare_json(path: Path, rows):
    path.write_text(json.dumps({"rows": [{"name": n + "/manual_time", "verdict": v, "change_percent": c, "p": p}
                                         for n, v, c, p in rows], "counts": {}, "warnings": []}))


NAME = "layer_kv_shared/cuda/cuda/e2b/4096/bf16/fwdbwd"
OTHER = "geglu/cuda/cuda/31b/8192/bf16/fwd"


def test_flagged_lists_only_regressions_as_anchored_filters(tmp_path):
    compare_json(tmp_path / "c.json", [(NAME, "regression", 7.2, 5e-4), (OTHER, "same", 1.0, 0.4),
                                       ("x(1)/y", "regression", 9.0, 1e-3)])
    out = gate("flagged", tmp_path / "c.json")
    assert out.returncode == 0
    filters = out.stdout.split()
    assert filters == ["^" + NAME + "(/manual_time)?$", r"^x\(1\)/y(/manual_time)?$"]
    assert re.match(filters[0], NAME + "/manual_time") and not re.match(filters[0], NAME + "x")


def test_merge_pools_the_repetitions_of_rounds(tmp_path):
    for r in (1, 2):
        (tmp_path / f"r{r}.json").write_text(json.dumps({"context": {"round": r}, "benchmarks": [
            {"name": NAME, "run_type": "iteration", "real_time": r}, {"name": NAME + "_median", "run_type": "aggregate"}]}))
    assert gate("merge", tmp_path / "m.json", tmp_path / "r1.json", tmp_path / "r2.json").returncode == 0
    merged = json.loads((tmp_path / "m.json").read_text())
    assert [b["real_time"] for b in merged["benchmarks"]] == [1, 2] and merged["context"] == {"round": 1}


def stage_dir(tmp_path: Path, first, confirm, monitors):
    tmp_path.mkdir()
    compare_json(tmp_path / "bench-compare.json", first)
    for i, rows in enumerate(confirm, 1):
        compare_json(tmp_path / f"confirm-{i}-compare.json", rows)
    for name, text in monitors.items():
        (tmp_path / name).write_text(text)
    return tmp_path


ALONE = {"monitor-idle.txt": "GPU idle: ...", "monitor-bench.txt": "GPU alone: ..."}


def test_verdict_reports_only_a_confirmed_regression(tmp_path):
    noise = stage_dir(tmp_path / "noise", [(NAME, "regression", 7.2, 5e-4), (OTHER, "same", 0.5, 0.3)],
                      [[(NAME, "same", 0.8, 0.2)]], ALONE)
    out = gate("verdict", noise)
    assert out.returncode == 0, out.stdout
    assert json.loads((noise / "gate.json").read_text())["flagged"][0]["verdict"] == "not confirmed"
    real = stage_dir(tmp_path / "real", [(OTHER, "regression", 8.1, 1e-4)], [[(OTHER, "regression", 8.4, 2e-4)]], ALONE)
    out = gate("verdict", real)
    assert out.returncode == 1 and "1 regression(s)" in out.stdout
    unconfirmed = stage_dir(tmp_path / "cut", [(OTHER, "regression", 8.1, 1e-4)], [], ALONE)
    out = gate("verdict", unconfirmed)
    assert out.returncode == 1 and "not re-measured" in (unconfirmed / "gate.txt").read_text()


def test_verdict_does_not_judge_a_run_that_shared_the_gpu(tmp_path):
    shared = stage_dir(tmp_path / "s", [(NAME, "same", 0.1, 0.5)], [],
                       {**ALONE, "monitor-bench.txt": "GPU not alone: another process used the GPU during the run: pid 12"})
    out = gate("verdict", shared)
    assert out.returncode == 1 and out.stdout.startswith("gate: not judged")


def test_every_slowdown_mutant_is_well_formed_and_its_edit_changes_its_file(tmp_path):
    listing = subprocess.run(["bash", str(HERE / "gate_trials.sh"), "--list-mutants"], check=True,
                             capture_output=True, text=True).stdout.splitlines()
    assert listing, "ci/gpu/slowdown_mutants.txt lists no mutant"
    for line in listing:
        name, file, edit, benchmark = line.split("\t")
        source = ROOT / file
        copy = tmp_path / source.name
        shutil.copyfile(source, copy)
        subprocess.run(["sed", "-i", edit, str(copy)], check=True)
        assert copy.read_bytes() != source.read_bytes(), f"mutant {name}: its edit changes nothing in {file}"
        assert re.compile(benchmark), name


def test_rates_count_no_false_positive_on_quiet_runs_and_catch_a_ten_percent_slowdown(tmp_path):
    """Two quiet runs of one GPU: neither pair flags anything as they are; both flag a 10% slowdown."""
    cli = os.environ.get("GEMMA4_CLI") or str(ROOT / "build/bin/gemma4-conform")
    if not Path(cli).exists():
        import pytest
        pytest.skip(f"no {cli} (GEMMA4_CLI): build gemma4-conform")
    paths = []
    for r in range(2):
        rows = [{"name": f"{NAME}/manual_time", "run_name": f"{NAME}/manual_time", "run_type": "iteration",
                 "repetitions": 9, "repetition_index": i, "iterations": 10, "time_unit": "ms",
                 "real_time": 5 * (1 + 0.002 * ((i * 7 + r) % 9 - 4)), "cpu_time": 5} for i in range(9)]
        path = tmp_path / f"run{r}.json"
        path.write_text(json.dumps({"context": {"gpu": "G", "gpu_uuid": "GPU-1", "git_sha": "a", "date": "d",
                                                "repetitions": "9"}, "benchmarks": rows}))
        paths.append(path)
    out = gate("rates", "--cli", cli, *paths)
    assert out.returncode == 0, out.stderr
    lines = {line.split()[0]: line.split() for line in out.stdout.splitlines() if line.strip().endswith(("positives", "caught"))}
    assert lines["0.0%"][1:3] == ["2", "0"], out.stdout   # 2 ordered pairs, none flagged
    assert lines["10.0%"][1:3] == ["2", "2"], out.stdout  # both catch 10%


def test_trials_table_expects_no_regression_or_the_mutant_every_time(tmp_path):
    def run(i, summary, passed, flagged):
        (tmp_path / f"run-{i}").mkdir()
        (tmp_path / f"run-{i}" / "gate.json").write_text(json.dumps({"summary": summary, "passed": passed, "flagged": [
            {"name": n, "first_change_percent": 10.0, "again_change_percent": a, "verdict": v} for n, a, v in flagged]}))

    run(1, "1 regression(s)", False, [(OTHER, 9.9, "regression")])
    run(2, "0 regression(s)", True, [(OTHER, 1.0, "not confirmed")])
    mutant = gate("trials", tmp_path, "--runs", 2, "--mutant-benchmark", "^" + OTHER + "$")
    assert mutant.returncode == 1 and "MISSED" in mutant.stdout  # run 2 did not report it
    assert gate("trials", tmp_path, "--runs", 1, "--mutant-benchmark", "^" + OTHER + "$").returncode == 0
    plain = gate("trials", tmp_path, "--runs", 2)
    assert plain.returncode == 1 and "trials: NOT as expected" in plain.stdout  # run 1 reported a regression
    assert gate("trials", tmp_path, "--runs", 3).returncode == 1  # run 3 has no gate.json
