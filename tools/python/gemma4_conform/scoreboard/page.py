"""The scoreboard as a static HTML page and a Markdown table, both made from its JSON alone (so the
committed page can be checked against the committed JSON by rendering it again).

Every cell carries its numbers as data attributes (data-verdict, data-failed, data-ratio), which the
browser test reads back and compares with the JSON; every failing cell links to its rows below the
table (#rows-<row>-<category>), and every row to its triage when it has one.
"""
from __future__ import annotations

import html
import re
from pathlib import Path

from .summary import (SYMBOL, cannot_run_why, history, history_expected, history_html, history_text, ratio_text,
                      row_id, summary_expected, summary_html, summary_markdown)


# A triage that names a reproduction script links to its report, ready to paste into an upstream issue
# (tools/scoreboard/reports/<script>.md, made from the script by tools/scoreboard/repro/reports.py), beside the page.
SCRIPT = re.compile(r"tools/scoreboard/repro/(\w+)\.py")


def triage_html(text: str) -> str:
    return SCRIPT.sub(lambda m: f'<a href="reports/{m.group(1)}.md">{m.group(0)}</a>', html.escape(text))


def triage_markdown(text: str) -> str:
    return SCRIPT.sub(lambda m: f"[{m.group(0)}](reports/{m.group(1)}.md)", text)


def file_link_problems(page_html: str, directory: Path) -> list[str]:
    """The page's links to files beside it (not #anchors, not URLs) whose file is missing."""
    hrefs = re.findall(r'href="([^"#][^"]*)"', page_html)
    return [f"link {href} has no file in {directory}" for href in dict.fromkeys(hrefs)
            if "://" not in href and not (directory / href).is_file()]


def cell_text(cell: dict) -> str:
    """One line per cell, the same on the page and in the Markdown table."""
    verdict = cell["verdict"]
    if verdict == "fail" and "failed_tests" in cell:
        return f"FAIL {cell['failed_tests']}/{cell['tests']} (x{ratio_text(cell['worst_ratio'])})"
    if verdict == "pass":
        return f"pass {cell['judged_tests']}/{cell['tests']}"
    return SYMBOL[verdict]


SPLITS = ("all", "before_window", "across_window", "beyond_window", "prefill", "decode")  # golden/quantized_subject.h
ENVELOPE_METRICS = ("kld_mean", "kld_p99", "kld_max", "top1_agreement", "delta_p_rms")
ENVELOPE_HEAD = ("subject", "device", "measured", "positions", "KLD mean", "KLD p99", "KLD max", "top-1", "dp rms")


def envelope_lines(board: dict) -> list[tuple[str, ...]]:
    """The quantized rows' envelopes (golden/FORMAT.md, "Quantized subjects"), one line per row, split
    and subject ("envelope": the implementation's logits; "quantization": the reference quantized alike, on the
    same dequantized weights or through the same fp8 KV cache), against the float model; reported, never judged.
    A backend's row names the check it was measured in (envelope_of)."""
    lines = []
    for row in board["rows"]:
        for who, splits in sorted(row.get("envelope", {}).items()):
            for split, figures in sorted(splits.items(), key=lambda item: SPLITS.index(item[0])):
                lines.append((row["subject"] + (f" ({row['envelope_of']})" if row.get("envelope_of") else ""), row["device"],
                              "implementation" if who == "envelope" else "reference, quantized alike",
                              split) + tuple(f"{figures[m]:.4f}" if m == "top1_agreement" else f"{figures[m]:.3g}"
                                             for m in ENVELOPE_METRICS))
    return lines


def made_by(board: dict) -> tuple[list[str], list[str]]:
    """The commands that made the board (one per board merged, joined by " ; ") and its machines, each once."""
    commands = [c.strip() for c in board["command"].split(" ; ") if c.strip()]
    machines = list(dict.fromkeys(m.strip() for m in board["machine"].split(";") if m.strip()))
    return commands, machines


def markdown(board: dict) -> str:
    cats = board["categories"]
    lines = ["Each implementation at a glance (a cell: pass, or the categories that fail with their worst "
             "error/bound; our in-tree backends in one line):", ""] + summary_markdown(board) + [""]
    lines += [f"- {history_text(line)}" for line in history(board)]
    lines += ["", "Every row:", "", f"| implementation | version | device | dtype | {' | '.join(cats)} |",
              "|---|---|---|---|" + "---|" * len(cats)]
    for row in board["rows"]:
        cells = (" | ".join([f"cannot run here: {cannot_run_why(row)}"] + [""] * (len(cats) - 1)) if cannot_run_at_all(row)
                 else " | ".join(cell_text(row["cells"][c]) for c in cats))
        lines.append(f"| {row['subject']} | {row['version']} | {row['device']} | {row['dtype']} | {cells} |")
    lines.append("")
    _, machines = made_by(board)
    lines.append(f"Machines: {'; '.join(machines)}. Cells: pass judged/tests; FAIL failed/tests (worst error/bound); "
                 "not supported (the subject's reason); cannot run here (why); - (the runner has no such category).")
    triaged: dict[tuple[str, str], list[str]] = {}  # one paragraph per subject and note, naming its rows
    for row in board["rows"]:
        if row.get("triage"):
            triaged.setdefault((row["subject"], row["triage"]), []).append(f"{row['device']} {row['dtype']}")
    for (subject, note), where in triaged.items():
        lines.append(f"- {subject} ({', '.join(where)}): {triage_markdown(note)}")
    for name, why in board.get("not_yet", []):
        lines.append(f"- {name}: {why}")
    envelope = envelope_lines(board)
    if envelope:
        lines += ["", "Quantized rows, the envelope against the float model (reported, not judged):", "",
                  "| " + " | ".join(ENVELOPE_HEAD) + " |", "|" + "---|" * len(ENVELOPE_HEAD)]
        lines += ["| " + " | ".join(line) + " |" for line in envelope]
    return "\n".join(lines) + "\n"


def cannot_run_at_all(row: dict) -> bool:
    """A row that cannot run on its device in any category: the page says so once, across the row."""
    return {c["verdict"] for c in row["cells"].values()} - {"not_applicable"} == {"cannot_run"}


def _cell_html(row: dict, category: str) -> str:
    cell = row["cells"][category]
    verdict = cell["verdict"]
    attrs = f'class="{verdict}" data-verdict="{verdict}"'
    if verdict == "fail" and "failed_tests" in cell:
        attrs += f' data-failed="{cell["failed_tests"]}" data-ratio="{ratio_text(cell["worst_ratio"])}"'
        body = f'<a href="#rows-{row_id(row)}-{category}">{html.escape(cell_text(cell))}</a>'
    else:
        body = html.escape(cell_text(cell))
    why = cell.get("why") or cell.get("worst_at") or ""
    title = f' title="{html.escape(why, quote=True)}"' if why else ""
    return f"<td {attrs}{title}>{body}</td>"


def _failing_rows_html(row: dict, category: str) -> str:
    cell = row["cells"][category]
    items = []
    for r in cell.get("failing", []):
        items.append("<tr>" + "".join(f"<td>{html.escape(str(r.get(k, '')))}</td>"
                                      for k in ("test", "case", "metric", "value", "bound", "detail")) + "</tr>")
    head = "<tr><th>test</th><th>case</th><th>metric</th><th>value</th><th>bound</th><th>detail</th></tr>"
    return (f'<section id="rows-{row_id(row)}-{category}"><h3>{html.escape(row["subject"])} {row["device"]} '
            f'{row["dtype"]}: {category}</h3><table class="rows">{head}{"".join(items)}</table></section>')


def page(board: dict) -> str:
    cats = board["categories"]
    head = "".join(f"<th>{c}</th>" for c in cats)
    body, details = [], []
    for row in board["rows"]:
        triage = row.get("triage")
        subject = html.escape(row["subject"])
        if triage:
            subject += f' <a class="triage" href="#triage-{row_id(row)}">triaged</a>'
            details.append(f'<section id="triage-{row_id(row)}"><h3>{html.escape(row["subject"])} {row["device"]} '
                           f'{row["dtype"]}: triage</h3><p>{triage_html(triage)}</p></section>')
        elif any(c["verdict"] == "fail" for c in row["cells"].values()):
            subject += ' <span class="untriaged">untriaged</span>'
        if cannot_run_at_all(row):
            why = html.escape(cannot_run_why(row))
            cells = f'<td class="cannot_run" data-verdict="cannot_run" colspan="{len(cats)}">cannot run here: {why}</td>'
        else:
            cells = "".join(_cell_html(row, c) for c in cats)
        body.append(f'<tr id="{row_id(row)}"><th scope="row" title="{html.escape(row.get("note", ""), quote=True)}">'
                    f'{subject}</th><td>{html.escape(row["version"])}</td><td>{row["device"]}</td>'
                    f'<td>{row["dtype"]}</td>{cells}</tr>')
        details += [_failing_rows_html(row, c) for c in cats
                    if row["cells"][c]["verdict"] == "fail" and "failed_tests" in row["cells"][c]]
    not_yet = "".join(f"<li>{html.escape(n)}: {html.escape(w)}</li>" for n, w in board.get("not_yet", []))
    envelope = envelope_lines(board)
    envelope_html = ("<h2>Quantized rows: the envelope against the float model</h2>\n<p>KL divergence from the float "
                     "model's next-token distribution, top-1 agreement and the RMS change of the float model's top "
                     "token's probability, by position against the sliding window; reported, not judged (golden/FORMAT.md, "
                     "\"Quantized subjects\").</p>\n<table id=\"envelope\"><tr>" + "".join(f"<th>{h}</th>" for h in ENVELOPE_HEAD)
                     + "</tr>" + "".join("<tr>" + "".join(f"<td>{html.escape(v)}</td>" for v in line) + "</tr>"
                                         for line in envelope) + "</table>\n") if envelope else ""
    commands, machines = made_by(board)
    style = ("body{font-family:sans-serif;margin:1.5em}table{border-collapse:collapse}td,th{border:1px solid #bbb;"
             "padding:2px 6px;font-size:13px;text-align:left}.pass{background:#d9f2d9}.fail{background:#f7c5c5}"
             ".not_supported,.cannot_run,.not_run{background:#eee;color:#555}.untriaged{color:#b00;font-weight:bold}.not_applicable{color:#999}")
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>Gemma-4 conformance scoreboard"
            f"</title><style>{style}</style></head><body>\n<h1>Gemma-4 conformance scoreboard</h1>\n"
            "<p>Each implementation at a glance: a cell is pass, or the categories that fail with their worst "
            "error/bound, linked to the rows below; cannot run here (why, on hover); - not on this board. Our "
            "in-tree backends are one line (open it for the list).</p>\n" + summary_html(board)
            + history_html(board) + "<h2>Every row</h2>\n<p>Cells: pass judged/tests; FAIL failed/tests (worst error/bound, linked to the "
            "failing rows); not supported (the subject's reason, on hover); cannot run here (why, on hover).</p>\n"
            f'<table id="scoreboard"><thead><tr><th>implementation</th><th>version</th><th>device</th>'
            f"<th>dtype</th>{head}</tr></thead><tbody>\n" + "\n".join(body) + "\n</tbody></table>\n"
            + envelope_html + f"<h2>Not on the board yet</h2><ul>{not_yet}</ul>\n<h2>How it was made</h2><ul>"
            + "".join(f"<li><code>{html.escape(c)}</code></li>" for c in commands) + "</ul>\n<p>On "
            + html.escape("; ".join(machines)) + ".</p>\n<h2>Failing rows and triage</h2>\n"
            + "\n".join(details) + "\n</body></html>\n")


# --- the page as a browser rendered it ------------------------------------------------------------

def table_problems(what: str, expected: dict[str, list[dict]], rendered: dict[str, list[dict]]) -> list[str]:
    """A rendered table against what the JSON says: {row id: [each cell's attributes]} both."""
    problems = []
    for rid, wants in expected.items():
        if rid not in rendered:
            problems.append(f"{what} {rid} missing")
        elif len(rendered[rid]) != len(wants):
            problems.append(f"{what} {rid}: {len(rendered[rid])} cells, the JSON has {len(wants)}")
        else:
            problems += [f"{what} {rid} cell {i + 1}: {key} {attrs.get(key)!r}, the JSON says {value!r}"
                         for i, (want, attrs) in enumerate(zip(wants, rendered[rid]))
                         for key, value in want.items() if attrs.get(key) != value]
    if len(rendered) != len(expected):
        problems.append(f"{len(rendered)} {what}s on the page, {len(expected)} in the JSON")
    return problems


def rendered_problems(dom: str, board: dict) -> list[str]:
    """What is wrong with a browser's DOM of the page (chromium --dump-dom) against the JSON: the table
    missing, a row or cell missing or different (verdict, failed tests, worst ratio), a link whose
    target is not on the page. [] when the page shows exactly the JSON."""
    from html.parser import HTMLParser

    class Dom(HTMLParser):
        def __init__(self):
            super().__init__()
            self.ids, self.links, self.rows, self.in_board = set(), [], [], False
            self.summary, self.in_summary, self.history = [], False, {}

        def handle_starttag(self, tag, attrs):
            a = dict(attrs)
            if "id" in a:
                self.ids.add(a["id"])
            if tag == "a" and a.get("href", "").startswith("#"):
                self.links.append(a["href"][1:])
            if tag == "li" and "data-versions" in a:
                self.history[a.get("id", "")] = a["data-versions"]
            if tag == "table":
                self.in_board, self.in_summary = a.get("id") == "scoreboard", a.get("id") == "summary"
            if self.in_summary and tag == "tr" and "id" in a:
                self.summary.append((a["id"], []))
            if self.in_summary and tag == "td" and "data-verdict" in a and self.summary:
                self.summary[-1][1].append(a)
            if self.in_board and tag == "tr" and "id" in a:
                self.rows.append((a["id"], []))
            if self.in_board and tag == "td" and "data-verdict" in a and self.rows:
                self.rows[-1][1].append(a)

    d = Dom()
    d.feed(dom)
    problems = []
    if "scoreboard" not in d.ids:
        problems.append("no table#scoreboard in the rendered page")
    expected = {}
    for row in board["rows"]:
        if cannot_run_at_all(row):
            expected[row_id(row)] = [{"data-verdict": "cannot_run"}]
            continue
        wants = []
        for category in board["categories"]:
            cell = row["cells"][category]
            want = {"data-verdict": cell["verdict"]}
            if cell["verdict"] == "fail" and "failed_tests" in cell:
                want.update({"data-failed": str(cell["failed_tests"]), "data-ratio": ratio_text(cell["worst_ratio"])})
            wants.append(want)
        expected[row_id(row)] = wants
    problems += table_problems("row", expected, dict(d.rows))
    if "summary" not in d.ids:
        problems.append("no table#summary in the rendered page")
    problems += table_problems("summary", summary_expected(board), dict(d.summary))
    history_items = history_expected(board)
    for item, versions in history_items.items():
        if d.history.get(item) != versions:
            problems.append(f"history {item}: {d.history.get(item)!r}, the JSON says {versions!r}")
    problems += [f"history {item} is not in the JSON" for item in d.history if item not in history_items]
    problems += [f"link #{target} has no target on the page" for target in d.links if target not in d.ids]
    return problems
