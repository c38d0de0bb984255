"""One mutation campaign's machinery: a private clone and build of the repository, one mutant at a
time written into it, rebuilt, judged by `gemma4-conform conform`, and restored, even after a kill."""

from __future__ import annotations

import argparse
import contextlib
import datetime as _dt
import hashlib
import json
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from mutants import Candidate

TARGET = "gemma4-conform"
# The GoogleTest binaries that test the reference directly: its own tests, and the golden tests that
# hold the generator to the committed files.
UNIT_TEST_TARGETS = ("test_reference", "test_golden")


def log(msg: str = "") -> None:
    print(msg, flush=True)


def run(cmd: List[str], **kw) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, check=True, text=True, capture_output=True, **kw)


def git(repo: Path, *args: str) -> str:
    return run(["git", "-C", str(repo), *args]).stdout


def now() -> str:
    return _dt.datetime.now().astimezone().isoformat(timespec="seconds")


def sha256_bytes(b: bytes) -> str:
    return hashlib.sha256(b).hexdigest()


class Interrupted(Exception):
    pass


def _raise_interrupt(signum, frame):  # noqa: ARG001
    raise Interrupted("signal %d" % signum)


def build_env(base: Dict[str, str]) -> Dict[str, str]:
    env = dict(base)
    # Hide nvcc: the fused CUDA backend is not what is under test, and it would cost a lot to build.
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if "cuda" not in p.lower())
    for var in ("CUDACXX", "CUDA_PATH", "CUDA_HOME", "CUDAToolkit_ROOT"):
        env.pop(var, None)
    return env


def run_logged(cmd: List[str], log_path: Path, env: Dict[str, str], cwd: Optional[Path] = None,
               timeout: Optional[float] = None, data_limit: int = 0) -> Tuple[Optional[int], float, bool]:
    """Runs cmd under `nice -n 19` in its own process group, output to log_path. Returns
    (returncode or None on timeout, seconds, timed_out). Ctrl-C and errors kill the group."""
    def limit():
        if data_limit > 0:
            resource.setrlimit(resource.RLIMIT_DATA, (data_limit, data_limit))

    t0 = time.monotonic()
    with open(log_path, "w") as out:
        proc = subprocess.Popen(["nice", "-n", "19", *cmd], stdout=out, stderr=subprocess.STDOUT, env=env,
                                cwd=str(cwd) if cwd else None, start_new_session=True, preexec_fn=limit)
        try:
            rc = proc.wait(timeout=timeout)
            return rc, time.monotonic() - t0, False
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            return None, time.monotonic() - t0, True
        except BaseException:
            _kill_group(proc)
            raise


def _kill_group(proc: subprocess.Popen) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=10)
            return
        except subprocess.TimeoutExpired:
            continue


def tail(path: Path, lines: int = 30) -> List[str]:
    try:
        with open(path, errors="replace") as f:
            return [l.rstrip("\n") for l in f.readlines()[-lines:]]
    except OSError:
        return []


def write_json_atomic(path: Path, data) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".report.", dir=str(path.parent))
    with os.fdopen(fd, "w") as f:
        json.dump(data, f, indent=2)
        f.write("\n")
    os.replace(tmp, path)


def line_of(text: str, line: int) -> str:
    lines = text.split("\n")
    return lines[line - 1] if 0 < line <= len(lines) else ""

# killed: conform failed; timeout: conform ran past the limit (counted as killed); unit_tests: conform
# passed but the reference's own unit tests (test_reference) fail, which happens for plumbing that no
# backend implements (config defaults); survived: both passed; build_failed and equivalent (object
# code identical to the original) are not judged.
VERDICTS = ("killed", "timeout", "unit_tests", "survived", "build_failed", "equivalent")


class Campaign:
    def __init__(self, args: argparse.Namespace, repo: Path, commit: str):
        self.args = args
        self.repo = repo
        self.commit = commit
        self.workdir = Path(args.workdir).resolve()
        self.src = self.workdir / "src"
        self.build = self.workdir / "build"
        self.logs = self.workdir / "logs"
        self.restore_dir = self.workdir / "restore"
        self.env = build_env(os.environ)
        if args.shared_dir:
            self.env["GEMMA4_SHARED_DIR"] = str(args.shared_dir)
        # tools/git_sha.cmake would mark the mutated tree "-dirty" and rewrite git_sha.h, costing
        # recompiles; a fixed value keeps the build incremental.
        self.env["GEMMA4_GIT_SHA"] = commit[:12] + "-mutation"
        self.data_limit = int(args.memory_limit_gb * (1 << 30)) if args.memory_limit_gb > 0 else 0
        self.pristine_obj: Dict[str, str] = {}
        self.objects: Dict[str, Path] = {}

    # -- the private tree ------------------------------------------------------------------------

    def check_workdir_safe(self) -> None:
        main = self.repo.resolve()
        w = self.workdir
        if w == main or main in w.parents or w in main.parents:
            sys.exit("error: --workdir %s must lie outside the repository %s" % (w, main))

    def recover_pending(self) -> None:
        """A previous run killed hard (SIGKILL, power) may have left a mutant in place: restore it."""
        meta = self.restore_dir / "pending.json"
        if not meta.exists():
            return
        info = json.loads(meta.read_text())
        target = self.src / info["file"]
        original = (self.restore_dir / "original").read_bytes()
        if sha256_bytes(original) != info["sha256"]:
            sys.exit("error: %s is damaged; restore %s by hand (git -C %s checkout -- %s)"
                     % (meta, info["file"], self.src, info["file"]))
        target.write_bytes(original)
        meta.unlink()
        log("recovered: restored %s, left mutated by an interrupted run" % info["file"])

    def prepare_tree(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.logs.mkdir(exist_ok=True)
        self.restore_dir.mkdir(exist_ok=True)
        if not (self.src / ".git").exists():
            if self.src.exists():
                sys.exit("error: %s exists but is not a git clone; remove it or pick another --workdir" % self.src)
            # A clone, not a worktree: nothing is written into the repository's own .git.
            log("cloning %s into %s at %s" % (self.repo, self.src, self.commit[:12]))
            run(["git", "clone", "--quiet", "--no-checkout", str(self.repo), str(self.src)])
            if not self._has_commit():
                run(["git", "-C", str(self.src), "fetch", "--quiet", str(self.repo), self.commit])
            run(["git", "-C", str(self.src), "checkout", "--quiet", "--detach", self.commit])
        self.recover_pending()
        status = git(self.src, "status", "--porcelain", "--untracked-files=no")
        if status.strip():
            sys.exit("error: the mutation tree %s is not clean:\n%s\nA mutant may have been left behind; "
                     "run `git -C %s checkout -- .` (it is a private clone) and start again."
                     % (self.src, status, self.src))
        if git(self.src, "rev-parse", "HEAD").strip() != self.commit:
            if not self._has_commit():
                run(["git", "-C", str(self.src), "fetch", "--quiet", str(self.repo), self.commit])
            log("checking out %s in %s" % (self.commit[:12], self.src))
            run(["git", "-C", str(self.src), "checkout", "--quiet", "--detach", self.commit])

    def _has_commit(self) -> bool:
        return subprocess.run(["git", "-C", str(self.src), "cat-file", "-e", self.commit + "^{commit}"],
                              capture_output=True).returncode == 0

    def torch_prefix(self) -> str:
        if self.args.torch_prefix:
            return self.args.torch_prefix
        py = self.repo / ".venv" / "bin" / "python"
        if not py.exists():
            sys.exit("error: %s not found; pass --torch-prefix (LibTorch's CMake prefix)" % py)
        return run([str(py), "-c", "import torch; print(torch.utils.cmake_prefix_path)"]).stdout.strip()

    def configure(self) -> None:
        prefix = self.torch_prefix()
        options = ["-DCMAKE_PREFIX_PATH=" + prefix, "-DCMAKE_BUILD_TYPE=" + self.args.build_type,
                   "-DCMAKE_EXPORT_COMPILE_COMMANDS=ON"]
        if not self.args.with_cuda_backend:
            # Hiding nvcc from PATH is not enough: a CUDA LibTorch's CMake package finds nvcc in
            # /usr/local/cuda by itself and must enable CUDA, and the project then builds its fused
            # CUDA backend (nvcc, minutes) into gemma4-conform. The suite runs on CPU here and no
            # reference source reaches those kernels, so check_language(CUDA) is made to find nothing
            # (a CMake hook outside the clone; the clone itself stays untouched).
            hook = self.workdir / "no_cuda_backend.cmake"
            hook.write_text(
                "# Written by conformance/quality/mutation/mutate_reference.py: the project's check_language(CUDA)\n"
                "# reports no compiler, so the fused CUDA backend (impl/cuda/) is not built.\n"
                "include(CheckLanguage)\n"
                "macro(check_language lang)\n"
                "  if(\"${lang}\" STREQUAL \"CUDA\")\n"
                "    set(CMAKE_CUDA_COMPILER \"\")\n"
                "  else()\n"
                "    _check_language(${lang})\n"
                "  endif()\n"
                "endmacro()\n")
            options.append("-DCMAKE_PROJECT_INCLUDE=" + str(hook))
        else:
            options.append("-DCMAKE_PROJECT_INCLUDE=")
        stamp = self.build / "mutation-configure.json"
        wanted = {"options": options}
        if (self.build / "build.ninja").exists() and stamp.exists() and json.loads(stamp.read_text()) == wanted:
            return
        log("configuring %s (LibTorch %s, %s, CUDA backend %s)" % (
            self.build, prefix, self.args.build_type, "on" if self.args.with_cuda_backend else "off"))
        cmd = ["cmake", "-S", str(self.src), "-B", str(self.build), "-G", "Ninja", *options]
        rc, secs, _ = run_logged(cmd, self.logs / "configure.log", self.env)
        if rc != 0:
            sys.exit("error: cmake configure failed (%s):\n%s" % (self.logs / "configure.log",
                                                                   "\n".join(tail(self.logs / "configure.log", 40))))
        text = (self.logs / "configure.log").read_text(errors="replace")
        m = re.search(r"gemma4: CUDA backend: (\w+)", text)
        if m:
            log("configured in %.0f s; CUDA backend: %s" % (secs, m.group(1)))
            if m.group(1) != "OFF" and not self.args.with_cuda_backend:
                log("warning: the CUDA backend is configured anyway; the first build will take longer")
        write_json_atomic(stamp, wanted)

    def build_target(self, log_name: str) -> Tuple[bool, float]:
        cmd = ["cmake", "--build", str(self.build), "--target", TARGET, "-j", str(self.args.jobs)]
        rc, secs, _ = run_logged(cmd, self.logs / log_name, self.env)
        return rc == 0, secs

    def object_for(self, rel: str) -> Optional[Path]:
        if not self.objects:
            db = self.build / "compile_commands.json"
            if db.exists():
                for e in json.loads(db.read_text()):
                    src = os.path.realpath(os.path.join(e.get("directory", ""), e["file"]))
                    out = e.get("output")
                    if out is None:
                        m = re.search(r"-o\s+(\S+)", e.get("command", ""))
                        out = m.group(1) if m else None
                    if out:
                        self.objects[src] = Path(os.path.join(e.get("directory", ""), out))
        return self.objects.get(os.path.realpath(str(self.src / rel)))

    def object_code_hash(self, rel: str) -> Optional[str]:
        """sha256 of the file's object without debug sections: equal to the pristine one means the
        mutant compiled to the same code (an equivalent mutant, no need to run the suite)."""
        obj = self.object_for(rel)
        if obj is None or not obj.exists():
            return None
        with tempfile.TemporaryDirectory(prefix="mutobj.") as d:
            stripped = Path(d) / "o"
            r = subprocess.run(["objcopy", "--strip-debug", str(obj), str(stripped)], capture_output=True)
            if r.returncode != 0:
                return None
            return sha256_bytes(stripped.read_bytes())

    # -- conform ---------------------------------------------------------------------------------

    def conform(self, tag: str, timeout: Optional[float]) -> dict:
        report = self.workdir / "conform.json"
        with contextlib.suppress(FileNotFoundError):
            report.unlink()
        log_path = self.logs / ("conform-%s.log" % tag)
        cmd = [str(self.build / "bin" / TARGET), "conform", "--backend", "reference", "--dtype", self.args.dtype,
               "--golden-dir", str(self.src / "golden"), "--report", str(report)]
        rc, secs, timed_out = run_logged(cmd, log_path, self.env, cwd=self.workdir, timeout=timeout,
                                         data_limit=self.data_limit)
        res = {"exit_code": rc, "conform_seconds": round(secs, 2), "timed_out": timed_out, "log": str(log_path)}
        if report.exists():
            try:
                data = json.loads(report.read_text())
                fails = [r for r in data.get("results", []) if r.get("status") == "fail"]
                cats: Dict[str, int] = {}
                for r in fails:
                    cats[r.get("category", "?")] = cats.get(r.get("category", "?"), 0) + 1
                checks: List[str] = []
                for r in fails:
                    if r.get("test") not in checks:
                        checks.append(r.get("test"))
                res.update({
                    "checks": data.get("checks"), "failed_checks_count": data.get("failed_checks"),
                    "failed_categories": cats,  # in order of first failure
                    "failed_checks": checks[:25], "failed_results": len(fails),
                    "first_failure": ({k: fails[0].get(k) for k in ("test", "category", "case", "metric", "value",
                                                                    "bound", "detail")} if fails else None),
                })
            except (OSError, ValueError) as e:
                res["report_error"] = str(e)
        else:
            res["output_tail"] = tail(log_path, 25)
        return res

    def unit_tests_fail(self, timeout: float) -> bool:
        """Builds and runs the reference's GoogleTest binaries on the mutated tree: True when one fails."""
        cmd = ["cmake", "--build", str(self.build), "--target", *UNIT_TEST_TARGETS, "-j", str(self.args.jobs)]
        rc, _, _ = run_logged(cmd, self.logs / "build-unit-tests.log", self.env)
        if rc != 0:
            return False  # the unit tests do not build: no verdict from them
        for target in UNIT_TEST_TARGETS:
            rc, _, timed_out = run_logged([str(self.build / "bin" / target), "--gtest_brief=1"],
                                          self.logs / "unit-tests-last.log", self.env, cwd=self.workdir,
                                          timeout=timeout, data_limit=self.data_limit)
            if timed_out or rc != 0:
                return True
        return False

    # -- one mutant ------------------------------------------------------------------------------

    def run_mutant(self, cand: Candidate, original: bytes, timeout: float) -> dict:
        text = original.decode("utf-8")
        mutated = cand.apply(text)
        target = self.src / cand.file
        rec = {"id": cand.id, "file": cand.file, "line": cand.line, "col": cand.col, "operator": cand.operator,
               "original": cand.original, "replacement": cand.replacement,
               "line_before": line_of(text, cand.line), "line_after": line_of(mutated, cand.line)}
        t0 = time.monotonic()
        # Keep the original beside the tree first, so that even a SIGKILL leaves a way back.
        (self.restore_dir / "original").write_bytes(original)
        write_json_atomic(self.restore_dir / "pending.json", {"file": cand.file, "sha256": sha256_bytes(original)})
        try:
            target.write_bytes(mutated.encode("utf-8"))
            ok, bsecs = self.build_target("build-last.log")
            rec["build_seconds"] = round(bsecs, 2)
            if not ok:
                rec["verdict"] = "build_failed"
                errs = [l for l in tail(self.logs / "build-last.log", 400) if "error" in l]
                rec["build_errors"] = errs[:5]
            else:
                h = self.object_code_hash(cand.file)
                if h is not None and h == self.pristine_obj.get(cand.file):
                    rec["verdict"] = "equivalent"
                    rec["note"] = "object code identical to the original's (debug info aside)"
                else:
                    res = self.conform("last", timeout)
                    rec.update(res)
                    if res["timed_out"]:
                        rec["verdict"] = "timeout"
                    elif res["exit_code"] == 0:
                        rec["verdict"] = "survived"
                        if self.args.unit_tests and self.unit_tests_fail(timeout):
                            rec["verdict"] = "unit_tests"
                    else:
                        rec["verdict"] = "killed"
                        if res["exit_code"] != 1:
                            rec["note"] = ("crashed (signal %d)" % -res["exit_code"] if res["exit_code"] < 0
                                           else "crashed (exit %d)" % res["exit_code"])
                    crashed = rec.get("note", "").startswith("crashed")
                    if rec["verdict"] in ("timeout", "survived", "unit_tests") or crashed or self.args.keep_logs:
                        kept = self.logs / ("conform-%s.log" % re.sub(r"[^A-Za-z0-9_.-]+", "_", cand.id))
                        shutil.copyfile(self.logs / "conform-last.log", kept)
                        rec["log"] = str(kept)
                    else:
                        rec.pop("log", None)
        finally:
            target.write_bytes(original)
            (self.restore_dir / "pending.json").unlink()
        rec["seconds"] = round(time.monotonic() - t0, 2)
        return rec
