"""gemma4_conform.read_golden and judge: the C++ policy from Python, the same verdict as the CLI."""
import json
import subprocess

import pytest
import torch

import gemma4_conform as gc

PADDED = "golden/transformers/padded_batch"


def test_read_golden(source_dir):
    g = gc.read_golden(source_dir / "golden/reference/model/e2b.bf16.h5")
    assert (g.kind, g.name, g.dtype) == ("model", "model/e2b", "bf16")
    assert g.expected["outputs/logits"].dtype == torch.float32
    assert set(g.truth) == set(g.expected)
    assert g.config["num_kv_shared_layers"] > 0


def test_read_golden_refuses_a_damaged_file(tmp_path):
    bad = tmp_path / "bad.h5"
    bad.write_bytes(b"not an HDF5 file")
    with pytest.raises(Exception, match="bad.h5"):
        gc.read_golden(bad)


def expected_as_candidate(golden):
    return {name: t.clone() for name, t in golden.expected.items()}


def rows(verdict) -> dict:
    """dataset -> row of the verdict's report (conformance/report.h: a golden check is one run whose
    rows are the datasets, each named by its test)."""
    (run,) = verdict.to_dict()["runs"]
    return {r["test"]: r for r in run["results"]}


def test_judge_a_dict_passes_the_expected_and_fails_one_changed_logit(source_dir):
    g = gc.read_golden(source_dir / "golden/reference/model/e2b.f32.h5")
    verdict = gc.judge(g, expected_as_candidate(g))
    assert verdict.passed and verdict.failures == 0, verdict.table()
    bad = expected_as_candidate(g)
    bad["outputs/logits"][0, 1, 2] += 0.5  # a real position (row 0 has no padding)
    verdict = gc.judge(g, bad)
    assert not verdict.passed
    judged = rows(verdict)
    assert judged["outputs/logits"]["status"] == "fail" and judged["outputs/loss"]["status"] == "pass"
    assert judged["outputs/logits"]["value"] > judged["outputs/logits"]["bound"] > 0


def test_judge_names_missing_unknown_and_not_checked(source_dir):
    g = gc.read_golden(source_dir / "golden/reference/model/e2b.f32.h5")
    candidate = {"outputs/logits": g.expected["outputs/logits"], "outputs/nonsense": torch.zeros(2)}
    judged = rows(gc.judge(g, candidate))
    assert judged["outputs/loss"]["status"] == "fail" and "not in the candidate" in judged["outputs/loss"]["detail"]
    assert judged["outputs/nonsense"]["status"] == "fail"
    forward = gc.judge(g, {"outputs/logits": g.expected["outputs/logits"], "outputs/loss": g.expected["outputs/loss"]},
                       forward_only=True)
    assert forward.passed and forward.not_checked > 0
    grads = [r for t, r in rows(forward).items() if t.startswith("grads/")]
    assert grads and all(r["status"] == "not_supported" and r["detail"].startswith("not checked") for r in grads)


def test_judge_matches_the_cli_on_transformers_outputs(source_dir, cli, tmp_path):
    """transformers computes the candidate (code we did not write); the Python verdict equals
    `gemma4-conform golden check`'s, row for row, and a planted bug fails both."""
    import transformers_candidate as tc
    case = source_dir / PADDED
    golden = case / "golden.bf16.h5"
    inputs = {k: v for k, v in tc.load_file(str(case / "inputs.safetensors")).items()}
    for bug, should_pass in (("none", True), ("attention-scale", False)):
        model = tc.load_model(case, torch.bfloat16, "eager", bug)
        tree = tc.candidate(model, inputs, forward_only=False)
        verdict = gc.judge(golden, tree)
        assert verdict.passed == should_pass, verdict.table()
        path = tmp_path / f"{bug}.h5"
        tc.write(path, tree, {})
        report = tmp_path / f"{bug}.json"
        run = subprocess.run([cli, "golden", "check", str(golden), str(path), "--report",
                              str(report)], capture_output=True, text=True)
        assert run.returncode == (0 if should_pass else 1), run.stderr
        from_file = gc.judge(golden, path)
        (cli_run,) = json.loads(report.read_text())["runs"]
        assert cli_run["results"] == list(rows(from_file).values())
        assert [r["status"] for r in rows(from_file).values()] == [r["status"] for r in rows(verdict).values()]


def test_verdict_writes_json_and_junit(source_dir, tmp_path):
    g = gc.read_golden(source_dir / "golden/reference/op/geglu.bf16.h5")
    verdict = gc.judge(g, expected_as_candidate(g))
    verdict.write_json(str(tmp_path / "v.json"))
    verdict.write_junit(str(tmp_path / "v.xml"))
    assert json.loads((tmp_path / "v.json").read_text())["passed"] is True
    assert "<testsuite" in (tmp_path / "v.xml").read_text()
    assert "verdict" in verdict.table()
