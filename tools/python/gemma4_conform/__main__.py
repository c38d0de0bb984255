"""python -m gemma4_conform: the gemma4-conform CLI, plus backends made in Python.

    python -m gemma4_conform conform --backend MODULE:FACTORY [conform's options]
    python -m gemma4_conform conform-model --factory MODULE:FACTORY [--help for its options]
    python -m gemma4_conform scoreboard --out DIR [--help for its options]

imports MODULE, calls FACTORY() for a gemma4_conform.Backend and runs the suite on it, with every
option of `gemma4-conform conform` (--device, --dtype, --filter, --steps, --report, --junit,
--verbose). `conform-model` judges a whole nn.Module that FACTORY(config, dtype, device) returns
(gemma4_conform/model_runner.py). `--backend NAME` without a colon is an in-tree backend, and every other command
(golden check, backends, calibrate, ...) is the CLI's own.
"""
import sys

from . import Backend, FactoryError, _core, load_factory, run_cli

PROGRAM = "python -m gemma4_conform"


def split_backend(args):
    """(the value of --backend or None, args without --backend and its value)."""
    spec, rest, i = None, [], 0
    while i < len(args):
        if args[i] == "--backend" and i + 1 < len(args):
            spec, i = args[i + 1], i + 2
            continue
        if args[i].startswith("--backend="):
            spec = args[i].split("=", 1)[1]
        else:
            rest.append(args[i])
        i += 1
    return spec, rest


def main(argv=None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args and args[0] in ("-h", "--help", "help"):
        print(__doc__.strip() + "\n")
        return run_cli(args)
    if args and args[0] == "conform-model":
        from . import model_runner
        return model_runner.main(args[1:])
    if args and args[0] == "scoreboard":
        from . import scoreboard
        return scoreboard.main(args[1:])
    spec, rest = split_backend(args[1:])
    if not args or args[0] != "conform" or spec is None or ":" not in spec:
        return run_cli(args)
    if "-h" in args or "--help" in args:  # conform's options, with --backend MODULE:FACTORY
        return _core.conform(PROGRAM, ["--help"], Backend("help")._cpp())
    try:
        backend = load_factory(spec)
        cpp = backend._cpp()
    except (FactoryError, ValueError, TypeError, RuntimeError) as e:
        print(f"{PROGRAM} conform: error: {e}", file=sys.stderr)
        return 1
    return _core.conform(PROGRAM, rest + ["--backend", backend.name], cpp, spec)


if __name__ == "__main__":
    sys.exit(main())
