"""gemma4-scoreboard (also python -m gemma4_conform scoreboard): every Gemma-4 implementation this
machine can run, judged by the suite, written as JSON, a static HTML page and a Markdown table.

    gemma4-scoreboard --out tools/scoreboard [--device cpu,cuda] [--dtype f32,bf16]
        [--subjects REGEX] [--add NAME=MODULE:FACTORY ...] [--filter REGEX] [--skip-real-size]
        [--timeout S] [--jobs N] [--triage FILE.json] [--readme tools/scoreboard/README.md]
    python -m gemma4_conform scoreboard --render tools/scoreboard/scoreboard.json --out DIR
    python -m gemma4_conform scoreboard --merge cpu/scoreboard.json gpu/scoreboard.json --out DIR

Subjects: gemma4_conform/scoreboard/subjects.py (one table). Each (subject, device, dtype) is one run
of the suite's own runner in a child process; what this machine cannot run is a row saying why.
--add puts a model factory of your own on the board beside them (conform-model's contract).
--render makes the page and the table again from a JSON alone (the committed page is that output).
--triage: {"<implementation> <path>[ <device>]": "what its failures are"}, shown on the page beside the row
(also with --render and --merge).
"""
from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import platform
import re
import subprocess
import sys
import time
from pathlib import Path

from .page import markdown, page
from .run import CATEGORIES, RunOptions, not_judged, run_subject
from .subjects import NOT_YET, SUBJECTS, Subject, SubjectKind


def machine() -> str:
    """The machine in words: CPU model and cores, and the GPU when asked for CUDA."""
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{cpu}, {os.cpu_count()} cores"


def gpu_name() -> str:
    import torch
    return torch.cuda.get_device_name() if torch.cuda.is_available() else ""


def our_version() -> str:
    """This project's commit: $GEMMA4_GIT_SHA when set (as tools/git_sha.cmake reads it: the GPU host's
    copy of the tree has a .git that does not follow it), else git's HEAD here."""
    if os.environ.get("GEMMA4_GIT_SHA"):
        return os.environ["GEMMA4_GIT_SHA"]
    out = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True)
    return out.stdout.strip() or "in-tree"


BEGIN, END = "<!-- scoreboard: begin (python -m gemma4_conform scoreboard --readme) -->", "<!-- scoreboard: end -->"


def readme_with(readme: str, table: str) -> str:
    """The README with the table between the scoreboard markers (which must be there)."""
    if BEGIN not in readme or END not in readme:
        raise ValueError(f"the README has no '{BEGIN}' ... '{END}' block")
    head, rest = readme.split(BEGIN, 1)
    return head + BEGIN + "\n" + table + rest[rest.index(END):]


def with_triage(board: dict, triage: dict) -> dict:
    """Each row's triage note: the one keyed '<implementation> <path> <device>', else '<implementation> <path>';
    not on a row that could not run at all and fails nothing (a GPU-only subject's CPU rows)."""
    for row in board["rows"]:
        note = triage.get(f"{row['subject']} {row['device']}") or triage.get(row["subject"])
        if note and (row.get("ran") or any(c["verdict"] == "fail" for c in row["cells"].values())):
            row["triage"] = note
        elif triage:
            row.pop("triage", None)
    return board


def write(board: dict, out: Path, readme: Path | None = None) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "scoreboard.json").write_text(json.dumps(board, indent=1, sort_keys=True) + "\n")
    (out / "index.html").write_text(page(board))
    (out / "scoreboard.md").write_text(markdown(board))
    print(f"wrote {out}/scoreboard.json, index.html, scoreboard.md")
    if readme:
        readme.write_text(readme_with(readme.read_text(), markdown(board)))
        print(f"updated the scoreboard table in {readme}")


def merged(boards: list[dict]) -> dict:
    """One board from several (the same categories), rows in the subjects' order; a row of a later board
    replaces the same subject, device and dtype of an earlier one (a rerun, or a row that could not run
    there before). Machines and commands joined; the implementations without a row are this version's
    (subjects.NOT_YET)."""
    if any(b["categories"] != boards[0]["categories"] for b in boards):
        raise SystemExit("--merge: the boards have different categories (made by different versions)")
    rows: dict[tuple, dict] = {}
    for board in boards:
        for row in board["rows"]:
            key = (row["subject"], row["device"], row["dtype"])
            rows[key] = row  # a replaced row keeps its place (dicts keep the first insertion's order)
    # Then in the subjects' order (SUBJECTS: a new subject's rows sit with its kind, not after every
    # earlier board's), each subject's rows as they came; a subject not listed (--add) after them all.
    order = {s.name: i for i, s in enumerate(SUBJECTS)}
    ranked = sorted(rows.values(), key=lambda r: order.get(r["subject"], len(order)))
    return {**boards[0], "rows": ranked, "not_yet": [list(x) for x in NOT_YET],
            "machine": "; ".join(dict.fromkeys(b["machine"] for b in boards)),
            "command": " ; ".join(b["command"] for b in boards),
            "seconds": round(sum(b.get("seconds", 0) for b in boards), 1)}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="gemma4-scoreboard", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, required=True, help="directory for scoreboard.json, index.html, scoreboard.md")
    p.add_argument("--device", default="cpu", help="cpu, cuda or cpu,cuda")
    p.add_argument("--dtype", default="f32,bf16", help="comma-separated: f32, bf16, f16")
    p.add_argument("--subjects", default="", help="only subjects whose '<implementation> <path>' matches (re.search)")
    p.add_argument("--add", action="append", default=[], metavar="NAME=MODULE:FACTORY",
                   help="another subject: a conform-model factory, shown as NAME (repeatable)")
    p.add_argument("--filter", default="", help="only the checks this regex matches (the runners' --filter)")
    p.add_argument("--skip-real-size", action="store_true", help="in-tree backends without the real_size category")
    p.add_argument("--timeout", type=float, default=3600, help="seconds one run may take")
    p.add_argument("--jobs", type=int, default=1, help="runs at once (child processes)")
    p.add_argument("--triage", type=Path, help="JSON {'<implementation> <path>': note} shown beside failing rows")
    p.add_argument("--render", type=Path, metavar="JSON", help="only render this scoreboard.json again")
    p.add_argument("--readme", type=Path,
                   help="also put the Markdown table into this file's scoreboard block (tools/scoreboard/README.md)")
    p.add_argument("--merge", type=Path, nargs="+", metavar="JSON",
                   help="only join these scoreboard.json files (a CPU and a GPU board) into one, rows in order")
    args = p.parse_args(argv)
    if args.triage and not args.triage.is_file():
        p.error(f"--triage {args.triage}: no such file")
    triage = json.loads(args.triage.read_text()) if args.triage else {}

    if args.merge:
        missing = [str(m) for m in args.merge if not m.is_file()]
        if missing:
            p.error(f"--merge: no such file: {', '.join(missing)}")
        write(with_triage(merged([json.loads(m.read_text()) for m in args.merge]), triage), args.out, args.readme)
        return 0
    if args.render:
        if not args.render.is_file():
            p.error(f"--render {args.render}: no such file")
        write(with_triage(json.loads(args.render.read_text()), triage), args.out, args.readme)
        return 0
    if args.jobs < 1:
        p.error(f"--jobs {args.jobs}: must be at least 1")
    devices = [d for d in args.device.split(",") if d]
    dtypes = [d for d in args.dtype.split(",") if d]
    bad = [d for d in devices if d not in ("cpu", "cuda")] + [d for d in dtypes if d not in ("f32", "bf16", "f16")]
    if bad:
        p.error(f"unknown device or dtype: {', '.join(bad)}")
    try:
        pattern = re.compile(args.subjects)
    except re.error as e:
        p.error(f"--subjects {args.subjects!r}: {e}")
    subjects = [s for s in SUBJECTS if pattern.search(s.name)]
    for extra in args.add:
        name, _, spec = extra.partition("=")
        if not name or ":" not in spec:
            p.error(f"--add {extra!r}: expected NAME=MODULE:FACTORY")
        subjects.append(Subject(name, "(--add)", SubjectKind.MODEL, spec, fixed_version="-", note=spec))
    if not subjects:
        p.error(f"--subjects {args.subjects!r} matches no subject and nothing was added")
    # Runs side by side split the cores (torch would start one thread per core in each).
    threads = max(1, (os.cpu_count() or 1) // args.jobs) if args.jobs > 1 and "OMP_NUM_THREADS" not in os.environ else 0
    options = RunOptions(timeout=args.timeout, skip_real_size=args.skip_real_size, filter=args.filter, threads=threads)

    # A quantized subject has one dtype, its quantization: one run per device.
    runs = [(s, d, t) for s in subjects for d in devices
            for t in (dtypes[:1] if s.kind is SubjectKind.QUANTIZED else dtypes)]
    rows, ours, start = [None] * len(runs), our_version(), time.monotonic()
    gpu = gpu_name() if "cuda" in devices else ""

    def board(done: list) -> dict:
        return {"tool": "scoreboard", "categories": list(CATEGORIES), "rows": done,
                "machine": machine() + (f", {gpu}" if gpu else ""),
                "command": "python -m gemma4_conform scoreboard " + " ".join(argv if argv is not None else sys.argv[2:]),
                "seconds": round(time.monotonic() - start, 1), "not_yet": [list(x) for x in NOT_YET]}

    # Runs are child processes: --jobs of them at once (a GPU host has the cores; the default, one,
    # keeps timings of a 2-core machine honest). After each, the rows so far are written as
    # scoreboard.partial.json, so a run cut short by a time limit still leaves its verdicts.
    args.out.mkdir(parents=True, exist_ok=True)
    broken: list[str] = []  # rows the harness failed on (not_judged), named again at the end
    with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
        futures = {pool.submit(run_subject, s, d, t, options, ours): i for i, (s, d, t) in enumerate(runs)}
        for n, future in enumerate(concurrent.futures.as_completed(futures), 1):
            i = futures[future]
            try:
                row = rows[i] = future.result()
            except Exception as e:  # this harness's failure, not the subject's: that row says so, the rest go on
                row = rows[i] = not_judged(*runs[i], ours, e)
                broken.append(f"{row['subject']} {row['device']} {row['dtype']}: {row['why']}")
            verdicts = sorted({c["verdict"] for c in row["cells"].values()} - {"not_applicable"})
            outcome = f"{', '.join(verdicts)} ({row.get('seconds', 0)} s)" if row["ran"] else \
                f"cannot run here: {row['why']}"
            print(f"[{n}/{len(runs)}] {row['subject']} {row['device']} {row['dtype']}: {outcome}", flush=True)
            partial = board([r for r in rows if r is not None])
            (args.out / "scoreboard.partial.json").write_text(json.dumps(partial, indent=1, sort_keys=True) + "\n")
    write(with_triage(board(rows), triage), args.out, args.readme)
    (args.out / "scoreboard.partial.json").unlink()
    for line in broken:
        print(f"error: {line}", file=sys.stderr)
    return 1 if broken else 0
