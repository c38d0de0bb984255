"""Candidate subjects: another framework's Gemma-4 (mlx-lm, keras-hub, llama.cpp, ...) judged through
`golden check`, the way a user of any language is judged (golden/FORMAT.md, "Candidate files").

For each golden/transformers/<case> with a golden of the dtype (_core.committed_goldens), the subject's adapter
(impl/third_party/<name>_candidate.py, its contract in impl/third_party/candidate_io.py) runs in a child
process, in the subject's pinned environment, and writes a candidate file; `golden check`, in a child
process too (golden_check), compares it with the golden. The result is a report like conform's: one test per case ("transformers/<case>", category
golden), one row per dataset (its name in the row's `case`). An adapter that exits NOT_SUPPORTED makes
its case "not supported" with the adapter's reason; any other exit, or a timeout, fails the case with
the implementation's last error line (a loader that refuses the checkpoint fails, it is not excused).
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from .. import _core
from .subjects import DATA

NOT_SUPPORTED = 3  # impl/third_party/candidate_io.py's exit status
ADAPTERS = DATA / "impl" / "third_party"


def cases(dtype: str) -> list[Path]:
    """The transformers cases that have a golden in `dtype` and their config.json."""
    return [Path(g.case_dir) for g in _core.committed_goldens(dtype)
            if g.group == _core.GoldenGroup.transformers and (Path(g.case_dir) / "config.json").is_file()]


def _row(test: str, status, detail: str) -> dict:
    """A report row without a measurement (the adapter refused or failed): the report module's Result."""
    return _core.Result(category=_core.Category.golden, test=test, case="", status=status, detail=detail).to_dict()


def _last_error(text: str) -> str:
    """The last exception of a child's output ("ValueError: ..." and its continuation lines), else its
    last line that is not a log record: one line for the page. A distributed worker's "[rank0]: " prefix
    is dropped (vLLM's engine prints its traceback so), and its log records ("WARNING 11-30 ...") are
    not the error."""
    lines = [re.sub(r"^\[rank\d+\]:\s*", "", line).strip() for line in text.strip().splitlines()]
    records = re.compile(r"^(DEBUG|INFO|WARNING)\b")
    logged, lines = [line for line in lines if line], [line for line in lines if line and not records.match(line)]
    starts = [i for i, line in enumerate(lines) if re.match(r"^[\w.]+(Error|Exception|Exit)\b", line)]
    if starts:
        return " ".join(lines[starts[-1]:])[:300]
    return (lines or logged or ["no output"])[-1][:300]


class GoldenCheckError(Exception):
    """`golden check` ended without a report (a file it could not read); the message is one line."""


def golden_check(golden: Path, candidate: Path, forward_only: bool, timeout: float,
                 envelope: Path | None = None) -> dict:
    """`golden check` of a candidate file, run in a child process: its report's one run ({"results",
    "measurements"}). Not in this process: the scoreboard judges from several threads at once, and a
    file from outside is first read in a forked child (golden/untrusted.h), which in a multithreaded
    process can inherit a lock that another thread held at the fork and wait on it forever (seen on the
    H200 with six rows at once: "reading it did not finish in 60 s" for a tiny golden)."""
    with tempfile.TemporaryDirectory() as work:
        report = Path(work) / "report.json"
        command = [sys.executable, "-m", "gemma4_conform", "golden", "check", str(golden), str(candidate), "--quiet",
                   "--report", str(report), *(["--forward-only"] if forward_only else []),
                   *(["--envelope", str(envelope)] if envelope else [])]
        try:
            proc = subprocess.run(command, capture_output=True, text=True, timeout=timeout,
                                  env={**os.environ, "OMP_NUM_THREADS": "1"})
        except subprocess.TimeoutExpired:
            raise GoldenCheckError(f"golden check timed out after {timeout:.0f} s") from None
        if not report.is_file():
            raise GoldenCheckError(f"golden check: exit {proc.returncode}: {_last_error(proc.stderr + proc.stdout)}")
        return json.loads(report.read_text())["runs"][0]


def judge_case(subject, case: Path, device: str, dtype: str, timeout: float, work: Path, env: dict) -> list[dict]:
    """The rows of one case: the adapter run, then golden check of what it wrote."""
    test = f"transformers/{case.name}"
    out = work / f"{case.name}.{dtype}.h5"
    command = [subject.adapter_python(), str(DATA / subject.spec), str(case), "--device", device, "--dtype", dtype, "--out", str(out),
               *subject.adapter_args]
    if subject.forward_only:
        command.append("--forward-only")
    env = {**env, "PYTHONPATH": os.pathsep.join([str(ADAPTERS.resolve()), env.get("PYTHONPATH", "")])}
    try:
        proc = subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return [_row(test, _core.Status.FAIL, f"the adapter timed out after {timeout:.0f} s")]
    if proc.returncode == NOT_SUPPORTED:
        reason = [line for line in proc.stderr.splitlines() if line.startswith("not supported: ")]
        why = reason[-1].removeprefix("not supported: ") if reason else "not supported"
        return [_row(test, _core.Status.NOT_SUPPORTED, why)]
    if proc.returncode != 0 or not out.is_file():
        return [_row(test, _core.Status.FAIL, f"exit {proc.returncode}: {_last_error(proc.stderr + proc.stdout)}")]
    try:
        verdict = golden_check(case / f"golden.{dtype}.h5", out, subject.forward_only, timeout)
    except GoldenCheckError as e:
        return [_row(test, _core.Status.FAIL, str(e))]
    rows = []
    for r in verdict["results"]:
        rows.append({**r, "category": "golden", "test": test, "case": r["test"]})
    return rows


def candidate_report(subject, device: str, dtype: str, timeout: float, checks: str, env: dict) -> dict:
    """Every case of `dtype` whose test name `checks` matches (re.search; "" = all), as one report."""
    rows = []
    with tempfile.TemporaryDirectory() as work:
        for case in cases(dtype):
            if checks and not re.search(checks, f"transformers/{case.name}"):
                continue
            rows += judge_case(subject, case, device, dtype, timeout, Path(work), env)
    return {"runs": [{"subject": subject.name, "device": device, "dtype": dtype, "results": rows}]}


def quantized_width(quant: str) -> str:
    """quantized_cases.py's --width: K-quants need rows of whole 256-element super-blocks ("blocks"),
    else llama.cpp stores their tensors in fallback types; the others run at the reduced widths."""
    return "blocks" if "_K" in quant else "reduced"


def stored_model(case: Path, quant: str) -> list[str]:
    """The adapter's option naming the quantized model quantized_cases.py stored in the case."""
    if quant.startswith("mlx-"):
        return ["--mlx-model", str(case / "mlx")]
    if quant.startswith("torchao-"):
        return ["--torchao-model", str(case / "torchao")]
    return ["--gguf", str(case / f"model.{quant}.gguf")]


def _envelope(measurements: list[dict]) -> dict:
    """The run's measurements ("envelope/all/kld_mean": value) as {subject: {split: {metric: value}}}."""
    out: dict = {}
    for m in measurements:
        who, split, metric = m["name"].split("/")
        out.setdefault(who, {}).setdefault(split, {})[metric] = m["value"]
    return out


# Where a backend with a quantized KV cache has its envelope measured (conformance/checks_decode.cpp),
# the first of these its run has: the real-size E2B decode golden (trained-like weights), else the
# tiny E2B-like one.
ENVELOPE_TESTS = ("real_size/decode/e2b", "decode/transformers/e2b_like")


def backend_envelope(measurements: list[dict]) -> tuple[str, dict]:
    """A conform run's measurements ("<test>/envelope/all/kld_mean") as (test, _envelope's form) of the
    first of ENVELOPE_TESTS measured; ("", {}) without any."""
    by_test: dict[str, list[dict]] = {}
    for m in measurements:
        test, name = m["name"].rsplit("/", 3)[0], "/".join(m["name"].rsplit("/", 3)[1:])
        by_test.setdefault(test, []).append({**m, "name": name})
    for test in ENVELOPE_TESTS:
        if test in by_test:
            return test, _envelope(by_test[test])
    return "", {}


def quantized_report(subject, device: str, timeout: float, env: dict) -> tuple[dict, dict]:
    """A quantized subject's report and envelope: the model made and quantized (quantized_cases.py, in
    the subject's environment: llama.cpp's converter and quantizer), the bf16 golden's baseline filled
    (golden baseline), the adapter run on the quantized file, then `golden check` with the float model's
    golden for the envelope (golden_check); a subject that decodes (Subject.decode_from_window_edge) is run again
    decoding from 40 tokens before the window edge, judged by the same golden (a third test). Every
    step that fails is one failing row with its last error line."""
    quant, width = subject.quantization, quantized_width(subject.quantization)
    label = "e2b" if width == "reduced" else "e2b-blocks"
    test = f"quantized/{label}-{quant}"
    env = {**env, "PYTHONPATH": os.pathsep.join([str(ADAPTERS.resolve()), env.get("PYTHONPATH", "")])}
    with tempfile.TemporaryDirectory() as work:
        case = Path(work) / f"{label}-{quant}"

        def adapter(out: Path, *more: str) -> list[str]:
            return [sys.executable, str(DATA / subject.spec), str(case), *stored_model(case, quant), "--dtype", "bf16",
                    "--forward-only", "--device", device, "--out", str(out), *more]

        steps = [
            ("quantized_cases.py", [sys.executable, str(DATA / "golden" / "generators" / "quantized_cases.py"), "--out",
                                    work, "--types", quant, "--width", width]),
            ("golden baseline", [sys.executable, "-m", "gemma4_conform", "golden", "baseline",
                                 str(case / "golden.bf16.h5")]),
            ("the adapter", adapter(case / "candidate.h5")),
        ]
        for what, command in steps:
            try:
                proc = subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=env)
            except subprocess.TimeoutExpired:
                return {"runs": [{"results": [_row(test, _core.Status.FAIL, f"{what} timed out after {timeout:.0f} s")]}]}, {}
            if proc.returncode == NOT_SUPPORTED:
                return {"runs": [{"results": [_row(test, _core.Status.NOT_SUPPORTED, _last_error(proc.stderr))]}]}, {}
            if proc.returncode != 0:
                why = f"{what}: exit {proc.returncode}: {_last_error(proc.stderr + proc.stdout)}"
                return {"runs": [{"results": [_row(test, _core.Status.FAIL, why)]}]}, {}
        try:
            verdict = golden_check(case / "golden.bf16.h5", case / "candidate.h5", True, timeout,
                                   envelope=Path(work) / label / "golden.f32.h5")
        except GoldenCheckError as e:
            return {"runs": [{"results": [_row(test, _core.Status.FAIL, str(e))]}]}, {}
        # Two tests: the outputs against the dequantized reference, and the file's tensors against their types.
        rows = [{**r, "category": "golden", "test": f"{test}/weights" if r["test"].startswith("weights/") else test,
                 "case": r["test"].removeprefix("weights/")} for r in verdict["results"]]
        if subject.decode_from_window_edge:  # a third: the same outputs through the decode path
            window = json.loads((case / "config.json").read_text())["sliding_window"]
            proc = subprocess.run(adapter(case / "decoded.h5", "--decode-from", str(window - 40)), capture_output=True,
                                  text=True, timeout=timeout, env=env)
            if proc.returncode != 0:
                rows.append(_row(f"{test}/decode", _core.Status.FAIL,
                                 f"the adapter, decoding: exit {proc.returncode}: {_last_error(proc.stderr + proc.stdout)}"))
            else:
                try:
                    decoded = golden_check(case / "golden.bf16.h5", case / "decoded.h5", True, timeout)
                    rows += [{**r, "category": "golden", "test": f"{test}/decode", "case": r["test"]}
                             for r in decoded["results"] if not r["test"].startswith("weights/")]
                except GoldenCheckError as e:
                    rows.append(_row(f"{test}/decode", _core.Status.FAIL, str(e)))
    return {"runs": [{"results": rows}]}, _envelope(verdict.get("measurements", []))
