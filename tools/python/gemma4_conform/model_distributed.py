"""conform-model --distributed: the model checks under PyTorch's own distributed engine.

    torchrun --nproc-per-node N -m gemma4_conform conform-model --distributed --factory MODULE:FACTORY
        [--device cpu|cuda] [--dtype f32|bf16|f16] [--golden NAME] [--checkpoint model|wrapper]
        [--steps N] [--equal-steps K] [--timeout S] [--report F.json] [--junit F.xml] [--verbose]

Every rank builds the module with the factory, loads the golden's weights and shards it with FSDP2:
fully_shard on each decoder layer (the children of the module's nn.ModuleList named 'layers'), then
on the root. Activation checkpointing is the module's own (gradient_checkpointing_enable) or
torch's checkpoint_wrapper around each layer (--checkpoint wrapper). NCCL on CUDA (one GPU per
rank, LOCAL_RANK), gloo on the CPU; every collective has --timeout (init_process_group's timeout).

Each rank trains on its own sequence of N (data parallel). The checks, each a row per rank:
- distributed/sharded-equals-single/<golden>: K steps of SGD (lr 1e-2). Each step's loss (the mean
  of the ranks' losses) and every gradient (full_tensor(), gathered) must equal the single-device
  run of the same module on all N sequences, without checkpointing, under the rule of the suite's
  multithreaded_recompute (conformance/compare.h: fp32 max-abs <= 1e-4 x max|single|, cosine >=
  0.99999; bf16/f16 the single run's own error against its fp32 run as the baseline).
- distributed/memory-flatness/<golden>: --steps training steps with checkpointing, gradients
  dropped and Python's cycle collector run after each; the least-squares slope of the rank's live
  bytes (CUDA: the caching allocator's allocated bytes; CPU: the suite's tracking allocator) must
  stay under 1% of one step's shared K/V (model_memory.py has the rule and why).

A rank whose module raises records a failure row naming the rank; the other ranks' collectives then
time out instead of hanging, and every later check is a failure row "not run". The ranks exchange
results through files in --work (default: beside --report), so a broken process group cannot lose
them; rank 0 waits for every rank (up to --timeout), writes the report and exits 1 on any failure.
"""
from __future__ import annotations

import argparse
import dataclasses
import gc as python_gc
import json
import os
import sys
import time
from datetime import timedelta
from pathlib import Path

import torch

from .model_under_test import DTYPES, ModelError, ModelUnderTest, accepts, golden_names, one_line

PROGRAM = "torchrun ... -m gemma4_conform conform-model --distributed"
CHECKPOINT_PREFIX = "_checkpoint_wrapped_module."  # what checkpoint_wrapper adds to parameter names


def parse(argv):
    p = argparse.ArgumentParser(prog=PROGRAM, description=__doc__.split("\n\n")[2].replace("\n", " "))
    p.add_argument("--distributed", action="store_true", help="(this mode)")
    p.add_argument("--factory", required=True,
                   help="MODULE:FACTORY; FACTORY(config, dtype, device) returns the nn.Module")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--dtype", choices=tuple(DTYPES), default="f32")
    p.add_argument("--golden", default="model/e2b", help="the model golden whose config and weights are used")
    p.add_argument("--geometry", choices=tuple(released()), help="instead of a golden: the released geometry at real "
                   "width, reduced to its first pattern of layers (repeated as KV-shared layers where it shares "
                   "K/V), weights from the factory's own initialisation under one seed on every rank")
    p.add_argument("--checkpoint", choices=("model", "wrapper"), default="model",
                   help="the module's gradient_checkpointing_enable(), or checkpoint_wrapper per layer")
    p.add_argument("--seq", type=int, default=128, help="tokens per sequence (one sequence per rank)")
    p.add_argument("--steps", type=int, default=200, help="memory-flatness steps (at least 10)")
    p.add_argument("--equal-steps", type=int, default=3, help="SGD steps compared with the single-device run")
    p.add_argument("--timeout", type=float, default=300, help="seconds any collective, and rank 0's wait, may take")
    p.add_argument("--report", help="write the JSON report here (rank 0)")
    p.add_argument("--junit", help="write a JUnit XML report here (rank 0)")
    p.add_argument("--work", help="a folder every rank can write (default: beside --report, else /tmp)")
    p.add_argument("--verbose", action="store_true", help="print every row, not only failures")
    args = p.parse_args(argv)
    if args.steps < 10 or args.equal_steps < 1 or args.timeout <= 0 or args.seq < 2:
        p.error("--steps must be >= 10, --equal-steps >= 1, --seq >= 2 and --timeout > 0")
    return args


def released() -> dict:
    """The released configs by short name ("e2b" -> .../reference/configs/gemma-4-e2b.json)."""
    from . import _core

    configs = Path(_core.data_dir()) / "reference" / "configs"
    return {p.stem[len("gemma-4-"):]: p for p in sorted(configs.glob("gemma-4-*.json"))}


@dataclasses.dataclass
class Source:
    """What the ranks train: a config and its weights by golden name (a golden, or a geometry's)."""
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


def geometry_source(model: ModelUnderTest, name: str, device: str) -> Source:
    from .model_under_test import LAYOUTS, layout_of

    config = json.loads(released()[name].read_text())
    config = reduced(config.get("text_config", config))
    torch.manual_seed(1234)  # the same initialisation on every rank
    module = model.build(config)
    prefix = LAYOUTS[layout_of(module)]
    weights = {(k[len(prefix):] if k.startswith(prefix) else k): v.detach().clone()
               for k, v in module.state_dict().items()}
    return Source(f"{name}-{config['num_hidden_layers']}-layers", config, weights)


def row(case: str, ok: bool, metric="", value=0.0, bound=0.0, detail="", baseline=None) -> dict:
    r = {"case": case, "status": "pass" if ok else "fail", "metric": metric, "value": value, "bound": bound,
         "detail": detail}
    if baseline is not None:
        r["baseline"] = baseline
    return r


# --- the model, sharded ------------------------------------------------------------------------


def decoder_layers(module: torch.nn.Module) -> torch.nn.ModuleList:
    for name, child in module.named_modules():
        if isinstance(child, torch.nn.ModuleList) and name.rsplit(".", 1)[-1] == "layers" and len(child):
            return child
    raise ModelError("the module has no non-empty nn.ModuleList named 'layers' (the decoder layers to shard)")


def sharded(loaded, mesh, checkpoint: str) -> torch.nn.Module:
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper
    from torch.distributed.fsdp import fully_shard

    module = loaded.module
    layers = decoder_layers(module)
    if checkpoint == "wrapper":
        for i in range(len(layers)):
            layers[i] = checkpoint_wrapper(layers[i])
    elif not hasattr(module, "gradient_checkpointing_enable"):
        raise ModelError("the module has no gradient_checkpointing_enable() (try --checkpoint wrapper)")
    else:
        module.gradient_checkpointing_enable()
    for layer in layers:
        fully_shard(layer, mesh=mesh)
    fully_shard(module, mesh=mesh)
    module.train()
    return module


def step(module, ids: torch.Tensor):
    kwargs = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": ids}
    # Training keeps no KV cache: a recompute under checkpoint_wrapper would append to it again
    # (the model's own gradient checkpointing turns use_cache off for the same reason).
    if accepts(module, "use_cache"):
        kwargs["use_cache"] = False
    out = module(**kwargs)
    if getattr(out, "loss", None) is None:
        raise ModelError("forward(labels=...) returned no .loss")
    out.loss.backward()
    return out.loss.detach()


def full_grads(module, layout: str, wanted: frozenset) -> dict:
    """grads/<golden name> -> the whole gradient on the CPU (DTensor shards gathered)."""
    names = {n.replace(CHECKPOINT_PREFIX, ""): g.replace(CHECKPOINT_PREFIX, "")
             for n, g in golden_names(module, layout).items()}
    out = {}
    for name, param in module.named_parameters():
        golden = names.get(name.replace(CHECKPOINT_PREFIX, ""))
        if golden is None or golden not in wanted:
            continue
        grad = param.grad
        if grad is not None and hasattr(grad, "full_tensor"):
            grad = grad.full_tensor()
        out[f"grads/{golden}"] = torch.zeros(param.shape) if grad is None else grad.detach().float().cpu()
    return out


def sgd(module, lr: float = 1e-2) -> None:
    with torch.no_grad():
        for p in module.parameters():
            if p.grad is not None:
                p.add_(p.grad, alpha=-lr)
    module.zero_grad(set_to_none=True)


# --- the checks ----------------------------------------------------------------------------------


class Run:
    def __init__(self, args, golden, rank: int, world: int, mesh, device: str):
        self.args, self.rank, self.world, self.mesh, self.device = args, rank, world, mesh, device
        self.model = ModelUnderTest(_factory(args.factory), args.factory, device, args.dtype)
        self.golden = golden or geometry_source(self.model, args.geometry, device)
        g = torch.Generator().manual_seed(17)
        self.ids = torch.randint(0, self.golden.config["vocab_size"], (world, args.seq), generator=g)

    def single(self, dtype: str) -> list:
        """Each step's loss and gradients of the module on one device, all sequences at once."""
        weights = self.golden.weights if dtype == self.args.dtype else {n: w.float() for n, w in
                                                                          self.golden.weights.items()}
        loaded = self.model.load(self.golden.config, weights, dtype=dtype)
        loaded.module.train()
        steps = []
        for _ in range(self.args.equal_steps):
            loss = step(loaded.module, self.ids.to(self.device))
            steps.append({"outputs/loss": loss.float().cpu(), **full_grads(loaded.module, loaded.layout,
                                                                          loaded.golden_weights)})
            sgd(loaded.module)
        return steps

    def sharded_equals_single(self) -> list:
        from . import _core
        import torch.distributed as dist

        reference = self.single(self.args.dtype)
        truth = self.single("f32") if self.args.dtype != "f32" else [{} for _ in reference]
        loaded = self.model.load(self.golden.config, self.golden.weights)
        module = sharded(loaded, self.mesh, self.args.checkpoint)
        rows = []
        for k in range(self.args.equal_steps):
            loss = step(module, self.ids[self.rank:self.rank + 1].to(self.device)).float()
            dist.all_reduce(loss)  # each rank's loss is its sequence's mean: their mean is the batch's
            tensors = {"outputs/loss": (loss / self.world).cpu(), **full_grads(module, loaded.layout,
                                                                              loaded.golden_weights)}
            for r in _core.compare_runs(tensors, reference[k], truth[k], {}, self.args.dtype, False):
                rows.append(row(f"rank{self.rank}/step{k}/{r['case']}", r["status"] == "pass", r["metric"],
                                r["value"], r["bound"], r["detail"], r["baseline"]))
            sgd(module)
        return rows

    def memory_flatness(self) -> list:
        from . import _core
        from .model_memory import live_bytes, shared_kv_bytes, slope

        config = self.golden.config
        kv = shared_kv_bytes(config, 1, self.args.seq, self.args.dtype)
        kv_of = "one step's shared K/V"
        if kv == 0:  # no KV sharing (26B-A4B, 31B): a leak of any layer's K/V is the smallest to catch
            element = torch.tensor([], dtype=DTYPES[self.args.dtype]).element_size()
            kv = 2 * config["num_key_value_heads"] * self.args.seq * config["head_dim"] * element
            kv_of = "one sliding layer's K/V (the config shares none)"
        if self.device == "cpu":
            _core.install_tracking_cpu_allocator()
        loaded = self.model.load(self.golden.config, self.golden.weights)
        module = sharded(loaded, self.mesh, self.args.checkpoint)
        ids = self.ids[self.rank:self.rank + 1].to(self.device)
        steps, warmup = self.args.steps, max(3, self.args.steps // 10)
        python_gc.collect()
        python_gc.freeze()
        xs, ys = [], []
        for i in range(steps):
            step(module, ids)
            module.zero_grad(set_to_none=True)
            python_gc.collect()
            if i >= warmup:
                xs.append(i)
                ys.append(live_bytes(self.device.split(":")[0]))
        s, bound = slope(xs, ys), 0.01 * kv
        detail = (f"rank {self.rank} of {self.world}: {steps} steps, slope over steps {warmup}..{steps - 1}; live "
                  f"bytes {ys[0]} -> {ys[-1]}; {kv_of} {kv} B (B=1, S={self.args.seq})")
        return [row(f"rank{self.rank}", s < bound, "slope_bytes_per_step", s, bound, detail)]


def _factory(spec: str):
    from .model_runner import resolve

    return resolve(spec)


CHECKS = ("sharded-equals-single", "memory-flatness")


# --- ranks, results through files, the report ----------------------------------------------------


def work_dir(args) -> Path:
    if args.work:
        return Path(args.work)
    run = f"{os.environ.get('MASTER_ADDR', 'local')}-{os.environ.get('MASTER_PORT', '0')}"
    base = Path(args.report).resolve().parent if args.report else Path("/tmp")
    return base / f"gemma4-conform-distributed-{run}"


def wait_for(paths: list, timeout: float) -> list:
    """The paths that exist within `timeout` seconds (all of them, unless a rank is gone)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not all(p.exists() for p in paths):
        time.sleep(0.2)
    return [p for p in paths if p.exists()]


def run_rank(args, rank: int, world: int, work: Path) -> None:
    """Runs every check on this rank; after each, writes its rows and waits for every rank's."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    from . import read_golden
    from .model_checks import model_goldens

    device = f"cuda:{int(os.environ.get('LOCAL_RANK', rank))}" if args.device == "cuda" else "cpu"
    if args.device == "cuda":
        torch.cuda.set_device(device)
    dist.init_process_group("nccl" if args.device == "cuda" else "gloo", timeout=timedelta(seconds=args.timeout))
    mesh = init_device_mesh(args.device, (world,))
    golden = None
    if not args.geometry:
        golden = next((g for g in model_goldens(args.dtype) if g.name == args.golden), None)
    broken = None if golden or args.geometry else f"no model golden {args.golden!r} in {args.dtype}"
    run = None
    for check in CHECKS:
        started = time.monotonic()
        if broken:
            rows = [row(f"rank{rank}", False, detail=f"not run: {broken}")]
        else:
            try:
                run = run or Run(args, golden, rank, world, mesh, device)
                rows = getattr(run, check.replace("-", "_"))()
            except Exception as e:  # the module under test, or a collective that timed out
                rows = [row(f"rank{rank}", False, detail=f"rank {rank} raised {one_line(e)}")]
        raised = rows[0]["detail"].startswith(f"rank {rank} raised")
        # Written whole, then renamed: a rank that sees the file reads all of it.
        partial = work / f"{check}.rank{rank}.json.partial"
        partial.write_text(json.dumps({"rows": rows, "seconds": time.monotonic() - started, "raised": raised}))
        os.replace(partial, work / f"{check}.rank{rank}.json")
        paths = [work / f"{check}.rank{r}.json" for r in range(world)]
        done = wait_for(paths, args.timeout)
        failed = [r for r, p in enumerate(paths) if p not in done or json.loads(p.read_text())["raised"]]
        if broken is None and failed:
            broken = f"rank {', '.join(map(str, failed))} failed in {check} (its rows say why)"
    try:
        dist.destroy_process_group()
    except Exception:  # a group broken by a timed-out collective
        pass


def subject(args) -> str:
    return f"{args.geometry}-reduced" if args.geometry else args.golden


def merge(args, world: int, work: Path) -> dict:
    results = {}
    for check in CHECKS:
        test = f"distributed/{check}/{subject(args)}"
        rows, seconds = [], 0.0
        for r in range(world):
            path = work / f"{check}.rank{r}.json"
            if path.exists():
                got = json.loads(path.read_text())
                rows += got["rows"]
                seconds = max(seconds, got["seconds"])
            else:
                rows.append(row(f"rank{r}", False, detail=f"rank {r} did not report within {args.timeout:g} s "
                                                          f"(its process died or hung)"))
        for r in rows:
            r.update(test=test, category="distributed")
        results[test] = {"rows": rows, "notes": [], "seconds": seconds}
    return results


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
    work = work_dir(args)
    work.mkdir(parents=True, exist_ok=True)
    # A rank removes its own files of an earlier run before init_process_group, which every rank
    # must reach: afterwards no rank can read another's stale result.
    for old in work.glob(f"*.rank{rank}.json"):
        old.unlink()
    run_rank(args, rank, world, work)
    if rank != 0:
        return 0
    from .model_runner import print_rows, summary, write_junit

    results = merge(args, world, work)
    print_rows(results, args.verbose)
    _, failed = summary(results)
    label = f"{args.factory} ({args.device}, {args.dtype}, {world} ranks, checkpoint {args.checkpoint})"
    print(f"{'FAIL' if failed else 'PASS'}: {len(results) - failed}/{len(results)} checks passed: {label}")
    report = {"factory": args.factory, "device": args.device, "dtype": args.dtype, "world_size": world,
              "checkpoint": args.checkpoint, "subject": subject(args), "checks": len(results), "failed_checks": failed,
              "passed": failed == 0, "seconds": {t: round(r["seconds"], 3) for t, r in results.items()},
              "results": [r for res in results.values() for r in res["rows"]]}
    path = args.report or str(work / "report.json")
    Path(path).write_text(json.dumps(report, indent=2) + "\n")
    print(f"report: {path}")
    if args.junit:
        write_junit(args.junit, results, label)
    return 1 if failed else 0
