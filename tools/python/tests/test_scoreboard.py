"""The scoreboard (gemma4-scoreboard): the committed page is the command's output,
a real browser renders it with every number equal to the JSON and every link resolving, a broken
adapter turns its row red, and a subject whose package is gone says so instead of failing."""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gemma4_conform import scoreboard
from gemma4_conform.scoreboard.subjects import SUBJECTS
from gemma4_conform.scoreboard.page import file_link_problems, markdown, page, rendered_problems

SOURCE = Path(__file__).resolve().parents[3]
BOARD = SOURCE / "tools/scoreboard"


def committed() -> dict:
    return json.loads((BOARD / "scoreboard.json").read_text())


def test_committed_page_is_the_commands_output(tmp_path):
    assert scoreboard.main(["--render", str(BOARD / "scoreboard.json"), "--out", str(tmp_path)]) == 0
    for name in ("index.html", "scoreboard.md"):
        assert (tmp_path / name).read_text() == (BOARD / name).read_text(), \
            f"tools/scoreboard/{name} is not the output of --render: rebuild it (README, 'Scoreboard')"
    readme = (BOARD / "README.md").read_text()
    assert scoreboard.readme_with(readme, markdown(committed())) == readme, "tools/scoreboard/README.md's table is stale"


def chromium_dom(html_file: Path, profile: Path) -> str:
    """The page's DOM after Debian's Chromium loaded it (headless, as the brief says it runs here)."""
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        # CI (CI=true) has it from the setup; a host without apt-get's network (the GPU host) may not.
        (pytest.fail if os.environ.get("CI") else pytest.skip)("chromium is not installed (ci/build.sh installs it)")
    out = subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                          "--disable-component-update", f"--user-data-dir={profile}", "--dump-dom",
                          html_file.resolve().as_uri()], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and "<table" in out.stdout, out.stderr[-2000:]
    return out.stdout


def test_page_renders_in_chromium_as_the_json_says(tmp_path):
    board = committed()
    problems = rendered_problems(chromium_dom(BOARD / "index.html", tmp_path / "profile"), board)
    assert problems == [], "\n".join(problems)
    assert any(c["verdict"] == "pass" for r in board["rows"] for c in r["cells"].values())


def test_reports_are_their_scripts_and_every_file_link_resolves(tmp_path):
    """Each reproduction script's report (tools/scoreboard/reports/) is what reports.py makes of it now,
    and each file the page links to (the reports of the scripts its triage names) exists. Negative
    controls: a report edited by hand, and a link to a report that is not there."""
    reports = [sys.executable, str(BOARD / "repro" / "reports.py")]
    check = subprocess.run([*reports, "--check"], capture_output=True, text=True)
    assert check.returncode == 0, check.stderr
    index = (BOARD / "index.html").read_text()
    assert 'href="reports/' in index, "no triage links to a report"
    assert file_link_problems(index, BOARD) == []
    assert file_link_problems('<a href="reports/no_such_script.md">x</a>', BOARD) == \
        [f"link reports/no_such_script.md has no file in {BOARD}"]
    copy = tmp_path / "reports"
    shutil.copytree(BOARD / "reports", copy)
    edited = next(iter(sorted(copy.glob("*.md"))))
    edited.write_text(edited.read_text().replace("REPRODUCED", "FIXED", 1) + "\n")
    check = subprocess.run([*reports, "--check", "--out", str(copy)], capture_output=True, text=True)
    assert check.returncode == 1 and f"{edited.name}: differs from its script" in check.stderr


def test_browser_check_catches_a_wrong_number_and_a_dead_link(tmp_path):
    """Negative control: the same check on a page whose JSON says otherwise, and with a broken link."""
    board = committed()
    mutated = json.loads(json.dumps(board))
    row = next(r for r in mutated["rows"] if r["cells"]["golden"]["verdict"] == "pass")
    row["cells"]["golden"] = {"verdict": "fail", "tests": 9, "failed_tests": 2, "worst_ratio": 3.5, "worst_at": "x",
                              "failing": []}
    dom = chromium_dom(BOARD / "index.html", tmp_path / "profile")
    problems = rendered_problems(dom, mutated)
    assert any(p.startswith("row ") and "data-verdict 'pass', the JSON says 'fail'" in p for p in problems), problems
    # the summary line of that implementation sums the row up: its cell must say so too
    assert any(p.startswith("summary ") and "data-verdict 'pass', the JSON says 'fail'" in p for p in problems), problems
    broken = tmp_path / "broken.html"
    broken.write_text(page(board).replace("</h1>", '</h1><a href="#no-such-section">x</a>', 1))
    problems = rendered_problems(chromium_dom(broken, tmp_path / "profile2"), board)
    assert problems == ["link #no-such-section has no target on the page"]


def test_browser_check_catches_a_summary_that_hides_a_failure(tmp_path):
    """Negative control of the summary alone: the committed page with one failing summary cell shown as
    passing (the detail rows untouched) must be reported."""
    board = committed()
    text = page(board)
    start = text.index('<table id="summary">')
    end = text.index("</table>", start)
    summary = text[start:end]
    assert 'data-verdict="fail"' in summary
    tampered = tmp_path / "tampered.html"
    tampered.write_text(text[:start] + summary.replace('data-verdict="fail"', 'data-verdict="pass"', 1) + text[end:])
    problems = rendered_problems(chromium_dom(tampered, tmp_path / "profile"), board)
    assert len(problems) == 1 and problems[0].startswith("summary summary-"), problems
    assert "data-verdict 'pass', the JSON says 'fail'" in problems[0]


def test_a_row_that_cannot_run_says_so_once(monkeypatch):
    """A row that cannot run on its device is one cell across the row (the reason once, not per
    category); the same page with that row cut into cells, as before, is reported (no browser)."""
    import importlib
    page_module = importlib.import_module("gemma4_conform.scoreboard.page")  # the module, not the function page
    board = committed()
    row = next(r for r in board["rows"] if page_module.cannot_run_at_all(r))
    assert rendered_problems(page(board), board) == []
    monkeypatch.setattr(page_module, "cannot_run_at_all", lambda r: False)
    old_style = page(board)
    monkeypatch.undo()
    problems = rendered_problems(old_style, board)
    assert f"row {page_module.row_id(row)}: {len(board['categories'])} cells, the JSON has 1" in problems, problems


def test_history_shows_when_a_bug_came_and_went():
    """transformers' SDPA path over the releases on the board: 5.5.1's use_cache=False bug on KV-shared
    models, fixed in 5.5.2; a page whose history hides a failure is reported (no browser)."""
    from gemma4_conform.scoreboard.summary import history
    board = committed()
    (line,) = [h for h in history(board) if h["name"] == "transformers sdpa"]
    assert [(v, verdict.value) for v, verdict, *_ in line["versions"]] == \
        [("5.5.1", "fail"), ("5.5.2", "pass"), ("5.17.0", "pass")]
    assert "e2b_like" in line["versions"][0][3], line  # the case 5.5.1 fails, named
    assert set(line["versions"][0][2]) == {"multithreaded_recompute", "decode"}
    mutated = json.loads(json.dumps(board))
    row = next(r for r in mutated["rows"] if r["version"] == "5.5.2" and r["cells"]["golden"]["verdict"] == "pass")
    row["cells"]["golden"] = {"verdict": "fail", "tests": 9, "failed_tests": 1, "worst_ratio": 2.0, "failing": []}
    problems = rendered_problems(page(board), mutated)
    assert any(p.startswith("history history-transformers_sdpa:") and "5.5.2:fail" in p for p in problems), problems


def run_board(tmp_path, *args, env=None) -> dict:
    out = tmp_path / "board"
    proc = subprocess.run([sys.executable, "-m", "gemma4_conform", "scoreboard", "--out", str(out), "--dtype", "f32",
                           "--filter", "golden/model/e2b", *args], capture_output=True, text=True, env=env,
                          timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return json.loads((out / "scoreboard.json").read_text())


def test_a_broken_adapter_turns_its_row_red(tmp_path):
    board = run_board(tmp_path, "--subjects", "^transformers eager$",
                      "--add", "eager with window + 1=model_controls:window_off_by_one")
    cells = {r["subject"]: r["cells"]["golden"] for r in board["rows"]}
    assert cells["transformers eager"]["verdict"] == "pass"
    broken = cells["eager with window + 1 (--add)"]
    assert broken["verdict"] == "fail" and broken["worst_ratio"] > 1, broken
    assert "FAIL 1/1" in markdown(board)


def test_the_installed_scoreboard_runs_outside_the_checkout(tmp_path):
    """The installed entry point from a directory outside the checkout, with no PYTHONPATH: the package
    finds its data and the engine's worker by itself (a red row: test_a_broken_adapter_turns_its_row_red)."""
    script = Path(sys.executable).parent / "gemma4-scoreboard"
    if not script.is_file():
        (pytest.fail if os.environ.get("CI") else pytest.skip)("gemma4-scoreboard is not installed here (ci/build.sh)")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    out = tmp_path / "board"
    proc = subprocess.run([str(script), "--out", str(out), "--dtype", "f32", "--filter", "^golden/op/geglu",
                           "--subjects", "^gemma4-conformance (reference|variant-fused-geglu)$"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    board = json.loads((out / "scoreboard.json").read_text())
    cells = {r["subject"]: r["cells"]["golden"]["verdict"] for r in board["rows"]}
    assert cells == {"gemma4-conformance reference": "pass", "gemma4-conformance variant-fused-geglu": "pass"}, board


def test_a_subject_without_its_package_cannot_run_here(tmp_path):
    """transformers made unimportable in the scoreboard's process (sys.modules entry None, as after
    uninstalling it): its rows say why, and nothing is reported as failed."""
    hide = tmp_path / "hide"
    hide.mkdir()
    (hide / "sitecustomize.py").write_text("import sys\nsys.modules['transformers'] = None\n")
    env = dict(os.environ, PYTHONPATH=f"{hide}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    board = run_board(tmp_path, "--subjects", "^transformers (eager|sdpa)$", env=env)
    for row in board["rows"]:
        assert row["ran"] is False
        assert row["why"] == "the Python package 'transformers' is not installed"
        assert {c["verdict"] for c in row["cells"].values()} == {"cannot_run"}


def test_a_venv_subject_runs_its_own_python_and_says_when_it_is_not_built(tmp_path, monkeypatch):
    """google-deepmind's gemma needs Python >= 3.12: its adapter runs with its venv's bin/python (the
    link itself: resolved, it would be the base interpreter without the venv's packages), on a
    PYTHONPATH of the adapters and stand-ins only (this Python's packages would not import there);
    a venv that was not built makes the row "cannot run here", not a failure."""
    import dataclasses

    from gemma4_conform.scoreboard import run, subjects

    jax = next(s for s in subjects.SUBJECTS if s.venv)
    assert jax.adapter_python() == str((subjects.DATA / jax.venv / "bin" / "python").absolute())
    env = run.child_env(jax, run.RunOptions())
    assert env["PYTHONPATH"].split(os.pathsep) == [str(p) for p in (*run.ADAPTER_PATHS, run.STUBS)]
    missing = dataclasses.replace(jax, venv=str(tmp_path / "no-such-venv"))
    assert run.why_cannot_run(missing, "cpu") == f"{missing.venv} is not built (impl/third_party/pinned_envs.sh)"
    built = tmp_path / "venv"
    (built / "lib" / "python3.12" / "site-packages").mkdir(parents=True)
    (built / ".complete").touch()
    empty = dataclasses.replace(jax, venv=str(built))
    assert run.why_cannot_run(empty, "cpu") == "the Python package 'gemma' is not installed"


def test_an_overlay_comes_first_and_each_pinned_environment_must_be_built(tmp_path):
    """vLLM's rows run with transformers 5.13.1 (an overlay) before vLLM's own environment on the
    PYTHONPATH; the other row of the same vLLM sees this environment's transformers. Either directory
    unbuilt makes the row "cannot run here" naming that directory."""
    import dataclasses

    from gemma4_conform.scoreboard import run, subjects

    vllm = [s for s in subjects.SUBJECTS if s.implementation == "vLLM"]
    overlaid = next(s for s in vllm if s.overlay)
    assert any(not s.overlay and s.site == overlaid.site for s in vllm)
    paths = run.child_env(overlaid, run.RunOptions())["PYTHONPATH"].split(os.pathsep)
    assert paths[:2] == [str((subjects.DATA / d).resolve()) for d in (overlaid.overlay, overlaid.site)]
    site, overlay = tmp_path / "site", tmp_path / "overlay"
    for built in (site, overlay):
        built.mkdir()
    (site / ".complete").touch()
    moved = dataclasses.replace(overlaid, site=str(site), overlay=str(overlay), devices=("cpu",))
    assert run.why_cannot_run(moved, "cpu") == f"{overlay} is not built (impl/third_party/pinned_envs.sh)"
    (overlay / ".complete").touch()
    assert run.why_cannot_run(moved, "cpu") == "the Python package 'vllm' is not installed"


def test_a_failed_adapter_is_shown_by_its_exception_not_its_last_log_line():
    """vLLM's engine prints its traceback with a "[rank0]: " prefix and keeps logging after it; the
    cell shows the exception. Without one, the last line that is not a log record."""
    from gemma4_conform.scoreboard.candidates import _last_error

    out = ("[rank0]: Traceback (most recent call last):\n[rank0]:   File \"x.py\", line 1\n"
           "[rank0]: ModuleNotFoundError: No module named 'cutlass'\n"
           "WARNING 11-30 01:11:39 [jit_monitor.py:129] Triton kernel JIT compilation during inference\n")
    assert _last_error(out) == "ModuleNotFoundError: No module named 'cutlass'"
    assert _last_error("loading\nthe loader gave up\nWARNING 11-30 01:11:39 [x.py:1] late\n") == "the loader gave up"
    assert _last_error("") == "no output"


def test_vllm_teacher_forcing_follows_each_request_through_the_batch(monkeypatch):
    """vllm_candidate.py's decode verdict rests on its logits processor forcing each request's k-th
    token to the case's, whatever row vLLM's persistent batch keeps the request in (requests are
    added, removed, swapped and moved between steps). Checked against vLLM 0.25's interface, stood in
    for here (vLLM runs on the GPU host only): a processor that ignored the moves would force the
    wrong row below; unforced rows are left as they are."""
    import dataclasses
    import enum
    import types

    import torch

    monkeypatch.syspath_prepend(str(SOURCE / "impl" / "third_party"))

    class MoveDirectionality(enum.Enum):
        UNIDIRECTIONAL = 1
        SWAP = 2

    @dataclasses.dataclass(frozen=True)
    class BatchUpdate:
        batch_size: int
        removed: list
        added: list
        moved: list

    interface = types.ModuleType("vllm.v1.sample.logits_processor")
    interface.BatchUpdate, interface.MoveDirectionality = BatchUpdate, MoveDirectionality
    interface.LogitsProcessor = type("LogitsProcessor", (), {})
    for name in ("vllm", "vllm.v1", "vllm.v1.sample"):
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    monkeypatch.setitem(sys.modules, "vllm.v1.sample.logits_processor", interface)
    monkeypatch.delitem(sys.modules, "vllm_candidate", raising=False)
    import vllm_candidate

    force = vllm_candidate.force_tokens_processor()(None, "cpu", False)
    forced, plain = types.SimpleNamespace(extra_args={"forced": [5, 7, 9]}), types.SimpleNamespace(extra_args=None)
    out = []  # the forced request's running output tokens (vLLM appends to this list)
    force.update_state(BatchUpdate(2, [], [(0, forced, [1], out), (1, plain, [2], [])], []))

    def argmax_after_apply() -> list:
        logits = torch.zeros(2, 12)
        logits[:, 3] = 1.0  # what an unforced row samples
        return force.apply(logits).argmax(-1).tolist()

    assert argmax_after_apply() == [5, 3]
    out.append(5)
    assert argmax_after_apply() == [7, 3]
    force.update_state(BatchUpdate(2, [], [], [(0, 1, MoveDirectionality.SWAP)]))
    out.append(7)
    assert argmax_after_apply() == [3, 9]
    force.update_state(BatchUpdate(1, [0], [], [(1, 0, MoveDirectionality.UNIDIRECTIONAL)]))
    assert argmax_after_apply() == [9, 3]
    force.update_state(BatchUpdate(0, [0], [], []))
    assert argmax_after_apply() == [3, 3]
    force.update_state(None)  # no change to the batch
    assert argmax_after_apply() == [3, 3]


def test_merge_joins_boards_and_refuses_other_categories():
    cpu = committed()
    gpu = json.loads(json.dumps(cpu))
    for row in gpu["rows"]:
        row["device"] += "-2"  # another host's rows: ids differ from the committed ones
    gpu["machine"] = "a GPU host"
    board = scoreboard.merged([cpu, gpu])
    assert len(board["rows"]) == 2 * len(cpu["rows"]) and board["machine"] == f"{cpu['machine']}; a GPU host"
    assert rendered_problems(page(board), board) == []  # the page's own HTML, parsed without a browser
    # rows in the subjects' order, each subject's rows as the boards gave them (the CPU's, then the GPU's)
    names = [s.name for s in SUBJECTS]
    ranks = [names.index(r["subject"]) for r in board["rows"]]
    assert ranks == sorted(ranks) and board["rows"][0]["subject"] == names[ranks[0]]
    first = [r for r in board["rows"] if r["subject"] == board["rows"][0]["subject"]]
    assert [r["device"].endswith("-2") for r in first] == sorted(r["device"].endswith("-2") for r in first)
    rerun = {**gpu, "rows": [dict(gpu["rows"][0], version="rerun")]}
    replaced = scoreboard.merged([cpu, gpu, rerun])  # a later board's row replaces the same row, in place
    key = lambda r: (r["subject"], r["device"], r["dtype"])  # noqa: E731
    assert [key(r) for r in replaced["rows"]] == [key(r) for r in board["rows"]]
    assert [r["version"] for r in replaced["rows"] if key(r) == key(gpu["rows"][0])] == ["rerun"]
    gpu["categories"] = gpu["categories"][:-1]
    with pytest.raises(SystemExit, match="different categories"):
        scoreboard.merged([cpu, gpu])


def candidate(spec: str, *adapter_args: str, site: str = "") -> "Subject":
    from gemma4_conform.scoreboard.subjects import Subject, SubjectKind
    return Subject("candidate", spec.rsplit("/", 1)[-1], SubjectKind.CANDIDATE, spec, fixed_version="-",
                   devices=("cpu",), adapter_args=adapter_args, site=site)


def candidate_cell(subject, dtype: str = "f32") -> dict:
    from gemma4_conform.scoreboard.run import RunOptions, run_subject
    row = run_subject(subject, "cpu", dtype, RunOptions(timeout=300, filter="transformers/e2b_like$"), "-")
    return row["cells"]["golden"] if row["ran"] else {"verdict": "cannot_run", "why": row["why"]}


def test_candidate_subjects_judge_another_frameworks_files(tmp_path, monkeypatch):
    """A candidate adapter (here transformers itself, through golden/generators/transformers_candidate.py,
    which takes the adapters' command line) passes; the same adapter with one planted bug turns red;
    an adapter that says 'not supported' is not failed, one that crashes is, with its error line; a
    pinned environment that is not built cannot run."""
    monkeypatch.chdir(SOURCE)  # subjects name paths from the repository root, as the scoreboard runs
    writer = "golden/generators/transformers_candidate.py"
    assert candidate_cell(candidate(writer)) == {"verdict": "pass", "tests": 1, "judged_tests": 1}
    broken = candidate_cell(candidate(writer, "--bug", "attention-scale"))
    assert broken["verdict"] == "fail" and broken["worst_ratio"] > 1 and broken["failing"][0]["case"], broken
    refusing = tmp_path / "refusing.py"
    refusing.write_text("import sys\nprint('not supported: no such dtype here', file=sys.stderr)\nsys.exit(3)\n")
    assert candidate_cell(candidate(str(refusing))) == {"verdict": "not_supported", "tests": 1,
                                                        "why": "no such dtype here"}
    crashing = tmp_path / "crashing.py"
    crashing.write_text("raise ValueError('Expected shape (2048, 40)\\n  but received (128, 40)')\n")
    crashed = candidate_cell(candidate(str(crashing)))
    assert crashed["verdict"] == "fail" and crashed["failing"][0]["detail"] == \
        "exit 1: ValueError: Expected shape (2048, 40) but received (128, 40)", crashed
    unbuilt = candidate_cell(candidate(writer, site=str(tmp_path / "not-built")))
    assert unbuilt["verdict"] == "cannot_run" and "is not built" in unbuilt["why"]


def test_vllm_adapter_refuses_a_bidirectional_model_before_loading_anything(tmp_path):
    """vLLM returns logits only at the end of a prompt, so a model whose tokens attend to later ones
    cannot be judged through it: the adapter says "not supported" with the reason (vLLM is not needed
    to get there), and a causal case goes on to load vLLM (absent here: a plain failure, not that reason)."""
    adapter = SOURCE / "impl" / "third_party" / "vllm_candidate.py"
    env = {**os.environ, "PYTHONPATH": str(SOURCE / "impl" / "third_party")}

    def run(case: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, str(adapter), str(SOURCE / "golden" / "transformers" / case), "--device",
                               "cuda", "--dtype", "bf16", "--forward-only", "--out", str(tmp_path / f"{case}.h5")],
                              capture_output=True, text=True, env=env, timeout=120)

    bidirectional, causal = run("bidirectional"), run("dense_keqv")
    assert bidirectional.returncode == 3, bidirectional.stderr
    assert "not supported: a bidirectional model" in bidirectional.stderr
    assert causal.returncode != 3 and "bidirectional" not in causal.stderr, causal.stderr


def test_a_row_the_harness_breaks_on_is_not_judged_and_the_rest_are_kept(tmp_path, monkeypatch, capsys):
    """An exception out of one row's run (the scoreboard's own failure, such as a reader that hung) no
    longer takes the whole board down: that row says "not judged" with the error, the other rows and
    the page are written, and the exit status is 1 with the row named; without the failure, 0."""
    from gemma4_conform.scoreboard import run as run_module
    real = run_module.run_subject

    def breaking(subject, *args):
        if "5.17.0" in subject.name:
            raise RuntimeError("golden.f16.h5: malformed file: reading it did not finish in 60 s")
        return real(subject, *args)

    command = ["--device", "cpu", "--dtype", "bf16", "--subjects", "^vLLM"]  # rows that cannot run: quick
    assert scoreboard.main(["--out", str(tmp_path / "plain"), *command]) == 0
    monkeypatch.setattr(scoreboard, "run_subject", breaking)
    assert scoreboard.main(["--out", str(tmp_path / "broken"), *command]) == 1
    rows = json.loads((tmp_path / "broken" / "scoreboard.json").read_text())["rows"]
    assert len(rows) == 3 and (tmp_path / "broken" / "index.html").is_file()
    (broken,) = [r for r in rows if "5.17.0" in r["subject"]]
    assert broken["why"].startswith("not judged: the scoreboard failed: RuntimeError: golden.f16.h5"), broken
    assert {c["verdict"] for c in broken["cells"].values()} == {"not_run"}
    assert all(r["cells"]["golden"]["verdict"] == "cannot_run" for r in rows if r is not broken)
    assert "error: vLLM prefill (FlashAttention 3, transformers 5.17.0) cpu bf16: not judged" in capsys.readouterr().err


def test_a_cell_keeps_a_failing_row_of_every_failing_test():
    """One case with more failing tensors than a cell keeps (bidirectional's 57 in EasyDeL's row) must not
    push another failing case out of the kept rows, which the page links and the history names."""
    from gemma4_conform.scoreboard.run import FAILING_ROWS_KEPT, kept_failing
    failing = [{"test": "transformers/bidirectional", "case": f"grads/{i}"} for i in range(FAILING_ROWS_KEPT + 5)]
    failing.append({"test": "transformers/e2b_like", "case": ""})
    kept = kept_failing(failing)
    assert len(kept) == FAILING_ROWS_KEPT and {r["test"] for r in kept} == {r["test"] for r in failing}
    assert kept[0] == failing[0]  # the first failing row stays first


def test_triage_goes_to_rows_that_ran_or_fail():
    """A GPU-only subject's CPU rows (could not run, fail nothing) get no triage; the GPU row that ran
    does, and so does a row that ended without a report (did not run, and fails)."""
    cannot = {"verdict": "cannot_run", "why": "runs on cuda only"}
    board = {"rows": [{"subject": "x y", "device": "cpu", "ran": False, "cells": {"golden": cannot}},
                      {"subject": "x y", "device": "cuda", "ran": True, "cells": {"golden": {"verdict": "pass"}}},
                      {"subject": "x y", "device": "cuda", "ran": False, "cells": {"golden": {"verdict": "fail"}}}]}
    rows = scoreboard.with_triage(board, {"x y": "why it fails"})["rows"]
    assert [r.get("triage") for r in rows] == [None, "why it fails", "why it fails"]
