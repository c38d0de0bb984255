#!/usr/bin/env python3
"""Prints the medians of gemma4-bench JSON reports as a table: one line per benchmark, with its
time, TFLOP/s, GB/s, peak memory and label, or the reason it was skipped. Where the report holds the
ceilings (ceiling/gemm_bf16, ceiling/d2d_copy, measured in the same run) each bf16 TFLOP/s is followed
by its fraction of the GEMM's, each GB/s by its fraction of the copy's. After the table, for each S
where both ran: the cuda backend's sliding_attention TFLOP/s as a fraction of sdpa-cudnn's on
causal_attention_sliding_shape (dense causal at the sliding layer's shape: the sliding kernel's peer).

usage: bench/summarize.py REPORT.json...
       bench/summarize.py --counts REPORT.json    one line: how many benchmarks ran and were skipped
"""
import json
import sys

# The counter a ceiling sets, the ceiling's name, what the fraction is called and the dtype of the rows
# it applies to (the GEMM is bf16: no yardstick for fp16 or fp32 rates; a copy's bytes are any dtype's).
CEILINGS = (("TFLOP/s", "ceiling/gemm_bf16/cuda/8192", "GEMM", "bf16"),
            ("GB/s", "ceiling/d2d_copy/cuda/1GiB", "copy", None))
# The sliding kernel against its peer, and the fraction of the peer's rate asked for, by direction
# (issue 34's minimums: forward 0.85x, forward+backward 0.75x).
PEER = ("sliding_attention", "cuda", "causal_attention_sliding_shape", "sdpa-cudnn", {"fwd": 0.85, "fwdbwd": 0.75})


def cells(name, b, medians):
    out = [f"{b['real_time']:10.3f} {b['time_unit']}"]
    for counter, fmt in (("TFLOP/s", "{:9.4g} TFLOP/s"), ("GB/s", "{:9.4g} GB/s"), ("peak_mem_GiB", "{:6.1f} GiB peak")):
        if counter in b:
            out.append(fmt.format(b[counter]))
            for ceiling_counter, ceiling, short, dtype in CEILINGS:
                applies = dtype is None or f"/{dtype}/" in name or name == ceiling
                if counter == ceiling_counter and applies and medians.get(ceiling, {}).get(counter):
                    out.append(f"{b[counter] / medians[ceiling][counter]:4.0%} of {short}")
    if b.get("label"):
        out.append(f"({b['label']})")
    return "  ".join(out)


def medians_and_errors(report):
    """The benchmarks' names in report order, their medians and why the others were skipped."""
    medians, errors, order = {}, {}, {}  # order: the names as first seen (a dict keeps insertion order)
    for b in report["benchmarks"]:
        name = b["run_name"].removesuffix("/manual_time")
        order.setdefault(name)
        if b.get("error_occurred"):
            errors.setdefault(name, "skipped: " + b.get("error_message", ""))
        elif b.get("aggregate_name") == "median" or b.get("repetitions", 1) == 1:
            medians[name] = b
    return list(order), medians, errors


def rows(report):
    """(name, text) per benchmark in report order: its median, else the reason it was skipped."""
    order, medians, errors = medians_and_errors(report)
    for name in order:
        if name in medians:
            yield name, cells(name, medians[name], medians)
        else:  # a benchmark whose repetitions a cut-short run did not finish has neither
            yield name, errors.get(name, "no median: the run was cut short during its repetitions")


def peer_ratios(report):
    """One line per sliding benchmark of ours whose peer ran: our TFLOP/s over the peer's."""
    op, backend, peer_op, peer_backend, minimums = PEER
    _, medians, _ = medians_and_errors(report)
    for name, b in medians.items():
        parts = name.split("/")  # op/backend/device/geometry/S/dtype/direction
        if parts[:2] != [op, backend] or "TFLOP/s" not in b:
            continue
        peer = medians.get("/".join([peer_op, peer_backend] + parts[2:]), {})
        minimum = minimums.get(parts[-1])
        if peer.get("TFLOP/s") and minimum is not None:
            ratio = b["TFLOP/s"] / peer["TFLOP/s"]
            yield (f"{name}: {b['TFLOP/s']:.4g} / {peer['TFLOP/s']:.4g} TFLOP/s = {ratio:.2f}x {peer_backend} "
                   f"dense causal ({'meets' if ratio >= minimum else 'below'} the {minimum}x minimum)")


def load_report(path):
    with open(path) as f:
        text = f.read()
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        return salvage(text, error)


def salvage(text, error):
    """What a report cut short holds (a time limit killed gemma4-bench mid-write): its context and
    every benchmark entry written whole, with "incomplete" set, rather than no table at all."""
    decoder = json.JSONDecoder()
    report = {"context": {}, "benchmarks": [], "incomplete": str(error)}
    try:
        report["context"] = decoder.raw_decode(text, text.index("{", text.index('"context":')))[0]
    except ValueError:  # no context, or one cut short (JSONDecodeError is a ValueError)
        pass
    at = text.find('"benchmarks":')
    at = text.find("{", at) if at >= 0 else -1
    while at >= 0:  # one entry at a time, until the text ends mid-entry
        try:
            entry, end = decoder.raw_decode(text, at)
        except json.JSONDecodeError:
            break
        report["benchmarks"].append(entry)
        at = text.find("{", end)
    return report


def counts(path):
    texts = [text for _, text in rows(load_report(path))]
    skipped = sum(1 for text in texts if text.startswith(("skipped: ", "no median")))
    return f"{len(texts)} benchmarks, {len(texts) - skipped} timed, {skipped} skipped"


def main(paths):
    if paths[:1] == ["--counts"]:
        print("; ".join(counts(path) for path in paths[1:]))
        return
    for path in paths:
        report = load_report(path)
        context = report["context"]
        print(f"== {path}: {context.get('gpu')} (driver {context.get('nvidia_driver')}), torch {context.get('torch')}, "
              f"git {context.get('git_sha')}")
        if "incomplete" in report:
            print(f"-- incomplete report (the run was cut short: {report['incomplete']}): the "
                  f"{len(report['benchmarks'])} entries written whole")
        table = list(rows(report))
        width = max([58] + [len(name) for name, _ in table])
        for name, text in table:
            print(f"{name:{width}s} {text}")
        ratios = list(peer_ratios(report))
        if ratios:
            print(f"-- {PEER[0]}/{PEER[1]} over {PEER[2]}/{PEER[3]} (TFLOP/s, same S):")
            print("\n".join(ratios))


if __name__ == "__main__":
    main(sys.argv[1:])
