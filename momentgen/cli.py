"""The ``momentgen`` command.

Subcommands:

* ``momentgen words --model tied --K 2 --degree 6``: count (or ``--list``) canonical words;
* ``momentgen hierarchy --model tied --K 2 --trainable 1 --degree 10 --observables "S1 S2"``:
  derive a truncation and print its diagnostics (words per degree, nnz, dropped words,
  coefficient symbols); ``--why WORD`` explains why a word is in the state;
* ``momentgen generate-truncation CONFIG [--degree M] [--out generated/NAME.py]``: write an
  importable module (and its .npz) for a configuration file;
* ``momentgen solve CONFIG --json OUT [--degree M] [--closure zero|quadrature|matrix-model]
  [--size n]``: integrate with the chosen closure at two resolutions (degrees M and M − 2;
  orders n and n − 1; sizes n and n/2) and write the trajectory, status, error estimate and
  validity horizon;
* ``momentgen simulate CONFIG --json OUT [--d D] [--seeds N]``: online SGD on the model's
  time axis (mean and spread over seeds);
* ``momentgen compare CONFIG [--degrees 2,4,6,8] [--d 200,400] [--seeds N] [--out DIR]
  [--closures zero,quadrature,matrix-model] [--theory-init finite] [--scheduler tcp://…]``:
  theory per degree and per closure, SGD and matrix flow per d; writes
  ``DIR/compare.png`` and ``DIR/compare.json`` (with a table of sup-errors).
"""

import argparse
import json
import pathlib
import sys
import time

from .errors import MomentgenError
from .hierarchy import Model, build
from .words import MODELS, enumerate_words

__all__ = ["main"]


def _model_arguments(parser):
    parser.add_argument("--model", required=True, choices=MODELS, help="attention parameterisation")
    parser.add_argument("--K", type=int, required=True, help="number of indices (heads / student + teacher)")


def _cmd_words(args):
    words = enumerate_words(args.model, args.K, args.degree)
    if args.list:
        print("\n".join(words))
    per = {}
    for w in words:
        per[len(w.split())] = per.get(len(w.split()), 0) + 1
    print(f"{len(words)} canonical words ({args.model}, K = {args.K}); per degree: {per}")


def _cmd_hierarchy(args):
    model = Model(args.model, args.K, args.trainable)
    observables = "all" if args.observables == ["all"] else args.observables
    start = time.perf_counter()
    program = build(model, args.degree, observables)
    print(program.summary())
    print(f"derived in {time.perf_counter() - start:.2f} s")
    for word in args.why:
        print(f"\nwhy is {word!r} here?")
        print("\n".join("  " + line for line in program.why(word)))


def _cmd_generate(args):
    from .config import load_config
    from .emit import write_module

    config = load_config(args.config)
    degree = args.degree or config.section("truncation")["degree"]
    out = args.out or pathlib.Path("generated") / f"{pathlib.Path(args.config).stem}_M{degree}.py"
    command = f"momentgen generate-truncation {args.config} --degree {degree} --out {out}"
    start = time.perf_counter()
    program = write_module(config, out, degree, command=command)
    print(program.summary())
    print(f"wrote {out} and {pathlib.Path(out).with_suffix('.npz')} in {time.perf_counter() - start:.2f} s")


def _cmd_solve(args):
    from .closures import solve_with_closure
    from .config import load_config

    config = load_config(args.config)
    start = time.perf_counter()
    result = solve_with_closure(config, args.closure, args.degree, args.size)
    out = pathlib.Path(args.json)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result))
    print(f"{result['model']} {result['closure']} degree {result['degree']}: status {result['status']}, valid until "
          f"{result['valid_until']:.4g} on {result['time_scale']} ({result['message']}); "
          f"{time.perf_counter() - start:.2f} s; wrote {out}")  # fmt: skip


def _seed_list(config, n):
    return config.section("sgd")["seeds"] if n is None else list(range(n))


def _cmd_simulate(args):
    from .config import load_config
    from .simulate import simulate_config

    config = load_config(args.config)
    result = simulate_config(config, d=args.d, seeds=_seed_list(config, args.seeds))
    out = pathlib.Path(args.json)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result))
    print(f"SGD {result['model']} d={result['d']} eta={result['lr']} B={result['batch']} seeds={result['seeds']}: "
          f"{result['steps'][-1]} steps in {result['seconds']:.1f} s; wrote {out}")  # fmt: skip


def _cmd_compare(args):
    from .compare import compare
    from .config import load_config

    config = load_config(args.config)
    degrees = [int(x) for x in args.degrees.split(",")] if args.degrees else [config.section("truncation")["degree"]]
    dims = [int(x) for x in args.d.split(",")] if args.d else [config.section("sgd")["d"]]
    closures = args.closures.split(",") if args.closures else [config.section("truncation")["closure"]]
    data = compare(config, degrees, dims, _seed_list(config, args.seeds), args.out, scheduler=args.scheduler,
                   n_jobs=args.jobs, closures=closures, theory_init=args.theory_init)  # fmt: skip
    print(f"{'observable':14s} {'comparison':12s} {'theory':>20s} {'d':>5s} {'sup error':>10s} {'in window':>10s}")
    for row in data["table"]:
        valid = "" if row["sup_error_valid"] is None else f"{row['sup_error_valid']:10.2e}"
        print(f"{row['observable']:14s} {row['comparison']:12s} {row['theory'] or '':>20s} {row['d']:5d} "
              f"{row['sup_error']:10.2e} {valid:>10s}")  # fmt: skip
    print(f"wrote {args.out}/compare.png and compare.json in {data['seconds']:.1f} s")


def _parser():
    parser = argparse.ArgumentParser(prog="momentgen", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)

    words = sub.add_parser("words", help="count or list canonical words")
    _model_arguments(words)
    words.add_argument("--degree", type=int, required=True, help="maximal word length")
    words.add_argument("--list", action="store_true", help="print every word")
    words.set_defaults(run=_cmd_words)

    hierarchy = sub.add_parser("hierarchy", help="derive a truncation and print its diagnostics")
    _model_arguments(hierarchy)
    hierarchy.add_argument("--trainable", type=int, nargs="+", default=None, help="1-based trainable indices")
    hierarchy.add_argument("--degree", type=int, required=True, help="truncation degree M")
    hierarchy.add_argument(
        "--observables", nargs="*", default=[], help='words in text syntax, e.g. "S1 S2", or: all'
    )
    hierarchy.add_argument("--why", nargs="*", default=[], help="words whose presence to explain")
    hierarchy.set_defaults(run=_cmd_hierarchy)

    generate = sub.add_parser("generate-truncation", help="write an importable truncation module")
    generate.add_argument("config", help="TOML configuration file")
    generate.add_argument("--degree", type=int, help="override [truncation] degree")
    generate.add_argument("--out", help="module path (default generated/<config>_M<degree>.py)")
    generate.set_defaults(run=_cmd_generate)

    solve = sub.add_parser("solve", help="integrate a truncation with its validity horizon")
    solve.add_argument("config", help="TOML configuration file")
    solve.add_argument("--json", required=True, help="output JSON path")
    solve.add_argument("--degree", type=int,
                       help="override [truncation] degree (quadrature: order n = (M - 1) // 2)")  # fmt: skip
    solve.add_argument("--closure", help="zero | quadrature | matrix-model (default: [truncation] closure)")
    solve.add_argument("--size", type=int, help="matrix-model size n (default: [truncation] size)")
    solve.set_defaults(run=_cmd_solve)

    simulate = sub.add_parser("simulate", help="run the online-SGD reference")
    simulate.add_argument("config", help="TOML configuration file")
    simulate.add_argument("--json", required=True, help="output JSON path")
    simulate.add_argument("--d", type=int, help="override [sgd] d")
    simulate.add_argument("--seeds", type=int, help="number of seeds 0..N-1 (default: [sgd] seeds)")
    simulate.set_defaults(run=_cmd_simulate)

    comparison = sub.add_parser("compare", help="theory vs SGD vs matrix flow: figure and error table")
    comparison.add_argument("config", help="TOML configuration file")
    comparison.add_argument("--degrees", help="comma-separated truncation degrees (default: the config's)")
    comparison.add_argument("--d", help="comma-separated dimensions (default: [sgd] d)")
    comparison.add_argument("--seeds", type=int, help="number of seeds 0..N-1 (default: [sgd] seeds)")
    comparison.add_argument("--out", default="out/compare", help="output directory")
    comparison.add_argument("--scheduler", help="Dask scheduler address, e.g. tcp://127.0.0.1:8786")
    comparison.add_argument("--jobs", type=int, help="local worker processes (default 2)")
    comparison.add_argument("--closures", help="comma-separated: zero, quadrature, matrix-model (default: the config's)")
    comparison.add_argument("--theory-init", choices=("infinite", "finite"), default="infinite",
                            help="start the theory from d = ∞ moments or from each d's SGD matrices (seed 0)")
    comparison.set_defaults(run=_cmd_compare)
    return parser


def main(argv=None):
    """Entry point of the console script; returns the exit status."""
    args = _parser().parse_args(argv)
    try:
        args.run(args)
    except MomentgenError as error:
        print(f"momentgen: error: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
