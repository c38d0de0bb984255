"""The real historic bugs, caught from the real releases (impl/third_party/pinned_envs.sh
builds the pinned environments; optional: each test is skipped, saying so, where its environment
is not built). GEMMA4_HISTORIC_DIR names their directory (default .cache/pinned)."""
from __future__ import annotations

import os
from pathlib import Path

import pytest
from conftest import SOURCE
from test_conform_model import DEVICE, KV_SHARED, conform_model, failing_tests, results

HISTORIC = Path(os.environ.get("GEMMA4_HISTORIC_DIR", SOURCE / ".cache/pinned"))


def environment(name: str) -> dict:
    env = HISTORIC / name
    if not (env / ".complete").exists():
        pytest.skip(f"{env} not built (impl/third_party/pinned_envs.sh)")
    return {"PYTHONPATH": os.pathsep.join([str(env), os.environ["PYTHONPATH"]])}  # conftest.py's subjects too


CHECKS = r"^(golden|use_cache|multithreaded_recompute/checkpointed)/" + KV_SHARED
KV_MODELS = ("model/e2b", "model/e4b", "transformers/e2b_like")


def test_transformers_5_5_1_use_cache_false_on_kv_shared_models(tmp_path):
    """5.5.1: without a cache, KV-shared layers computed their own K/V (fixed in 5.5.2). The plain
    step (use_cache defaults to True) passes; use_cache=False and checkpointing (which forces it) fail."""
    code, report, _ = conform_model(tmp_path, "transformers_models:sdpa", "--filter", CHECKS,
                                    env=environment("transformers-5.5.1"))
    assert code == 1
    assert failing_tests(report) == {f"{c}/{g}" for c in ("use_cache", "multithreaded_recompute/checkpointed")
                                     for g in KV_MODELS}
    use_cache = [r for r in results(report) if r["test"].startswith("use_cache/") and r["status"] == "fail"]
    assert use_cache and all(r["case"].startswith("use_cache=False: ") for r in use_cache)


def test_transformers_5_5_2_fixed(tmp_path):
    code, report, _ = conform_model(tmp_path, "transformers_models:sdpa", "--filter", CHECKS,
                                    env=environment("transformers-5.5.2"))
    assert code == 0 and report["passed"], failing_tests(report)


def test_axolotl_0_17_0_fused_attention_on_transformers_5_9_0(tmp_path):
    """axolotl 0.17.0's fused-attention patch keys the shared K/V by kv_shared_layer_index, which
    transformers 5.8 removed: on a KV-shared model a failure row carrying the AttributeError; a
    model without KV sharing passes (the fused kernels themselves are right)."""
    env = environment("axolotl-0.17.0")
    if DEVICE != "cuda":
        pytest.skip("axolotl's patch runs Triton kernels: CUDA only (GEMMA4_TEST_DEVICE=cuda)")
    code, report, _ = conform_model(tmp_path, "transformers_models:axolotl_fused_attn", "--filter",
                                    r"^golden/model/(e2b|e4b|31b)$", env=env)
    assert code == 1 and failing_tests(report) == {"golden/model/e2b", "golden/model/e4b"}
    for row in (r for r in results(report) if r["status"] == "fail"):
        assert row["detail"].startswith("AttributeError: ") and "kv_shared_layer_index" in row["detail"], row
