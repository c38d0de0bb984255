"""A quantized subject judged end to end on the CPU (CTest quantized_llama_cpp; golden/FORMAT.md,
"Quantized subjects"): quantized_cases.py makes the constructed E2B (real-size geometry, reduced
width, sliding window 128 instead of 512: S = 257), llama.cpp's converter and quantizer make its
Q8_0 GGUF, the bf16 golden is computed on that file's dequantized weights, and llama.cpp
(llama-cpp-python) runs the file:

- the legitimate subject: llama.cpp on its own Q8_0 file passes, the envelope is reported, and so does
  its decode path (one token a step through its KV cache, its sliding ring wrapping);
- a runtime fault: the same weights with the soft-cap in the file's metadata changed (llama.cpp then
  runs another cap than the model's) fails the outputs against the same golden;
- a file fault: the file with every ffn_down block scale applied twice fails the weight rows, by
  name, while its outputs pass (the golden carries the fault: only the weight rows can see it);
- the envelope refuses a float model of another geometry.

Needs llama.cpp's pinned environment (impl/third_party/pinned_envs.sh llama-cpp): skipped without
it, failed without it when GEMMA4_REQUIRE_LLAMA_CPP=1 (ci/test.sh --all sets it). GEMMA4_CONFORM names
the gemma4-conform binary.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SOURCE = Path(__file__).resolve().parents[3]
PINNED = SOURCE / ".cache" / "pinned" / "llama-cpp"
CLI = os.environ.get("GEMMA4_CONFORM", str(SOURCE / "build" / "bin" / "gemma4-conform"))
ADAPTER = SOURCE / "impl" / "third_party" / "llama_cpp_candidate.py"
WINDOW = 128  # E2B's is 512: the same paths (the window edge, the ring wrapping) at a quarter of the cost

if not (PINNED / ".complete").is_file():
    if os.environ.get("GEMMA4_REQUIRE_LLAMA_CPP") == "1":
        raise SystemExit(f"{PINNED} is not built: run impl/third_party/pinned_envs.sh llama-cpp")
    pytest.skip("llama.cpp's pinned environment is not built (impl/third_party/pinned_envs.sh llama-cpp)",
                allow_module_level=True)

ENV = {**os.environ, "PYTHONPATH": os.pathsep.join([str(PINNED), str(SOURCE / "impl" / "third_party")])}


def run(*command: str, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run([str(c) for c in command], capture_output=True, text=True, env=ENV)
    if check and proc.returncode != 0:
        raise AssertionError(f"{command[:3]} exited {proc.returncode}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return proc


@pytest.fixture(scope="module")
def cases(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("quantized")
    run(sys.executable, SOURCE / "golden/generators/quantized_cases.py", "--out", out, "--types", "Q8_0",
        "--window", str(WINDOW), "--faults", "scales-twice", "--conform", CLI)
    return out


def judge(cases: Path, case: str, gguf: Path, golden_case: str | None = None,
          *adapter_options: str) -> tuple[subprocess.CompletedProcess, dict]:
    """llama.cpp on `gguf` with `case`'s inputs, judged against `golden_case`'s golden (default `case`)."""
    directory, golden = cases / case, cases / (golden_case or case) / "golden.bf16.h5"
    candidate, report = directory / "candidate.h5", directory / "report.json"
    run(sys.executable, ADAPTER, directory, "--gguf", gguf, "--dtype", "bf16", "--forward-only", "--out", candidate,
        *adapter_options)
    proc = run(CLI, "golden", "check", golden, candidate, "--forward-only", "--envelope", cases / "e2b" / "golden.f32.h5",
               "--report", report, check=False)
    print(proc.stdout)  # both errors and the bounds, before any assertion
    return proc, json.loads(report.read_text())["runs"][0]


def rows(run_report: dict, prefix: str, status: str | None = None) -> list[dict]:
    return [r for r in run_report["results"] if r["test"].startswith(prefix) and (status is None or r["status"] == status)]


def test_llama_cpp_on_its_own_q8_0_file_passes(cases: Path):
    proc, report = judge(cases, "e2b-Q8_0", cases / "e2b-Q8_0" / "model.Q8_0.gguf")
    assert proc.returncode == 0, proc.stdout
    logits = [r for r in rows(report, "outputs/logits") if r["metric"] in ("max_abs", "rms")]
    assert logits and all(r["value"] <= r["bound"] for r in logits)
    weights = rows(report, "weights/")
    assert len(weights) > 100 and all(r["status"] == "pass" for r in weights)
    names = {m["name"] for m in report["measurements"]}
    assert {"envelope/all/kld_mean", "envelope/beyond_window/top1_agreement", "quantization/all/kld_max"} <= names


def test_llama_cpp_decoding_through_its_kv_cache_passes(cases: Path):
    """From 40 tokens before the window edge on, one token a step through llama.cpp's cache, whose
    sliding layers keep a window-sized ring that wraps during the steps: the same golden judges them."""
    window = json.loads((cases / "e2b-Q8_0" / "config.json").read_text())["sliding_window"]
    proc, report = judge(cases, "e2b-Q8_0", cases / "e2b-Q8_0" / "model.Q8_0.gguf", None,
                         "--decode-from", str(window - 40))
    assert proc.returncode == 0, proc.stdout
    assert all(r["value"] <= r["bound"] for r in rows(report, "outputs/logits") if r["metric"] in ("max_abs", "rms"))


def test_softcap_not_from_the_file_fails_the_outputs(cases: Path):
    faulty = cases / "e2b-Q8_0" / "softcap.Q8_0.gguf"
    run(sys.executable, SOURCE / "impl/third_party/gguf_faults.py", cases / "e2b-Q8_0" / "model.Q8_0.gguf",
        "softcap-not-from-file", "--out", faulty)
    proc, report = judge(cases, "e2b-Q8_0", faulty)
    assert proc.returncode == 1
    assert rows(report, "outputs/logits", "fail"), "the logits under another soft-cap passed"
    assert not rows(report, "weights/", "fail")  # the weights are the file's own


def test_scales_applied_twice_fail_the_weight_rows_by_name(cases: Path):
    case = "e2b-Q8_0-scales-twice"
    proc, report = judge(cases, case, cases / case / "scales-twice.Q8_0.gguf")
    assert proc.returncode == 1
    failing = {r["test"] for r in rows(report, "weights/", "fail")}
    assert failing == {f"weights/model.layers.{i}.mlp.down_proj.weight" for i in range(7)}, failing
    assert not rows(report, "outputs/", "fail")  # the golden was made from the same faulty file


def test_envelope_refuses_the_float_model_of_another_geometry(cases: Path):
    other = SOURCE / "golden" / "real" / "e4b.f32.h5"
    proc = run(CLI, "golden", "check", cases / "e2b-Q8_0" / "golden.bf16.h5", cases / "e2b-Q8_0" / "candidate.h5",
               "--forward-only", "--envelope", other, check=False)
    assert proc.returncode != 0 and "not the float model" in proc.stderr + proc.stdout, proc.stderr
