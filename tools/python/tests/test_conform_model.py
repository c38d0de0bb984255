"""conform-model on transformers' own Gemma-4 (which must pass), on the side-channel negative
controls of model_controls.py (each must fail exactly the check that guards it) and on factories
that break the contract (the harness reports them and never crashes).

GEMMA4_TEST_DEVICE=cuda runs the same tests on CUDA (ci/gpu/test.sh --only model-tests); the default is the CPU.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

DEVICE = os.environ.get("GEMMA4_TEST_DEVICE", "cpu")
KV_SHARED = r"(model/e2b|model/e4b|transformers/e2b_like)$"
pytest.importorskip("transformers", reason="conform-model's proof runs transformers' Gemma-4")


def conform_model(tmp_path: Path, factory: str, *args: str, dtype: str = "f32", env=None):
    """(exit code, JSON report or None, stdout+stderr) of one run in a child process."""
    report = tmp_path / "report.json"
    cmd = [sys.executable, "-m", "gemma4_conform", "conform-model", "--factory", factory, "--device", DEVICE,
           "--dtype", dtype, "--report", str(report), "--junit", str(tmp_path / "junit.xml"), *args]
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=1200,
                         env={**os.environ, **(env or {})})
    print(run.stdout[-4000:], run.stderr[-2000:])
    return run.returncode, json.loads(report.read_text()) if report.exists() else None, run.stdout + run.stderr


def results(report: dict) -> list:
    """The rows of the report's one run (conformance/report.h's schema: {"tool", "passed", "runs"})."""
    (run,) = report["runs"]
    return run["results"]


def failing_tests(report: dict) -> set:
    return {r["test"] for r in results(report) if r["status"] == "fail"}


# eager in f16 where the device runs it at speed: on a CPU without AVX512-FP16 it took 48 s, a
# fifth of this file's time (ci/gpu/test.sh runs this file on CUDA, step model-tests).
@pytest.mark.parametrize("factory,dtype", [("eager", "f32"), ("sdpa", "f32"), ("sdpa", "bf16")] +
                         ([("eager", "f16")] if DEVICE == "cuda" else []))
def test_transformers_passes(tmp_path, factory, dtype):
    code, report, _ = conform_model(tmp_path, f"transformers_models:{factory}", dtype=dtype)
    assert code == 0 and report["passed"], failing_tests(report)
    (run,) = report["runs"]
    assert (report["tool"], run["subject"], run["device"], run["dtype"]) == \
        ("conform-model", f"transformers_models:{factory}", DEVICE, dtype)
    # The suite's categories (use_cache/* is decode's), every row of a test in the same one.
    categories = {r["category"] for r in results(report) if r["status"] == "pass"}
    assert categories == {"golden", "finite_grads", "multithreaded_recompute", "key_conventions", "decode",
                          "memory_flatness"}
    assert {r["category"] for r in results(report) if r["test"].startswith("use_cache/")} == {"decode"}
    assert all(r["test"].startswith(r["category"] + "/") for r in results(report)
               if not r["test"].startswith("use_cache/"))
    assert run["tests"] == len(report["seconds"]) == 49 and run["failed_tests"] == 0
    # Gemma4ForCausalLM saves the causal-lm layout and its load_state_dict refuses the other: the
    # only checks not supported, each saying why.
    skipped = {r["test"]: r["detail"] for r in results(report) if r["status"] == "not_supported"}
    assert skipped and all(t.startswith("key_conventions/other-layout/") for t in skipped), skipped
    assert all("causal-lm layout" in d for d in skipped.values())
    # The report module's JUnit: one suite for the run, a case per check (skipped where not supported).
    (suite,) = ET.parse(tmp_path / "junit.xml").getroot()
    cases = suite.findall("testcase")
    assert suite.get("name") == f"transformers_models:{factory}, {DEVICE}, {dtype}" and suite.get("failures") == "0"
    assert int(suite.get("tests")) == len(cases) == run["tests"]
    assert {c.get("name") for c in cases if c.find("skipped") is not None} == set(skipped)
    assert {c.get("classname") for c in cases if c.get("name").startswith("use_cache/")} == {"conform-model.decode"}


def test_liger(tmp_path):
    """Liger-Kernel's patch: passes on CUDA; elsewhere every check says why not (Triton needs CUDA)."""
    if DEVICE == "cuda":
        pytest.importorskip("liger_kernel")
    code, report, _ = conform_model(tmp_path, "transformers_models:liger", "--filter", r"golden/|use_cache/")
    if DEVICE != "cuda":
        assert code == 0 and {r["status"] for r in results(report)} == {"not_supported"}
        assert all("need a CUDA device" in r["detail"] for r in results(report))
        return
    assert code == 0 and report["passed"], failing_tests(report)


@pytest.mark.parametrize("factory", ["from_config", "eager_dtype_name"])
def test_factory_dtype_forms(tmp_path, factory):
    """from_config is written the PyTorch way (Gemma4ForCausalLM._from_config(cfg, torch_dtype=dtype),
    no annotations): it gets a torch.dtype. eager_dtype_name annotates its dtype str: it gets "bf16"
    (it raises on anything else). Both build bf16 modules that pass."""
    code, report, _ = conform_model(tmp_path, f"transformers_models:{factory}", "--filter",
                                    r"^(golden|finite_grads)/model/e2b$", dtype="bf16")
    assert code == 0 and report["passed"] and report["runs"][0]["tests"] == 2, failing_tests(report)


def test_what_a_factory_gets_for_the_dtype():
    import torch
    from gemma4_conform.model_under_test import factory_dtype

    def plain(config, dtype, device): ...
    def named(config: dict, dtype: str, device: str): ...  # "str": this module postpones annotations
    def typed(config: dict, dtype: torch.dtype, device: str): ...
    def keyword(config, device="cpu", *, dtype: str = "f32"): ...
    def evaluated(config, dtype, device): ...
    evaluated.__annotations__["dtype"] = str  # the class itself, as without `from __future__ import annotations`

    assert factory_dtype(plain, "bf16") is torch.bfloat16 and factory_dtype(typed, "f16") is torch.float16
    assert factory_dtype(lambda c, d, v: None, "f32") is torch.float32
    assert factory_dtype(named, "bf16") == "bf16" and factory_dtype(keyword, "f16") == "f16"
    assert factory_dtype(evaluated, "f32") == "f32"


# Each control changes one thing: the checks that guard it must fail, and nothing else may.
# (required failing checks, allowed failing checks, evidence in every failing row)
SHARED = ("model/e2b", "model/e4b", "transformers/e2b_like")
BACKWARD_THREAD = {f"multithreaded_recompute/backward-thread/{g}" for g in SHARED}
TWO_MODELS = {f"multithreaded_recompute/two-models/{g}" for g in SHARED}
# CUDA runs a checkpoint recompute on autograd's device thread in any checkpointed training (not
# always: the engine may run a node on the calling thread), so a thread-local store may fail there
# wherever there is a recompute, as users saw it.
RECOMPUTES = BACKWARD_THREAD | TWO_MODELS | {f"multithreaded_recompute/checkpointed/{g}" for g in SHARED} | \
    {"memory_flatness/model/e2b"}
CONTROLS = {
    "checkpoint_closure": ({"memory_flatness/model/e2b"}, {"memory_flatness/model/e2b"}, "slope_bytes_per_step"),
    "thread_local_store": (BACKWARD_THREAD, BACKWARD_THREAD if DEVICE == "cpu" else RECOMPUTES,
                           "'NoneType' object is not subscriptable"),
    # The two forwards overlap, so a model may also read the other's store mid-forward (KeyError, a
    # shape error) besides the wrong gradients of a recompute: every row is one of the two models'.
    "process_wide_store": (TWO_MODELS, TWO_MODELS, "model "),
}


@pytest.mark.parametrize("control", sorted(CONTROLS))
def test_side_channel_controls_fail_their_check(tmp_path, control):
    required, allowed, evidence = CONTROLS[control]
    code, report, _ = conform_model(tmp_path, f"model_controls:{control}", "--filter", KV_SHARED)
    assert code == 1
    assert required <= failing_tests(report) <= allowed, failing_tests(report)
    failing_rows = [r for r in results(report) if r["status"] == "fail"]
    assert all(evidence in (r["detail"] + r["metric"] + r["case"]) for r in failing_rows), failing_rows[:3]


NUMERIC = r"^(golden|finite_grads|use_cache|multithreaded_recompute/checkpointed)/"


def test_numeric_controls_fail_golden_and_finite_grads(tmp_path):
    """The scores scaled by head_dim^-0.5 fail every golden (and the use_cache forwards), nothing
    else; a NaN gradient fails every finite_grads check naming the weight (and, being non-finite,
    the golden and checkpointed comparisons), never use_cache (the forward is right)."""
    code, report, _ = conform_model(tmp_path, "model_controls:attention_scale", "--filter", NUMERIC)
    assert code == 1
    assert {t.split("/")[0] for t in failing_tests(report)} == {"golden", "use_cache"}
    assert len({t for t in failing_tests(report) if t.startswith("golden/")}) == 9
    code, report, _ = conform_model(tmp_path, "model_controls:nan_grad", "--filter", NUMERIC)
    assert code == 1
    finite = {t for t in failing_tests(report) if t.startswith("finite_grads/")}
    assert len(finite) == 9 and not any(t.startswith("use_cache/") for t in failing_tests(report))
    assert all("norm.weight" in r["detail"] for r in results(report)
               if r["test"] in finite and r["status"] == "fail" and r["case"] == "grads/*")


def test_factory_that_raises_is_a_failure_row(tmp_path):
    code, report, out = conform_model(tmp_path, "model_controls:raises", "--filter", r"^golden/model/")
    assert code == 1 and not report["passed"]
    assert (report["runs"][0]["tests"], report["runs"][0]["failed_tests"]) == (4, 4)
    assert all(r["detail"] == "ModelError: the factory raised ValueError: this factory supports no config "
               f"(hidden_size {32})" for r in results(report))
    code, report, _ = conform_model(tmp_path, "model_controls:not_a_module", "--filter", r"^golden/model/e2b")
    assert code == 1 and "not a torch.nn.Module" in results(report)[0]["detail"]


def test_crash_and_hang_are_failure_rows(tmp_path):
    """A module that kills its process, or never returns, fails that check; the others still run."""
    code, report, _ = conform_model(tmp_path, "model_controls:crashes_on_kv_shared", "--filter",
                                    r"^golden/model/(e2b|31b)$")
    assert code == 1 and failing_tests(report) == {"golden/model/e2b"}
    died = [r for r in results(report) if r["test"] == "golden/model/e2b"]
    assert len(died) == 1 and "worker process died (signal SIGABRT)" in died[0]["detail"]
    assert died[0]["category"] == "golden"
    assert any(r["test"] == "golden/model/31b" and r["status"] == "pass" for r in results(report))
    code, report, _ = conform_model(tmp_path, "model_controls:hangs_on_kv_shared", "--filter",
                                    r"^golden/model/(e2b|31b)$", "--timeout", "20")
    assert code == 1 and failing_tests(report) == {"golden/model/e2b"}
    assert "timed out after 20.0 s" in [r for r in results(report) if r["test"] == "golden/model/e2b"][0]["detail"]


def test_workers_keep_every_row_when_one_lane_crashes(tmp_path):
    """--workers 2: e2b's lane loses its worker twice (golden, then finite_grads in a new worker); 31b's
    lane runs on beside it, and the report holds the four rows as one worker gives them."""
    code, report, _ = conform_model(tmp_path, "model_controls:crashes_on_kv_shared", "--filter",
                                    r"^(golden|finite_grads)/model/(e2b|31b)$", "--workers", "2")
    assert code == 1 and failing_tests(report) == {"golden/model/e2b", "finite_grads/model/e2b"}
    assert {r["test"] for r in results(report) if r["status"] == "pass"} >= {"golden/model/31b",
                                                                             "finite_grads/model/31b"}


def test_lanes_keep_each_golden_in_one_worker():
    from gemma4_conform.model_runner import golden_of, lanes

    tests = dict.fromkeys(["golden/model/e2b", "finite_grads/model/e2b", "multithreaded_recompute/two-models/model/e2b",
                           "golden/model/31b", "use_cache/model/31b", "golden/transformers/moe"], "category")
    split = lanes(tests, 2)
    assert len(split) == 2 and sorted(t for lane in split for t in lane) == sorted(tests)
    goldens = [{golden_of(t) for t in lane} for lane in split]
    assert not goldens[0] & goldens[1] and {len(lane) for lane in split} == {3}
    assert len(lanes(tests, 8)) == 3 and len(lanes(tests, 1)) == 1


def test_usage(tmp_path):
    run = lambda *a: subprocess.run([sys.executable, "-m", "gemma4_conform", "conform-model", *a],  # noqa: E731
                                    capture_output=True, text=True)
    help_, bare = run("--help"), run()
    assert help_.returncode == 0 and "--factory" in help_.stdout
    assert bare.returncode == 2 and "--factory MODULE:FACTORY is required" in bare.stderr
    bad = run("--factory", "no_such_module:f")
    assert bad.returncode == 1 and bad.stderr.strip().splitlines()[-1].endswith("No module named 'no_such_module'")
    assert run("--factory", "m:f", "--filter", "(").returncode == 2
    assert run("--factory", "m:f", "--workers", "0").returncode == 2
    listed = run("--list").stdout.split()
    assert "memory_flatness/model/e2b" in listed and "golden/transformers/e2b_like" in listed
