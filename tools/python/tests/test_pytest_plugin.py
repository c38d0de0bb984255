"""The pytest plugin, as a kernel library would use it: two lines in its own test module. A correct
backend gives passing tests; a faulty one a failing test whose message lists the failing rows."""
import pytest

PLUGIN_ARGS = ("-p", "no:gemma4_conform", "-p", "gemma4_conform.pytest_plugin")  # as CTest loads it


def run_module(pytester, body, *args):
    pytester.makepyfile(test_kernels=body)
    return pytester.runpytest_subprocess(*PLUGIN_ARGS, *args)


def test_conformance_test_passes_a_correct_backend(pytester, tmp_path):
    result = run_module(pytester, (
        "from gemma4_conform.pytest_plugin import conformance_test\n"
        "test_gemma4 = conformance_test('python_backends:correct', dtypes=['f32', 'bf16'],\n"
        "                               filter='^golden/op/(geglu|rms_norm)')\n"),
        "--gemma4-conform-reports", str(tmp_path))
    result.assert_outcomes(passed=2)
    assert sorted(p.suffix for p in tmp_path.iterdir()) == [".json", ".json", ".xml", ".xml"]


def test_the_fixture_fails_a_faulty_backend_with_its_rows(pytester):
    result = run_module(pytester, (
        "def test_kernels(gemma4_conform):\n"
        "    gemma4_conform('python_backends:window_off_by_one', filter='^golden/op/attention-sliding').assert_passed()\n"))
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*failing results*", "*golden/op/attention-sliding*max_abs=*bound=*"])


def test_cuda_runs_are_skipped_without_a_gpu(pytester):
    import torch
    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    result = run_module(pytester, (
        "from gemma4_conform.pytest_plugin import conformance_test\n"
        "test_gemma4 = conformance_test('python_backends:correct', devices=['cuda'])\n"))
    result.assert_outcomes(skipped=1)
