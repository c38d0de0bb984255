"""Backends made of Python callables, through the whole C++ suite: plain-PyTorch ops pass in every
dtype (autograd's other threads and two models in two threads included), each faulty op fails
where its bug shows, and a broken op or factory is a failure row or one line, never a crash."""
import json
import subprocess
import sys

import pytest

import gemma4_conform as gc

# A deadlock between the GIL and the suite's threads would hang: every run has a deadline.
DEADLINE_S = 600


def conform(tmp_path, spec, *args):
    report = tmp_path / "report.json"
    proc = subprocess.run([sys.executable, "-m", "gemma4_conform", "conform", "--backend", spec, "--report",
                           str(report), *args], capture_output=True, text=True, timeout=DEADLINE_S)
    return proc, (json.loads(report.read_text()) if report.exists() else None)


def results(report: dict) -> list:
    """Every row of the report (conformance/report.h: one run per backend, device and dtype)."""
    return [r for run in report["runs"] for r in run["results"]]


# f16 is the GPU test stage's (ci/gpu/test.sh, step python: this backend in f32, bf16 and f16 on
# CUDA): on a CPU without AVX512-FP16 it ran at a tenth of f32's speed, a third of this file's time.
@pytest.mark.parametrize("dtype", ["f32", "bf16"])
def test_plain_pytorch_ops_pass_the_whole_suite(tmp_path, dtype):
    # real_size: minutes per dtype on a CPU; the test below runs its E2B checks in f32.
    proc, report = conform(tmp_path, "python_backends:correct", "--dtype", dtype, "--filter", "^(?!real_size/)")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    categories = {r["category"] for r in results(report) if r["status"] == "pass"}
    assert {"golden", "op_sweep", "finite_grads", "multithreaded_recompute", "memory_flatness", "decode"} <= categories
    threads = [r for r in results(report) if r["category"] == "multithreaded_recompute"]
    assert any("two" in r["test"] for r in threads), "two models in two threads must have run"
    assert [run["subject"] for run in report["runs"]] == ["python-all-ops"] and report["passed"]


def test_plain_pytorch_ops_and_ring_cache_pass_real_size_e2b(tmp_path):
    """E2B at head dims 256/512, window 512, S = 1025 (golden/real): forward and backward, and the
    ring cache wrapped, plainly and with speculative drafts rolled back."""
    proc, report = conform(tmp_path, "python_backends:correct", "--filter", "^real_size/(golden|decode|speculative)/e2b$")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert {r["test"].split(" ")[0] for r in results(report) if r["status"] == "pass"} >= {
        "real_size/golden/e2b", "real_size/decode/e2b", "real_size/speculative/e2b"}, proc.stdout[-2000:]


def test_an_fp8_kv_cache_declared_as_such_passes_decode(tmp_path):
    """Judged against the reference decoding through a cache rounded to e4m3 alike, with its envelope
    against the float model among the run's measurements (the legitimate twin of fp8_kv_k_as_v)."""
    proc, report = conform(tmp_path, "python_backends:fp8_kv_cache", "--dtype", "bf16", "--filter",
                           "^decode/(equivalence|speculative|transformers)/e2b")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    names = {m["name"] for run in report["runs"] for m in run.get("measurements", [])}
    assert "decode/transformers/e2b_like/envelope/decode/kld_mean" in names, sorted(names)[:5]


def test_cache_quantization_is_checked_by_name():
    with pytest.raises(Exception, match="cache_quantization.*fp8-e4m3-per-head"):
        gc.Backend("bad", cache_quantization="fp8-e5m2", cache_make=lambda spec: None, cache_update=lambda *a: None,
                   cache_attention=lambda *a: None, cache_contents=lambda cache: None)._cpp()


# Each Python op's bug, and where the suite must see it (f32: exact GELU is below bf16 resolution).
FAULTY = [
    ("window_off_by_one", "attention", "golden|op_sweep"),
    ("gelu_exact", "geglu", "golden|op_sweep"),
    ("one_plus_w_norm", "rms_norm", "golden"),
    ("interleaved_rope", "qk_norm_rope", "golden|op_sweep"),
    ("moe_gate_up_swapped", "moe_experts", "golden"),
    ("decode_window_plus_one", "cache_attention", "decode"),
    ("decode_rollback_without_spare_slots", "cache_make", "decode"),
    ("fp8_kv_k_as_v", "cache_make (fp8 codes)", "decode"),
]


@pytest.mark.parametrize("factory,op,categories", FAULTY, ids=[f[0] for f in FAULTY])
def test_each_faulty_python_op_fails(tmp_path, factory, op, categories):
    proc, report = conform(tmp_path, f"python_backends:{factory}", "--filter", f"^({categories})/")
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    failed = {r["category"] for r in results(report) if r["status"] == "fail"}
    assert failed == set(categories.split("|")), f"{op}: failed in {failed}"


def test_an_op_that_raises_is_a_failure_row_with_its_message(tmp_path):
    proc, report = conform(tmp_path, "python_backends:raises", "--filter", "^golden/op/geglu")
    assert proc.returncode == 1
    details = [r["detail"] for r in results(report) if r["status"] == "fail"]
    assert details and all("kernel exploded" in d and "geglu" in d for d in details), details


def test_an_op_that_returns_no_tensor_is_named(tmp_path):
    proc, report = conform(tmp_path, "python_backends:wrong_return", "--filter", "^golden/op/geglu")
    assert proc.returncode == 1
    assert any("not a torch.Tensor" in r["detail"] for r in results(report))


@pytest.mark.parametrize("spec,message,code", [
    ("python_backends:factory_raises", "factory_raises() raised RuntimeError: no GPU here", 1),
    ("python_backends:not_a_backend", "returned int, not gemma4_conform.Backend", 1),
    ("python_backends:cache_ops_incomplete", "a KV cache needs all four cache ops; missing cache_contents", 1),
    ("python_backends:missing", "has no attribute 'missing'", 1),
    ("no_such_module_here:backend", "cannot import no_such_module_here", 1),
    # no colon: an in-tree backend name, which the CLI refuses as a usage error
    ("python_backends", "--backend 'python_backends' matches no backend", 2),
])
def test_a_bad_factory_is_one_line(tmp_path, spec, message, code):
    proc, report = conform(tmp_path, spec)
    assert proc.returncode == code and report is None, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], proc.stderr
    assert code == 2 or "error" in lines[0]  # a factory's fault: "... conform: error: ..."


def test_help_names_the_factory_option():
    out = subprocess.run([sys.executable, "-m", "gemma4_conform", "conform", "--backend", "python_backends:correct",
                          "--help"], capture_output=True, text=True)
    assert out.returncode == 0 and "MODULE:FACTORY" in out.stdout
    top = subprocess.run([sys.executable, "-m", "gemma4_conform", "--help"], capture_output=True, text=True)
    assert top.returncode == 0 and "conform" in top.stdout and "golden" in top.stdout


def test_in_process_conform_runs_any_number_of_times(tmp_path):
    """Three suites in one process: a correct backend, a faulty one (its failure must not leak into
    the next run) and the correct one again, each with its own verdict and rows."""
    script = (
        "import gemma4_conform as gc, python_backends as pb\n"
        "first = gc.conform(pb.correct(), filter='^golden/op/geglu')\n"
        "faulty = gc.conform(pb.gelu_exact(), filter='^golden/op/geglu')\n"
        "again = gc.conform(pb.correct(), filter='^golden/op/(geglu|rms_norm)')\n"
        "print('verdicts', first.passed, faulty.passed, again.passed)\n"
        "print('rows', len(first.results), len(faulty.failures), len(again.results))\n")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=DEADLINE_S)
    assert out.returncode == 0, out.stderr[-3000:]
    verdicts = next(line for line in out.stdout.splitlines() if line.startswith("verdicts"))
    assert verdicts == "verdicts True False True", out.stdout[-3000:]
    first, faulty, again = map(int, next(ln for ln in out.stdout.splitlines() if ln.startswith("rows")).split()[1:])
    assert first > 0 and faulty > 0 and again > first


def test_backend_arguments_are_checked():
    with pytest.raises(TypeError, match="geglu must be callable"):
        gc.Backend("x", geglu=3)
    with pytest.raises(ValueError, match="dtypes"):
        gc.Capabilities(dtypes=["fp8"])
    with pytest.raises(ValueError, match="needs a name"):
        gc.Backend("")
