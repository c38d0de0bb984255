"""conform-model --distributed: the model checks under PyTorch's own distributed engine.

    torchrun --nproc-per-node N -m gemma4_conform conform-model --distributed --factory MODULE:FACTORY
        [--device cpu|cuda] [--dtype f32|bf16|f16] [--golden NAME | --geometry NAME] [--seq S]
        [--sharding fsdp2|fsdp2-mixed-precision|MODULE:FUNCTION] [--checkpoint model|wrapper]
        [--checks C,...] [--steps N] [--equal-steps K] [--equal-seq S] [--timeout S]
        [--report F.json] [--junit F.xml] [--verbose]

Every rank builds the module with the factory and loads the golden's weights (or, with --geometry,
a released geometry at real width reduced to its first pattern of layers). The sharding strategy
(default fsdp2: fully_shard per decoder layer, then the root) shards it; activation checkpointing
is the module's own (gradient_checkpointing_enable) or checkpoint_wrapper per layer. NCCL on CUDA
(one GPU per rank, LOCAL_RANK), gloo on the CPU; every collective has --timeout.

Each rank trains on its own sequence (data parallel). The checks, each a row per rank, in the suite's
categories (CHECKS):
- distributed/sharded-equals-single/<subject> (multithreaded_recompute): K steps of SGD. Each step's loss (the ranks' mean)
  and every gradient (gathered per parameter on the device) must equal the single-device run
  (model_sharded.py: computed before any process group exists) under compare_runs' rule (fp32:
  max-abs <= 1e-4 x max|single|, cosine >= 0.99999; bf16/f16: the error against the fp32 run at
  most 4x (max-abs) and 3x (RMS) the single-device run's own error; rows print both errors).
- distributed/memory-flatness/<subject> (memory_flatness): --steps training steps with
  checkpointing, gradients dropped and Python's cycle collector run after each; the slope of the
  floor of the rank's live bytes (CUDA: the caching allocator; CPU: the suite's tracking allocator) judged by the
  suite's rule (conformance/flatness.h): under 1% of one step's shared K/V (model_memory.py
  measures; without KV sharing, of one sliding layer's K/V).

Results travel through the rendezvous' c10d store (distributed_exchange.py), not the process group:
a rank whose module raises is a failure row naming it and every later check is "not run"; a rank
that dies or hangs is a row "did not report"; when the launcher stops the ranks (torchrun does once
one fails), the first one stopped still writes the report (the suite's report: model_report.py).
Exit 0 when every check passes, else 1.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
from datetime import timedelta
from pathlib import Path

import torch

from . import _core
from .distributed_exchange import Exchange, on_termination
from .model_report import build, failure, publish, rows_of
from .model_sharded import (SHARDINGS, agreement, judge_sharded_step, release_memory, sgd, sharded, sharding_of,
                            single_device_run, single_process_env, step_loss)
from .model_under_test import DTYPES, LAYOUTS, ModelUnderTest, layout_of, one_line, resolve

PROGRAM = "torchrun ... -m gemma4_conform conform-model --distributed"
# The checks and the suite category each belongs to: sharded-equals-single judges a parallel run of
# the checkpointed training step against the plain (single-device) run under compare_runs' rule, as
# the suite's multithreaded_recompute judges the recompute on other threads; memory-flatness is the
# suite's memory_flatness rule on each rank.
CHECKS = {"sharded-equals-single": _core.Category.multithreaded_recompute,
          "memory-flatness": _core.Category.memory_flatness}
Result, Status = _core.Result, _core.Status


def parse(argv):
    p = argparse.ArgumentParser(prog=PROGRAM, description=__doc__.split("\n\n")[2].replace("\n", " "))
    p.add_argument("--distributed", action="store_true", help="(this mode)")
    p.add_argument("--factory", required=True,
                   help="MODULE:FACTORY; FACTORY(config, dtype, device) returns the nn.Module (dtype: a torch.dtype, "
                   "or the name where the parameter is annotated str)")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--dtype", choices=tuple(DTYPES), default="f32")
    p.add_argument("--golden", default="model/e2b", help="the model golden whose config and weights are used")
    p.add_argument("--geometry", choices=tuple(released()), help="instead of a golden: the released geometry at real "
                   "width, reduced to its first pattern of layers (repeated as KV-shared layers where it shares "
                   "K/V); its weights: --weights")
    p.add_argument("--weights", choices=("constructed", "factory"), default="constructed",
                   help="--geometry's weights: constructed (golden/FORMAT.md: trained-like attention, bf16 close to "
                   "fp32 over depth; vocabulary 32, BOS at each sequence start) or the factory's own initialisation "
                   "under one seed (the released vocabulary, random tokens; numerically chaotic in bf16)")
    p.add_argument("--sharding", default="fsdp2", help="how the module is sharded: " + "; ".join(
                   f"{name} ({s.about})" for name, s in SHARDINGS.items()) + "; or MODULE:FUNCTION, "
                   "FUNCTION(module, mesh, layers, dtype) sharding it in place")
    p.add_argument("--checkpoint", choices=("model", "wrapper"), default="model",
                   help="the module's gradient_checkpointing_enable(), or checkpoint_wrapper per layer")
    p.add_argument("--checks", default=",".join(CHECKS), help=f"comma-separated, of: {', '.join(CHECKS)}")
    p.add_argument("--seq", type=int, default=128, help="tokens per sequence (one sequence per rank)")
    p.add_argument("--steps", type=int, default=200, help="memory-flatness steps (the rule's warm-up is max(3, N/10); "
                   "at least 3 steps must follow it)")
    p.add_argument("--equal-steps", type=int, default=3, help="SGD steps compared with the single-device run")
    p.add_argument("--equal-seq", type=int, help="tokens per sequence in sharded-equals-single (default --seq): "
                   "its fp32 single-device run holds the whole model, its gradients and one sequence's activations")
    p.add_argument("--timeout", type=float, default=300, help="seconds any collective, and each wait for the "
                   "other ranks' results, may take")
    p.add_argument("--report", help="write the JSON report here (default: conform-model-distributed.json)")
    p.add_argument("--junit", help="write a JUnit XML report here")
    p.add_argument("--verbose", action="store_true", help="print every row, not only failures")
    args = p.parse_args(argv)
    args.checks = [c for c in args.checks.split(",") if c]
    if set(args.checks) - set(CHECKS) or not args.checks:
        p.error(f"--checks {','.join(args.checks)!r}: choose from {', '.join(CHECKS)}")
    args.equal_seq = args.equal_seq or args.seq
    if args.equal_steps < 1 or args.timeout <= 0 or min(args.seq, args.equal_seq) < 2:
        p.error("--equal-steps must be >= 1, --seq and --equal-seq >= 2 and --timeout > 0")
    try:
        _core.require_flatness_steps(args.steps)
        args.sharding = sharding_of(args.sharding)
    except (ValueError, RuntimeError) as e:
        p.error(str(e))
    if args.sharding.weights == "f32" and args.dtype == "f32":
        p.error(f"--sharding {args.sharding.name} needs --dtype bf16 or f16 (it computes in --dtype)")
    return args


def released() -> dict:
    """The released configs by short name ("e2b" -> .../reference/configs/gemma-4-e2b.json)."""
    configs = Path(_core.data_dir()) / "reference" / "configs"
    return {p.stem[len("gemma-4-"):]: p for p in sorted(configs.glob("gemma-4-*.json"))}


@dataclasses.dataclass
class Source:
    """What the ranks train: a config and its weights (on the host) by golden name."""
    name: str
    config: dict
    weights: dict


def reduced(config: dict) -> dict:
    """The released config cut to its first pattern of layers (up to the first global layer); with KV
    sharing, the same pattern again as the KV-shared layers. Real width, a few layers."""
    types = config["layer_types"]
    period = types.index("full_attention") + 1
    shared = period if config.get("num_kv_shared_layers") else 0
    out = dict(config, layer_types=types[:period] * (2 if shared else 1), num_kv_shared_layers=shared)
    out["num_hidden_layers"] = len(out["layer_types"])
    return out


CONSTRUCTED_SEED, CONSTRUCTED_VOCAB = 20261126, 32  # the real-size goldens' (golden/generators/hf_real_cases.py)


def geometry_source(model: ModelUnderTest, name: str, weights: str = "constructed") -> Source:
    config = json.loads(released()[name].read_text())
    config = reduced(config.get("text_config", config))
    if weights == "constructed":
        config.update(vocab_size=CONSTRUCTED_VOCAB, vocab_size_per_layer_input=CONSTRUCTED_VOCAB, pad_token_id=0,
                      bos_token_id=_core.constructed_bos_id)
        for drop in ("model_type", "architectures", "dtype", "torch_dtype", "transformers_version"):
            config.pop(drop, None)
        tensors = dict(_core.seeded_weights(config, CONSTRUCTED_SEED, "constructed"))
        return Source(f"{name}-{config['num_hidden_layers']}-layers-constructed", config, tensors)
    torch.manual_seed(1234)  # the same initialisation on every rank
    module = model.build(config)
    prefix = LAYOUTS[layout_of(module)]
    weights = {(k[len(prefix):] if k.startswith(prefix) else k): v.detach().cpu()
               for k, v in module.state_dict().items()}
    del module
    release_memory()
    return Source(f"{name}-{config['num_hidden_layers']}-layers", config, weights)


def golden_source(args) -> Source:
    from .model_checks import model_goldens

    golden = next((g for g in model_goldens(args.dtype) if g.name == args.golden), None)
    if golden is None:
        raise ValueError(f"no model golden {args.golden!r} in {args.dtype}")
    return Source(golden.name, golden.config, golden.weights)


# --- the checks on one rank ----------------------------------------------------------------------


class Rank:
    def __init__(self, args, rank: int, world: int, device: str):
        self.args, self.rank, self.world, self.device = args, rank, world, device
        self.model = ModelUnderTest(resolve(args.factory), args.factory, device, args.dtype)
        self.mesh = None
        with single_process_env():  # a factory sees no launcher while the source is made
            self.source = (geometry_source(self.model, args.geometry, args.weights) if args.geometry
                           else golden_source(args))
        g = torch.Generator().manual_seed(17)
        vocab, length = self.source.config["vocab_size"], max(args.seq, args.equal_seq)
        if args.geometry and args.weights == "constructed":
            # The constructed model's inputs: BOS first (where its sink heads look), no BOS, pad or
            # marker token (the last id) after it, as in the real-size goldens.
            bos = _core.constructed_bos_id
            self.ids = torch.randint(bos + 1, vocab - 1, (world, length), generator=g)
            self.ids[:, 0] = bos
        else:
            self.ids = torch.randint(0, vocab, (world, length), generator=g)
        self.single = self.truth = None

    def single_device_runs(self) -> None:
        """Before init_process_group (model_sharded.py says why): the run in --dtype (with the
        sharding's mixed-precision recipe, if it has one) and, in bf16/f16, the fp32 truth of the rule."""
        ids, steps = self.ids[:, :self.args.equal_seq], self.args.equal_steps
        self.single = single_device_run(self.model, self.source, ids, self.args.dtype, steps,
                                        master=self.args.sharding.weights)
        if self.args.dtype != "f32":
            self.truth = single_device_run(self.model, self.source, ids, "f32", steps)

    def sharded_equals_single(self) -> list:
        import torch.distributed as dist

        loaded = sharded(self.model, self.source, self.mesh, self.args.checkpoint, self.args.sharding)
        ids = self.ids[self.rank:self.rank + 1, :self.args.equal_seq].to(self.device)
        rows = []
        for k in range(self.args.equal_steps):
            loss = step_loss(loaded.module, ids)
            loss.backward()
            loss = loss.detach().float()
            dist.all_reduce(loss)  # each rank's loss is its sequence's mean: their mean is the batch's
            truth = self.truth[k] if self.truth else None
            for r in judge_sharded_step(loaded, loss / self.world, self.single[k], truth, self.args.dtype):
                r.case = f"rank{self.rank}/step{k}/{r.case}"
                rows.append(r)
            sgd(loaded.module)
        del loaded
        self.single = self.truth = None
        release_memory()
        return rows

    def memory_flatness(self) -> list:
        from .model_memory import live_bytes_per_step, track_live_bytes

        config, seq, dtype = self.source.config, self.args.seq, self.args.dtype
        kv, kv_about = _core.shared_kv_bytes(config, 1, seq, dtype), "one step's shared K/V"
        if kv == 0:  # no KV sharing (26B-A4B, 31B): a leak of any layer's K/V is the smallest to catch
            kv = _core.layer_kv_bytes(config, config["layer_types"].index("sliding_attention"), 1, seq, dtype)
            kv_about = "one sliding layer's K/V (the config shares none)"
        track_live_bytes(self.device)
        module = sharded(self.model, self.source, self.mesh, self.args.checkpoint, self.args.sharding).module
        ids = self.ids[self.rank:self.rank + 1, :seq].to(self.device)

        def train_step() -> None:
            step_loss(module, ids).backward()
            module.zero_grad(set_to_none=True)

        row = _core.judge_flatness(live_bytes_per_step(train_step, self.device, self.args.steps), kv, kv_about)
        row.case, row.detail = f"rank{self.rank}", f"rank {self.rank} of {self.world}: {row.detail} (B=1, S={seq})"
        return [row]


def run_rank(args, rank: int, world: int, exchange: Exchange) -> None:
    """Runs every check on this rank; after each, posts its rows and waits for every rank's."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    device = f"cuda:{int(os.environ.get('LOCAL_RANK', rank))}" if args.device == "cuda" else "cpu"
    if args.device == "cuda":
        torch.cuda.set_device(device)
    broken, errors, me = None, {}, None  # errors: check -> why it cannot run on this rank
    exchange.running = args.checks[0]
    try:
        me = Rank(args, rank, world, device)
    except Exception as e:  # the factory, or the golden or geometry it was given
        errors = dict.fromkeys(args.checks, f"rank {rank} raised {one_line(e)}")
    notes = {check: [] for check in args.checks}
    if me is not None and "sharded-equals-single" in args.checks:
        started = time.monotonic()
        try:
            me.single_device_runs()
            notes["sharded-equals-single"].append(
                f"rank {rank}: single-device runs {time.monotonic() - started:.1f} s ({args.dtype}"
                f"{' and the fp32 truth' if args.dtype != 'f32' else ''}, {world} sequences of {args.equal_seq} "
                f"tokens x {args.equal_steps} steps, before init_process_group)")
            if me.truth and rank == 0:
                notes["sharded-equals-single"].append(f"step 0 of the single-device {args.dtype} run: "
                                                      f"{agreement(me.single[0], me.truth[0])}")
        except Exception as e:
            errors["sharded-equals-single"] = f"rank {rank} raised {one_line(e)} (in the single-device run)"
    dist.init_process_group("nccl" if args.device == "cuda" else "gloo", store=exchange.store, rank=rank,
                            world_size=world, timeout=timedelta(seconds=args.timeout))
    if me is not None:
        me.mesh = init_device_mesh(args.device, (world,))
    for check in args.checks:
        exchange.running = check
        started = time.monotonic()
        test, category = test_of(args, check), CHECKS[check]
        if broken:
            rows = [Result(case=f"rank{rank}", status=Status.FAIL, detail=f"not run: {broken}")]
        elif check in errors:
            rows = [Result(case=f"rank{rank}", status=Status.FAIL, detail=errors[check])]
        else:
            try:
                rows = getattr(me, check.replace("-", "_"))()
            except Exception as e:  # the module under test, or a collective that timed out
                rows = [Result(case=f"rank{rank}", status=Status.FAIL, detail=f"rank {rank} raised {one_line(e)}")]
        raised = rows[0].detail.startswith(f"rank {rank} raised")
        exchange.post(check, {"rows": rows_of(test, category, rows), "seconds": time.monotonic() - started,
                              "raised": raised, "notes": notes[check]})
        got = exchange.wait(check, args.timeout)
        failed = [r for r in range(world) if r not in got or got[r]["raised"]]
        if broken is None and failed:
            broken = f"rank {', '.join(map(str, failed))} failed in {check} (its rows say why)"
    exchange.running = None
    try:
        dist.destroy_process_group()
    except Exception:  # a group broken by a timed-out collective
        pass


# --- the report ----------------------------------------------------------------------------------


def subject(args) -> str:
    return f"{args.geometry}-reduced" if args.geometry else args.golden


def test_of(args, check: str) -> str:
    return f"distributed/{check}/{subject(args)}"


def merge(args, world: int, posted: dict, writer: int, running) -> dict:
    """The report's results from what every rank posted ({check: {rank: payload}})."""
    results = {}
    for check in args.checks:
        test, category = test_of(args, check), CHECKS[check]
        rows, notes, seconds = [], [], 0.0
        for r in range(world):
            got = posted.get(check, {}).get(r)
            if got is not None:
                rows += got["rows"]
                notes += got["notes"]
                seconds = max(seconds, got["seconds"])
            elif r == writer and running is not None:  # the writer was stopped before it finished
                when = "during" if running == check else "before"
                rows.append(failure(test, category, f"rank {r} was stopped {when} this check", case=f"rank{r}"))
            else:
                rows.append(failure(test, category, f"rank {r} did not report (its process died, hung or was stopped)",
                                    case=f"rank{r}"))
        results[test] = {"rows": rows, "notes": notes, "seconds": seconds}
    return results


def write_report(args, exchange: Exchange, wait: float, stopped: str = "") -> int:
    posted = {check: exchange.wait(check, wait) for check in args.checks}
    results = merge(args, exchange.world, posted, exchange.rank, exchange.running)
    label = (f"{args.factory} ({args.device}, {args.dtype}, {exchange.world} ranks, {args.sharding.name}, "
             f"checkpoint {args.checkpoint})")
    if stopped:
        print(f"stopped: {stopped}")
    report = build("conform-model --distributed", args.factory, args.device, args.dtype, results,
                   world_size=exchange.world, sharding=args.sharding.name, checkpoint=args.checkpoint,
                   source=subject(args), seq=args.seq, equal_seq=args.equal_seq, stopped=stopped,
                   written_by_rank=exchange.rank)
    publish(report, str(args.report or "conform-model-distributed.json"), args.junit, args.verbose, label=label)
    sys.stdout.flush()
    exchange.report_written.set()
    return 1 if not report["passed"] or stopped else 0


def main(argv) -> int:
    try:
        args = parse(argv)
    except SystemExit as e:
        return int(e.code or 0)
    if "RANK" not in os.environ or "WORLD_SIZE" not in os.environ:
        print(f"{PROGRAM}: error: start it with torchrun (RANK and WORLD_SIZE are not set)", file=sys.stderr)
        return 2
    # NVLink multicast off (GPU-HOST.md): also for any process this one starts.
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    os.environ.setdefault("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    exchange = Exchange.join(rank, world, args.timeout)
    on_termination(exchange, lambda reason: write_report(args, exchange, 0, stopped=reason))
    run_rank(args, rank, world, exchange)
    if rank != 0 or not exchange.claim_report():
        return 0
    return write_report(args, exchange, args.timeout)
