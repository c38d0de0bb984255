#!/usr/bin/env python3
"""Reports ready to paste into an upstream issue: one Markdown file per reproduction script here.

    python tools/scoreboard/repro/reports.py            # writes tools/scoreboard/reports/<script>.md
    python tools/scoreboard/repro/reports.py --check    # exit 1 when a written report is not its script's

A report is made from its script alone, so it cannot drift from what the script shows: the title is
the docstring's first line; the docstring's labelled paragraphs (Project:, Finding: or Bug:, Source:,
Expected:, Actual:, Public:, Run: ...) become the report's paragraphs, each label in bold; the script
itself is the reproduction, in full; and the line it printed here, as this folder's README records it
("Results here"), is the observed output. The scoreboard page links each triage that names a script
to its report (gemma4_conform/scoreboard/page.py). Standard library only.
"""
from __future__ import annotations

import argparse
import ast
import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPORTS = HERE.parent / "reports"
# "Project: ...", "Where it shows: ...", "Run (needs CUDA ...): ..." (the parenthesis may run over lines).
LABEL = re.compile(r"^([A-Z][A-Za-z]*(?: [a-z]+){0,3})(:\s|:$| \()")


RESULTS = "## Results here"


def recorded_outputs(readme: str) -> dict[str, tuple[str, str]]:
    """script name -> (where and how long it ran, what it printed), from the table of the README's
    section "Results here" (rows: script, time, output; time "-" where it has not run)."""
    if RESULTS not in readme:
        raise SystemExit(f"README.md: no section {RESULTS!r} (the scripts' recorded outputs)")
    section = readme.split(RESULTS, 1)[1].split("\n## ", 1)[0]
    out = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
        if line.startswith("| `"):
            if len(cells) != 3:
                raise SystemExit(f"README.md, {RESULTS}: a row needs 3 cells (script, time, output): {line[:80]}")
            out[cells[0].strip("`")] = (cells[1], cells[2])
    return out


def paragraphs(docstring: str) -> list[str]:
    """The docstring after its title, as Markdown paragraphs: a labelled paragraph starts at a line
    "Label: text" (or "Label (...): text") and runs on over the indented lines below it, its label in
    bold; other lines stay as they are."""
    out: list[str] = []
    for line in docstring.splitlines()[1:]:
        match = LABEL.match(line)
        if match:
            rest = line[match.end(1):].removeprefix(":")
            out += ["", f"**{match.group(1)}**{':' if line[match.end(1)] == ':' else ''}{rest}".rstrip()]
        elif line.startswith("  ") and out and out[-1]:
            out[-1] += " " + line.strip()
        else:
            out.append(line.rstrip())
    text = re.sub(r"(?<=\S) {2,}", " ", "\n".join(out))
    return [p.strip() for p in re.split(r"\n\s*\n", text) if p.strip()]


def report(script: Path, outputs: dict[str, tuple[str, str]]) -> str:
    source = script.read_text()
    docstring = ast.get_docstring(ast.parse(source))
    if not docstring:
        raise SystemExit(f"{script.name}: no docstring (a reproduction says what it shows in its docstring)")
    lines = [f"# {docstring.splitlines()[0].strip()}", "", *("\n\n".join(paragraphs(docstring)).splitlines()), ""]
    if script.name in outputs:
        where, printed = outputs[script.name]
        lines += (["## Observed", "", f"Not observed yet: {printed}.", ""] if where == "-" else
                  ["## Observed", "", f"`{script.name}`, {where}:", "", "```", printed, "```", ""])
    lines += ["## Reproduction", "", f"`{script.name}`, standalone (its docstring says what it needs):", "",
              "```python", source.rstrip("\n"), "```", ""]
    return "\n".join(lines)


def scripts() -> list[Path]:
    return sorted(p for p in HERE.glob("*.py") if p.name != Path(__file__).name)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="compare with the written reports; write nothing")
    parser.add_argument("--out", type=Path, default=REPORTS, help="where the reports go (default tools/scoreboard/reports)")
    args = parser.parse_args()
    outputs = recorded_outputs((HERE / "README.md").read_text())
    wanted = {f"{p.stem}.md": report(p, outputs) for p in scripts()}
    if args.check:
        have = {p.name for p in args.out.glob("*.md")} if args.out.is_dir() else set()
        problems = [f"{name}: missing" for name in sorted(set(wanted) - have)]
        problems += [f"{name}: no script {Path(name).stem}.py" for name in sorted(have - set(wanted))]
        problems += [f"{name}: differs from its script (run tools/scoreboard/repro/reports.py)"
                     for name in sorted(set(wanted) & have) if (args.out / name).read_text() != wanted[name]]
        for problem in problems:
            print(f"{args.out}/{problem}", file=sys.stderr)
        return 1 if problems else 0
    args.out.mkdir(parents=True, exist_ok=True)
    for stale in args.out.glob("*.md"):
        if stale.name not in wanted:
            stale.unlink()
    for name, text in wanted.items():
        (args.out / name).write_text(text)
    print(f"wrote {len(wanted)} reports in {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
