"""The board at a glance: one line per implementation (project and path: attention, kernel, loader or
quantization), one column per device and dtype, each cell a whole verdict: pass, or the categories
that fail with their worst ratio, or why it cannot run there. Our in-tree backends are one line, the
worst of them. The page (page.py) and the Markdown table show this first; the browser test reads the
page's summary back and compares it with what this module computes from the JSON.
"""
from __future__ import annotations

import html
import math
import re

from .run import Verdict

IN_TREE = "gemma4-conformance"  # our own backends (the reference, variants, cuda): one collapsed line
FLOAT_DTYPES = ("f32", "bf16", "f16")
DEVICES = ("cpu", "cuda")
# A whole verdict, worst first: one failing row or category makes it fail; then any pass; a line
# that cannot run at all says so before one whose checks were all not supported or left out.
SEVERITY = (Verdict.FAIL, Verdict.PASS, Verdict.CANNOT_RUN, Verdict.NOT_SUPPORTED, Verdict.NOT_RUN)
SYMBOL = {"pass": "pass", "fail": "FAIL", "not_supported": "not supported", "not_applicable": "-",
          "not_run": "not run", "cannot_run": "cannot run here"}


def row_id(row: dict) -> str:
    """The anchor of a row of the detail table."""
    return "-".join(part.replace(" ", "_").replace("/", "_") for part in
                    (row["implementation"], row["path"], row["device"], row["dtype"]))


def ratio_text(r) -> str:
    return "inf" if r is None or (isinstance(r, float) and math.isinf(r)) else f"{r:.3g}"


def column(row: dict) -> str:
    """The summary column of a row: its device and dtype, a quantized row's under "quantized" (its
    dtype names the format: Q8_0, mlx-4bit, ...); an fp8 KV cache keeps its compute dtype."""
    dtype = row["dtype"].split(",")[0]
    return f"{row['device']} {dtype if dtype in FLOAT_DTYPES else 'quantized'}"


def line_name(row: dict) -> str:
    return IN_TREE if row["implementation"] == IN_TREE else f"{row['implementation']} {row['path']}"


def slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text)


def row_verdict(row: dict) -> tuple[Verdict, dict[str, float]]:
    """One row's whole verdict (the worst of its cells, SEVERITY), and its failing categories with their
    worst ratio (inf: no ratio)."""
    cells = row["cells"]
    fails = {c: math.inf if cell.get("worst_ratio") is None else cell["worst_ratio"]
             for c, cell in cells.items() if cell["verdict"] == Verdict.FAIL.value}
    present = {cell["verdict"] for cell in cells.values()}
    return next((v for v in SEVERITY if v.value in present), Verdict.NOT_RUN), fails


def fold(whole: dict, verdict: Verdict, fails: dict[str, float]) -> None:
    """Folds one row's verdict into a whole one ({"verdict", "fails"}): the worse verdict, and per
    failing category the worst ratio."""
    if SEVERITY.index(verdict) < SEVERITY.index(whole["verdict"]):
        whole["verdict"] = verdict
    for category, ratio in fails.items():
        whole["fails"][category] = max(ratio, whole["fails"].get(category, 0.0))


def by_category(fails: dict[str, float], categories: list[str]) -> dict[str, float]:
    return dict(sorted(fails.items(), key=lambda item: categories.index(item[0])))


def cannot_run_why(row: dict) -> str:
    return next((cell.get("why", "") for cell in row["cells"].values() if cell["verdict"] == "cannot_run"), "")


def summary(board: dict) -> dict:
    """{"columns": [...], "lines": [{"name", "versions", "paths", "rows": [(row id, label)], "cells":
    {column: cell}}]}; a
    cell is {"verdict", "fails": {category: worst ratio}, "rows": [row ids it covers], "why"}."""
    columns: list[str] = []
    lines: dict[str, dict] = {}
    for row in board["rows"]:
        col = column(row)
        if col not in columns:
            columns.append(col)
        line = lines.setdefault(line_name(row), {"name": line_name(row), "versions": [], "paths": [], "rows": [],
                                                 "cells": {}})
        if row["path"] not in line["paths"]:
            line["paths"].append(row["path"])
        version = row["version"][:12] if re.fullmatch(r"[0-9a-f]{40}", row["version"]) else row["version"]
        if version not in line["versions"]:  # a commit as git's short form, whichever form the row has
            line["versions"].append(version)
        line["rows"].append((row_id(row), f"{row['path']}, {row['device']}, {row['dtype']}"))
        verdict, fails = row_verdict(row)
        cell = line["cells"].setdefault(col, {"verdict": verdict, "fails": {}, "rows": [], "why": "",
                                              "first_row": row_id(row)})
        fold(cell, verdict, fails)
        if verdict == Verdict.FAIL:
            cell["rows"].append(row_id(row))
        if verdict == Verdict.CANNOT_RUN and not cell["why"]:
            cell["why"] = cannot_run_why(row)
    cats = board["categories"]
    for line in lines.values():
        # "not installed" (a row that cannot run here) only when no row names a version
        line["versions"] = [v for v in line["versions"] if v != "not installed"] or line["versions"]
        for cell in line["cells"].values():
            cell["fails"] = by_category(cell["fails"], cats)
            first = cell.pop("first_row")
            cell["rows"] = cell["rows"] or [first]  # the failing rows, or the first row it sums up
    columns.sort(key=lambda c: (DEVICES.index(c.split()[0]) if c.split()[0] in DEVICES else len(DEVICES),
                                (*FLOAT_DTYPES, "quantized").index(c.split()[1])))
    # Implementations in the board's order, ours last: what a user compares comes first.
    ordered = sorted(lines.values(), key=lambda line: line["name"] == IN_TREE)
    return {"columns": columns, "lines": ordered}


def fails_text(fails: dict[str, float]) -> str:
    """"golden x12.3, decode x2.1": the failing categories and their worst ratio."""
    return ", ".join(f"{c} x{ratio_text(r)}" for c, r in fails.items())


def cell_text(cell: dict | None) -> str:
    if cell is None:
        return "-"
    if cell["verdict"] == Verdict.FAIL:
        return "FAIL: " + fails_text(cell["fails"])
    return SYMBOL[cell["verdict"].value]


def line_id(line: dict) -> str:
    return "summary-" + slug(line["name"])


def _cell_html(cell: dict | None) -> str:
    if cell is None:
        return '<td class="not_applicable" data-verdict="none">-</td>'
    verdict = cell["verdict"].value
    attrs = f'class="{verdict}" data-verdict="{verdict}" data-fails="{html.escape(fails_text(cell["fails"]), quote=True)}"'
    if cell["why"]:
        attrs += f' title="{html.escape(cell["why"], quote=True)}"'
    links = " ".join(f'<a href="#{rid}">{"row" if len(cell["rows"]) == 1 else f"row {i + 1}"}</a>'
                     for i, rid in enumerate(cell["rows"]))
    return f"<td {attrs}>{html.escape(cell_text(cell))} <small>{links}</small></td>"


def summary_html(board: dict) -> str:
    """table#summary: a line per implementation, a cell per device and dtype, each linked to the rows
    of the detail table it sums up; our in-tree backends' line expands to the list of them."""
    s = summary(board)
    head = "".join(f"<th>{html.escape(c)}</th>" for c in s["columns"])
    body = []
    for line in s["lines"]:
        name = html.escape(line["name"])
        if line["name"] == IN_TREE:
            items = "".join(f'<li><a href="#{rid}">{html.escape(label)}</a></li>' for rid, label in line["rows"])
            name = (f"<details><summary>{name}: our {len(line['paths'])} in-tree backends (the reference, its "
                    f"variants, cuda)</summary><ul>{items}</ul></details>")
        cells = "".join(_cell_html(line["cells"].get(c)) for c in s["columns"])
        body.append(f'<tr id="{line_id(line)}"><th scope="row">{name}</th>'
                    f'<td>{html.escape(", ".join(line["versions"]))}</td>{cells}</tr>')
    return (f'<table id="summary"><thead><tr><th>implementation</th><th>version</th>{head}</tr></thead><tbody>\n'
            + "\n".join(body) + "\n</tbody></table>\n")


def summary_markdown(board: dict) -> list[str]:
    s = summary(board)
    lines = ["| implementation | version | " + " | ".join(s["columns"]) + " |", "|---|---|" + "---|" * len(s["columns"])]
    for line in s["lines"]:
        cells = " | ".join(cell_text(line["cells"].get(c)) for c in s["columns"])
        lines.append(f"| {line['name']} | {', '.join(line['versions'])} | {cells} |")
    return lines


def summary_expected(board: dict) -> dict[str, list[dict[str, str]]]:
    """What each summary line's cells must carry on the page, in column order: {line id: [attributes]}."""
    s = summary(board)
    return {line_id(line): [{"data-verdict": "none"} if (cell := line["cells"].get(col)) is None else
                            {"data-verdict": cell["verdict"].value, "data-fails": fails_text(cell["fails"])}
                            for col in s["columns"]] for line in s["lines"]}


# --- history: the versions of one implementation judged on the board -------------------------------

HISTORIC = re.compile(r"\s*\((?P<version>[^,()]+), historic\)$")  # "sdpa (5.5.1, historic)"


def version_key(version: str) -> tuple:
    return tuple(int(n) for n in re.findall(r"\d+", version))


def failing_cases(row: dict) -> set[str]:
    """The cases a row fails, by their last name ("e2b_like" for "decode/transformers/e2b_like"), from the
    failing rows each cell keeps."""
    return {f["test"].rsplit("/", 1)[-1] for cell in row["cells"].values() for f in cell.get("failing", [])
            if cell["verdict"] == Verdict.FAIL.value and f.get("test")}


def history(board: dict) -> list[dict]:
    """Per implementation and path with more than one version on the board (historic releases run in
    their pinned environments beside the current one), the versions in order, each with its whole
    verdict over every device and dtype and the cases that fail, so that two failing versions that fail
    differently read differently: [{"name", "versions": [(version, verdict, fails, cases)]}]."""
    groups: dict[str, dict[str, dict]] = {}
    for row in board["rows"]:
        if row["implementation"] == IN_TREE or row["version"] == "not installed":
            continue
        name = f"{row['implementation']} {HISTORIC.sub('', row['path'])}"
        verdict, fails = row_verdict(row)
        whole = groups.setdefault(name, {}).setdefault(row["version"], {"verdict": verdict, "fails": {}, "cases": set()})
        fold(whole, verdict, fails)
        whole["cases"] |= failing_cases(row)
    cats = board["categories"]
    return [{"name": name, "versions": [(v, whole["verdict"], by_category(whole["fails"], cats), sorted(whole["cases"]))
                                        for v, whole in sorted(versions.items(), key=lambda i: version_key(i[0]))]}
            for name, versions in groups.items() if len(versions) > 1]


def history_text(line: dict) -> str:
    """"transformers sdpa: 5.5.1 FAIL: decode x9.97 (e2b_like) -> 5.5.2 pass -> 5.17.0 pass"."""
    steps = [f"{v} {cell_text({'verdict': verdict, 'fails': fails})}" + (f" ({', '.join(cases)})" if cases else "")
             for v, verdict, fails, cases in line["versions"]]
    return f"{line['name']}: " + " -> ".join(steps)


def versions_attr(line: dict) -> str:
    """"5.5.1:fail:e2b_like,5.5.2:pass": what the browser test reads back from each history item."""
    return ",".join(f"{v}:{verdict.value}" + (f":{'+'.join(cases)}" if cases else "")
                    for v, verdict, _, cases in line["versions"])


def history_expected(board: dict) -> dict[str, str]:
    """What each history item carries on the page: {item id: data-versions}."""
    return {"history-" + slug(line["name"]): versions_attr(line) for line in history(board)}


def history_html(board: dict) -> str:
    items = "".join(f'<li id="history-{slug(line["name"])}" data-versions="{versions_attr(line)}">'
                    f"{html.escape(history_text(line))}</li>" for line in history(board))
    return ("<h2>History of an implementation</h2>\n<p>The versions of one implementation judged on this board, "
            "oldest first, each with its whole verdict over every device and dtype: when a bug came and went.</p>\n"
            f'<ul id="history">{items}</ul>\n') if items else ""
