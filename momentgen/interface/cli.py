"""The ``momentgen`` command.

Subcommands:

* ``momentgen words --model tied --K 2 --degree 6``: count (or ``--list``) canonical words;
* ``momentgen hierarchy --model tied --K 2 --trainable 1 --degree 10 --observables "S1 S2"``:
  derive a truncation and print its diagnostics (words per degree, nnz, dropped words,
  coefficient symbols); ``--why WORD`` explains why a word is in the state;
* ``momentgen generate-truncation CONFIG [--degree M] [--out generated/NAME.py]``: write an
  importable module (and its .npz) for a configuration file — the hierarchy truncated at degree M (the zero
  closure's system, valid in a short window); it names the closure for the whole curve (``riccati``, exact, for one
  trainable tied letter against one fixed letter; else ``quadrature`` or ``matrix-model``);
* ``momentgen solve CONFIG --json OUT [--degree M] [--closure zero|riccati|quadrature|matrix-model]
  [--size n] [--draws S] [--jobs N] [--finite-lr] [--no-estimate]``: integrate with the chosen closure at two
  resolutions (degrees M and M − 2; orders n and n − 1; sizes n and n/2, each an ensemble of S draws, on N
  processes: default 2) and write the trajectory, status, error estimate and validity horizon; ``--finite-lr`` adds
  the finite-learning-rate term at κ = lr·d/batch; ``--no-estimate`` runs the reported resolution alone (no
  estimate);
* ``momentgen simulate CONFIG --json OUT [--d D] [--seeds N]``: online SGD on the model's
  time axis (mean and spread over seeds);
* ``solve``, ``simulate`` and ``compare`` take ``--lr``, ``--batch``, ``--momentum β`` (heavy ball; the theory
  runs at lr/(1 − β)) and ``--noise σ`` (label noise: the risk with it, and the excess risk);
* ``momentgen compare CONFIG [--degrees 2,4,6,8] [--d 200,400] [--seeds N] [--out DIR]
  [--closures zero,riccati,quadrature,matrix-model] [--theory-init finite|infinite] [--finite-lr] [--scheduler tcp://…]``:
  theory per degree and per closure, SGD and matrix flow per d; writes
  ``DIR/compare.png`` and ``DIR/compare.json`` (with a table of sup-errors); with ``--finite-lr``
  each theory curve also at the SGD runs' own κ = lr·d/batch;
* ``momentgen spectrum CONFIG --letter S1 --times 0,0.5,1 --json OUT [--closure C] [--degree M] [--no-sgd]``:
  the spectral distribution of a trainable letter at those times (the run's horizon: the last of them)
  from the closure's state (CDF, density, the band its rule certifies) and one SGD run's eigenvalues at
  ``[sgd] d``; writes OUT and OUT.png;
* ``momentgen verify CONFIG [--closure C] [--degree M] [--d 100,200] [--seeds N] [--steps N] [--kappa K]
  [--budget SECONDS] [--jobs N] [--json OUT] [--out DIR]``:
  independent evidence with a verdict (`momentgen.evidence.verification`): drift at t = 0 vs SGD, the closure and a
  second one, SGD at two d extrapolated to d = ∞; exit status 0 ``agree``, 1 ``disagree``, 3 ``cannot
  verify`` (2: an error before anything ran).
"""

import argparse
import pathlib
import signal
import sys
import threading
import time
import warnings
from functools import partial

from threadpoolctl import threadpool_limits

from ..compiler.emit import write_module
from ..compiler.hierarchy import Model, build, check_size
from ..core.codegen import cache_dir, clear_cache
from ..core.errors import MomentgenError
from ..core.files import ensure_outputs, provenance, write_csv, write_json, write_series_csv
from ..core.parallel import check_n_jobs, check_scheduler
from ..core.version import __version__
from ..dynamics.closures import CLOSURES, whole_curve_closure
from ..dynamics.results import REACHED
from ..evidence.evolution import spectrum_evolution, write_spectrum
from ..evidence.verification import EXIT_STATUS
from ..models.words import MODELS, enumerate_words
from ..reference.from_config import simulate_config
from ..setting.config import ConfigError, load_config
from . import api

__all__ = ["main"]

_WORDS_MAX_BYTES = 2 * 2**30  # `words --list` keeps every text in memory: ~150 bytes a word


def _model_arguments(parser):
    parser.add_argument("--model", required=True, choices=MODELS, help="attention parameterisation")
    parser.add_argument(
        "--K", type=_bounded_int(1, 64), required=True, help="number of indices (heads / student + teacher), 1..64"
    )


def _bounded_int(low, high):
    """An argparse type: an integer in [low, high] (a huge or malformed value is a one-line usage error)."""

    def parse(text):
        try:
            value = int(text) if len(text) <= 30 else None
        except ValueError:
            value = None
        if value is None or not low <= value <= high:
            what = "a positive integer" if low == 1 else f"an integer ≥ {low}"
            raise argparse.ArgumentTypeError(f"must be {what} ≤ {high:g}, got {text[:40]!r}")
        return value

    return parse


_positive_int = _bounded_int(1, 10**12)


def _cmd_words(args):
    model = Model(args.model, args.K)
    size = check_size(model, args.degree, "all", max_bytes=_WORDS_MAX_BYTES)
    if size["words"] * 150 > _WORDS_MAX_BYTES:
        raise MomentgenError(
            f"about {size['words']:.3g} canonical words of degree ≤ {args.degree}: too many to list "
            f"(limit {_WORDS_MAX_BYTES / 150:.2g}); lower the degree"
        )
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


#: Command-line options whose name is not ``--`` + the configuration key they set.
_FLAGS = {"T": "--times", "finite_lr": "--finite-lr"}


def _load(args, **overrides):
    """The configuration of ``args.config`` with command-line overrides, validated like the file; a bad
    override is blamed on its option (``--closure quadratur``), not on the file."""
    config = load_config(args.config)
    given = {table: {k: v for k, v in values.items() if v is not None} for table, values in overrides.items()}
    given = {table: values for table, values in given.items() if values}
    try:
        return config.replace(**given) if given else config
    except ConfigError as error:
        raise MomentgenError(_blamed(config, given, error)) from None


def _blamed(config, given, error):
    """The message of a rejected set of overrides, naming the option that fails on its own (else all of them)."""
    for table, values in given.items():
        for key, value in values.items():
            try:
                config.replace(**{table: {key: value}})
            except ConfigError as alone:
                reason = str(alone).removeprefix(f"{config.source}: ")
                if reason.startswith(f"[{table}] {key} "):  # the key's own check: what it must be
                    reason = reason.removeprefix(f"[{table}] {key} ").split(", got ")[0]
                return f"{_flag(key)} {value!r}: {reason}"
    flags = ", ".join(f"{_flag(key)} {value!r}" for values in given.values() for key, value in values.items())
    return f"{flags}: {str(error).removeprefix(f'{config.source}: ')}"


def _flag(key):
    return _FLAGS.get(key, "--" + key.replace("_", "-"))


def _cmd_generate(args):
    config = _load(args, truncation={"degree": args.degree})
    degree = config.settings.truncation.degree
    out = _out_path(args.out) if args.out is not None else _default_module(args.config, degree)
    ensure_outputs([("--out", out)], config.input_paths())
    command = f"momentgen generate-truncation {args.config} --degree {degree} --out {out}"
    start = time.perf_counter()
    written = write_module(config, out, degree, command=command)
    print(written.program.summary())
    print(f"wrote {written.module} and {written.data.name} in {time.perf_counter() - start:.2f} s")
    print(f"the module is the hierarchy truncated at degree {degree} (the zero closure: a short window); ", end="")
    print(_whole(config))


def _whole(config):
    """Which closure gives ``config``'s whole curve, in words (`generate-truncation`'s closing line)."""
    whole = whole_curve_closure(config, config.kappa)
    exact = " — the exact d = ∞ flow of this one trainable tied letter (MATH.md §15)" if whole.name == "riccati" else ""
    ensemble = {key: value for key, value in whole.checked_resolution(config).items() if key in ("size", "draws")}
    flags = "".join(f" --{key} {value}" for key, value in ensemble.items())  # the vouching ensemble's resolution
    return f"for the whole curve: momentgen solve {config.source} --closure {whole.name}{flags}{exact}"


def _cmd_solve(args):
    config = _load(
        args,
        truncation={"degree": args.degree, "closure": args.closure, "size": args.size, "draws": args.draws},
        integrate={"finite_lr": True if args.finite_lr else None},
        sgd=_sgd_overrides(args),
        loss={"noise": args.noise},
    )
    ensure_outputs(_run_outputs(args.json), config.input_paths())
    start = time.perf_counter()
    # no closure named (--closure, --degree): the one that vouches for the horizon (`momentgen.interface.api.solve`)
    result = api.solve(
        config,
        closure=args.closure,
        degree=args.degree,
        cache=args.cache,
        estimate=not args.no_estimate,
        n_jobs=args.jobs,
    )
    _write_run(args.json, {**result.to_json(), "provenance": provenance(config)}, result.t,
               {**result.series, **result.derived})  # fmt: skip
    rate = f" with the finite-learning-rate term (kappa = {result.kappa:.3g})" if result.kappa else ""
    print(
        f"{result.model} {result.closure}{rate}: status {result.status}; {_horizon(result)}; "
        f"{time.perf_counter() - start:.2f} s; wrote {args.json}\n  {result.message}"
    )
    return 0 if result.status in REACHED else 1


def _sgd_overrides(args):
    """``[sgd]`` keys set on the command line (``--lr``, ``--batch``, ``--momentum``, and ``--d`` where it is one
    number)."""
    given = {"lr": args.lr, "batch": args.batch, "momentum": args.momentum}
    if isinstance(getattr(args, "d", None), int):
        given["d"] = args.d
    return given


def _cache_argument(parser):
    """``--cache [FOLDER]``: the result store (`momentgen.core.store`; without a folder, the default one)."""
    parser.add_argument("--cache", nargs="?", const=True, default=None, metavar="FOLDER",
                        help="read the result back from this result store if it holds it, else compute and file it "
                        "(no FOLDER: $MOMENTGEN_CACHE or ~/.cache/momentgen)")  # fmt: skip


def _sgd_arguments(parser, d=False):
    """``--lr`` and ``--batch`` (and ``--d``) overriding ``[sgd]``: κ = lr·d/batch of the finite-learning-rate
    term and the SGD reference."""
    parser.add_argument("--lr", type=float, help="override [sgd] lr")
    parser.add_argument("--batch", type=_positive_int, help="override [sgd] batch")
    parser.add_argument("--momentum", type=float, help="override [sgd] momentum (heavy ball β; theory at lr/(1 − β))")
    parser.add_argument("--noise", type=float, help="override [loss] noise (label noise σ; MATH.md §13)")
    if d:
        parser.add_argument("--d", type=_positive_int, help="override [sgd] d")


def _out_path(text):
    """An ``--out``/``--json`` value as a path; an empty one is refused (it would mean the working directory)."""
    if not str(text).strip():
        raise MomentgenError("an output path is empty: name a file or folder, e.g. --out out/run")
    return pathlib.Path(text)


def _default_module(config, degree):
    return pathlib.Path("generated") / f"{pathlib.Path(config).stem}_M{degree}.py"


def _run_outputs(json_path):
    """The files `_write_run` writes: the JSON and the CSV beside it."""
    path = _out_path(json_path)
    return [("--json", path), ("the CSV beside --json", path.with_suffix(".csv"))]


def _write_run(path, data, t, series):
    """The JSON and, next to it, the same curves as CSV (``.csv`` for the JSON's suffix)."""
    write_json(path, data)
    write_series_csv(pathlib.Path(path).with_suffix(".csv"), t, series)


def _horizon(result):
    """What the closure vouches for, in words (its estimate and window, or why there is none)."""
    scale, closure = result.time_scale, CLOSURES[result.closure]
    if not closure.window_from_degrees:
        if result.error_estimate is None:
            return "no error estimate (see the message)"
        bound = "" if result.estimate_is_bound else " (not a bound)"
        window = (
            f"the estimate exceeds validity_tol from the start (raise the {closure.resolution} or validity_tol)"
            if not result.valid_until
            else f"within validity_tol until {result.valid_until:.4g} on {scale}"
        )
        return f"error estimate {result.error_estimate:.2g} at the horizon{bound}; {window}"
    if result.extra.get("closed"):
        return f"exact (closed system) until {result.valid_until:.4g} on {scale}"
    if not result.valid_until:
        return "no validity window: degrees M and M − 2 differ beyond validity_tol at once (use a flow closure)"
    return f"valid until {result.valid_until:.4g} on {scale} (degrees M and M − 2 agree to validity_tol)"


def _seed_list(config, n):
    return config.settings.sgd.seeds if n is None else list(range(n))


def _cmd_simulate(args):
    seeds = None if args.seeds is None else list(range(args.seeds))
    config = _load(args, sgd={"d": args.d, "seeds": seeds, **_sgd_overrides(args)}, loss={"noise": args.noise})
    ensure_outputs(_run_outputs(args.json), config.input_paths())
    result = api.stored(args.cache, "simulate-json", config, {}, partial(simulate_config, config), dict, dict)
    extras = ("risk", "risk_se", "excess_risk", "excess_risk_se", "integrated_t")
    columns = {**result["series"], **{k: result[k] for k in extras if k in result}}
    _write_run(args.json, {**result, "provenance": provenance(config)}, result["t"], columns)
    print(
        f"SGD {result['model']} d={result['d']} eta={result['lr']} B={result['batch']} seeds={result['seeds']}: "
        f"status {result['status']}, {result['steps'][-1]} steps per seed in {result['wall_seconds']:.1f} s "
        f"({result['seconds']:.1f} s of compute over {len(result['seeds'])} seed(s)); wrote {args.json}"
    )
    if result["status"] != "ok":
        print(f"  {result['message']}", file=sys.stderr)
        return 1
    return 0


def _cmd_compare(args):
    config = _load(
        args,
        integrate={"finite_lr": True if args.finite_lr else None},
        sgd=_sgd_overrides(args),
        loss={"noise": args.noise},
    )
    degrees = _int_list(args.degrees, "--degrees") or [config.settings.truncation.degree]
    dims = _int_list(args.d, "--d") or [config.settings.sgd.d]
    closures = args.closures.split(",") if args.closures else None
    unknown = [c for c in closures or () if c not in CLOSURES]
    if unknown:
        raise MomentgenError(f"--closures {unknown[0]!r} is not a closure: choose from {', '.join(CLOSURES)}")
    if closures is None and args.degrees:  # degrees name the configured closure's resolution: keep it
        closures = [config.settings.truncation.closure]
    for M in degrees:  # every degree and d passes the same validation as the file's own
        config.replace(truncation={"degree": M})
    for d in dims:
        config.replace(sgd={"d": d})
    check_n_jobs(args.jobs)
    check_scheduler(args.scheduler)
    out = _out_path(args.out)
    figures = [("compare figure", out / f"compare.{suffix}") for suffix in ("png", "svg", "pdf")]
    ensure_outputs([("compare JSON", out / "compare.json"), ("compare CSV", out / "compare.csv"), *figures],
                   config.input_paths())  # fmt: skip
    # no closure named (--closures, --degrees): the one that vouches for the horizon (`momentgen.interface.api.compare`)
    data = api.compare(
        config,
        degrees,
        dims,
        _seed_list(config, args.seeds),
        out,
        closures=closures,
        theory_init=args.theory_init,
        cache=args.cache,
        scheduler=args.scheduler,
        n_jobs=args.jobs,
    )
    if data.get("note"):
        print(f"momentgen: {data['note']}", file=sys.stderr)
    print(f"{'observable':14s} {'comparison':12s} {'theory':>20s} {'d':>5s} {'sup error':>10s} {'in window':>10s}")
    for row in data["table"]:
        valid = "—" if row["sup_error_valid"] is None or row["valid_until"] == 0 else f"{row['sup_error_valid']:.2e}"
        print(
            f"{row['observable']:14s} {row['comparison']:12s} {row['theory'] or '':>20s} {row['d']:5d} "
            f"{row['sup_error']:10.2e} {valid:>10s}"
        )
    print(f"wrote {out}/compare.png and compare.json in {data['seconds']:.1f} s")


def _cmd_verify(args):
    config = _load(args, truncation={"degree": args.degree})
    dims = _int_list(args.d, "--d") or [100, 200]
    if len(dims) != 2:
        raise MomentgenError(f"--d takes two dimensions d1,d2, got {args.d!r}")
    outputs = _run_outputs(args.json) if args.json is not None else []
    if args.out is not None:
        folder = _out_path(args.out)
        outputs += [("verify output", folder / name) for name in ("verify.json", "verify.csv", "verify.png")]
        outputs += [("verify figure", folder / f"verify.{suffix}") for suffix in ("svg", "pdf")]
    ensure_outputs(outputs, config.input_paths())
    result = api.verify(
        config, dims, list(range(args.seeds)), steps=args.steps, kappa=args.kappa, out=args.out,
        closure=args.closure, budget=args.budget, n_jobs=args.jobs, cache=args.cache,
    )  # fmt: skip
    if args.json:
        write_json(args.json, {**result.to_json(), "provenance": provenance(config)})
        write_csv(pathlib.Path(args.json).with_suffix(".csv"), ["check", "passed", "message"], result.rows())
    for name, check in result.checks.items():
        mark = {True: "pass", False: "FAIL", None: "—"}[check["passed"]]
        print(f"{name:12s} {mark:5s} {check['message']}")
    print(f"verdict: {result.verdict}" + (f" — {result.message}" if result.verdict != "agree" else ""))
    return EXIT_STATUS[result.verdict]


def _cmd_spectrum(args):
    times = _float_list(args.times, "--times")
    config = _load(
        args,
        truncation={"degree": args.degree, "closure": args.closure, "size": args.size},
        integrate={"T": max(times) if max(times) > 0 else None},  # the run ends at the last time asked for
        sgd={"d": args.d},
    )
    path = _out_path(args.json)
    if path.suffix != ".json":  # the JSON is written at path.with_suffix(".json"): only then is it --json itself
        raise MomentgenError(f"--json {str(path)!r}: name a .json file (the figure goes beside it as .png)")
    ensure_outputs([("--json", path), ("the figure beside --json", path.with_suffix(".png"))], config.input_paths())
    start = time.perf_counter()
    data = spectrum_evolution(config, args.letter, times, with_sgd=not args.no_sgd)
    write_spectrum(data, path, config)
    print(
        f"spectrum of {data['of']} at {config.model.definition.time_symbol} = {', '.join(f'{t:g}' for t in times)} "
        f"({data['closure']} closure, {data['status']}); {time.perf_counter() - start:.1f} s; wrote {path} and "
        f"{path.with_suffix('.png')}"
    )


def _float_list(text, option):
    try:
        values = [float(x) for x in text.split(",")]
    except ValueError:
        raise MomentgenError(f"{option} must be comma-separated numbers, e.g. 0,0.5,1; got {text!r}") from None
    if not values or len(values) > 12:
        raise MomentgenError(f"{option} takes 1 to 12 times, got {len(values)}")
    return values


def _cmd_cache(args):
    folder = cache_dir() / "kernels"
    kernels = sorted(p for p in folder.rglob("*") if p.is_file()) if folder.is_dir() else []
    if args.action == "info":
        size = sum(p.stat().st_size for p in kernels if p.is_file())
        print(f"kernel cache {folder}: {len(kernels)} files, {size / 1e6:.1f} MB")
        return 0
    removed = clear_cache()
    print(f"removed {removed} files from {folder}")
    return 0


def _cmd_latex(args):
    config = _load(args, truncation={"degree": args.degree})
    truncation = config.settings.truncation
    program = build(config.model, truncation.degree, truncation.observables, max_bytes=config.max_bytes)
    print(program.to_latex(limit=args.words))
    return 0


def _int_list(text, option):
    if not text:
        return None
    try:
        values = [int(x) for x in text.split(",")]
    except ValueError:
        raise MomentgenError(f"{option} must be comma-separated integers, got {text!r}") from None
    return values


def _parser():
    parser = argparse.ArgumentParser(
        prog="momentgen",
        description="Compile, solve and check the large-d training curves of online SGD on attention-indexed "
        "models. `momentgen COMMAND --help` describes each command; the README has worked examples.",
    )
    parser.add_argument("--version", action="version", version=f"momentgen {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    words = sub.add_parser("words", help="count or list canonical words")
    _model_arguments(words)
    words.add_argument("--degree", type=_positive_int, required=True, help="maximal word length")
    words.add_argument("--list", action="store_true", help="print every word")
    words.set_defaults(run=_cmd_words)

    hierarchy = sub.add_parser("hierarchy", help="derive a truncation and print its diagnostics")
    _model_arguments(hierarchy)
    hierarchy.add_argument("--trainable", type=_positive_int, nargs="+", default=None, help="1-based trainable indices")
    hierarchy.add_argument("--degree", type=_positive_int, required=True, help="truncation degree M")
    hierarchy.add_argument("--observables", nargs="*", default=[], help='words in text syntax, e.g. "S1 S2", or: all')
    hierarchy.add_argument("--why", nargs="*", default=[], help="words whose presence to explain")
    hierarchy.set_defaults(run=_cmd_hierarchy)

    generate = sub.add_parser("generate-truncation", help="write an importable truncation module")
    generate.add_argument("config", help="TOML configuration file")
    generate.add_argument("--degree", type=_positive_int, help="override [truncation] degree")
    generate.add_argument("--out", help="module path (default generated/<config>_M<degree>.py)")
    generate.set_defaults(run=_cmd_generate)

    solve = sub.add_parser("solve", help="integrate a truncation with its validity horizon")
    solve.add_argument("config", help="TOML configuration file")
    solve.add_argument("--json", required=True, help="output JSON path")
    solve.add_argument(
        "--degree", type=_positive_int, help="override [truncation] degree (quadrature: order n = (M - 1) // 2)"
    )
    solve.add_argument("--closure", help="zero | riccati | quadrature | matrix-model (default: [truncation] closure)")
    solve.add_argument("--size", type=_positive_int, help="matrix-model size n (default: [truncation] size)")
    solve.add_argument(
        "--draws", type=_positive_int, help="matrix-model Haar draws per size (≥ 4: a control-variate ensemble)"
    )
    solve.add_argument(
        "--jobs", type=_positive_int, help="processes for a matrix-model ensemble's draws (default 2; same result)"
    )
    solve.add_argument(
        "--finite-lr",
        action="store_true",
        help="add the finite-learning-rate term at kappa = lr*d/batch of [sgd] (as [integrate] finite_lr = true)",
    )
    solve.add_argument(
        "--no-estimate",
        action="store_true",
        help="the closure's reported leg alone: the same curve, no estimate (status unverified), no closure switched",
    )
    _sgd_arguments(solve, d=True)
    _cache_argument(solve)
    solve.set_defaults(run=_cmd_solve)

    simulate = sub.add_parser("simulate", help="run the online-SGD reference")
    simulate.add_argument("config", help="TOML configuration file")
    simulate.add_argument("--json", required=True, help="output JSON path")
    simulate.add_argument("--d", type=_positive_int, help="override [sgd] d")
    _sgd_arguments(simulate)
    simulate.add_argument("--seeds", type=_positive_int, help="number of seeds 0..N-1 (default: [sgd] seeds)")
    _cache_argument(simulate)
    simulate.set_defaults(run=_cmd_simulate)

    comparison = sub.add_parser("compare", help="theory vs SGD vs matrix flow: figure and error table")
    comparison.add_argument("config", help="TOML configuration file")
    comparison.add_argument("--degrees", help="comma-separated truncation degrees (default: the config's)")
    comparison.add_argument("--d", help="comma-separated dimensions (default: [sgd] d)")
    _sgd_arguments(comparison)
    comparison.add_argument("--seeds", type=_positive_int, help="number of seeds 0..N-1 (default: [sgd] seeds)")
    comparison.add_argument("--out", default="out/compare", help="output directory")
    comparison.add_argument("--scheduler", help="Dask scheduler address, e.g. tcp://127.0.0.1:8786")
    comparison.add_argument("--jobs", type=_positive_int, help="local worker processes (default 2)")
    comparison.add_argument(
        "--closures", help="comma-separated: zero, riccati, quadrature, matrix-model (default: the config's)"
    )
    comparison.add_argument(
        "--theory-init",
        choices=("infinite", "finite"),
        default="finite",
        help="start the theory from each d's SGD matrices (seed 0; default: a d = ∞ start makes a right "
        "theory look wrong at small d) or from the d = ∞ moments",
    )
    comparison.add_argument(
        "--finite-lr",
        action="store_true",
        help="also draw each theory curve with the finite-learning-rate term at the runs' kappa = lr*d/batch",
    )
    _cache_argument(comparison)
    comparison.set_defaults(run=_cmd_compare)

    check = sub.add_parser("verify", help="independent evidence for a configuration, with a verdict")
    check.add_argument("config", help="TOML configuration file")
    check.add_argument(
        "--closure",
        help="zero | riccati | quadrature | matrix-model: verify this one as asked (default: [truncation] closure, "
        "a zero closure whose window ends before T replaced by the whole-curve closure, said in the output)",
    )
    check.add_argument("--degree", type=_positive_int, help="override [truncation] degree")
    check.add_argument("--d", help="two comma-separated SGD dimensions (default 100,200)")
    check.add_argument("--seeds", type=_positive_int, default=8, help="SGD seeds of the finite-d leg (default 8)")
    check.add_argument("--steps", type=_positive_int, default=2000, help="SGD steps of the drift check (default 2000)")
    check.add_argument("--kappa", type=float, help="kappa = lr*d/batch of every SGD run (default: the config's)")
    check.add_argument(
        "--budget", type=float, help="seconds: cut seeds, drift steps and if need be d to fit (the plan is in the JSON)"
    )
    check.add_argument("--jobs", type=_positive_int, help="processes for the seeds and an ensemble's draws (default 2)")
    check.add_argument("--json", help="output JSON path (and its CSV beside it)")
    check.add_argument("--out", help="folder for verify.json, verify.csv and verify.png")
    _cache_argument(check)
    check.set_defaults(run=_cmd_verify)

    spectrum = sub.add_parser("spectrum", help="the spectrum of a trainable letter over time: theory vs SGD")
    spectrum.add_argument("config", help="TOML configuration file")
    spectrum.add_argument("--letter", required=True, help="a trainable letter, e.g. S1 (not symmetric: of X X^T)")
    spectrum.add_argument(
        "--times", required=True, help="comma-separated times ≥ 0, e.g. 0,0.5,1 (the run ends at the last)"
    )
    spectrum.add_argument("--json", required=True, help="output JSON path (the figure goes beside it, .png)")
    spectrum.add_argument("--closure", help="riccati | quadrature | matrix-model (default: [truncation] closure)")
    spectrum.add_argument("--degree", type=_positive_int, help="override [truncation] degree")
    spectrum.add_argument("--size", type=_positive_int, help="matrix-model size n (default: [truncation] size)")
    spectrum.add_argument("--d", type=_positive_int, help="the SGD run's dimension (default: [sgd] d)")
    spectrum.add_argument("--no-sgd", action="store_true", help="skip the SGD eigenvalues")
    spectrum.set_defaults(run=_cmd_spectrum)

    cache = sub.add_parser("cache", help="the compiled-kernel cache: show where it is, or clear it")
    cache.add_argument("action", choices=("info", "clear"))
    cache.set_defaults(run=_cmd_cache)

    latex = sub.add_parser("latex", help="print the derived hierarchy of the observables as LaTeX equations")
    latex.add_argument("config", help="TOML configuration file")
    latex.add_argument("--degree", type=_positive_int, help="override [truncation] degree")
    latex.add_argument("--words", type=_positive_int, default=12, help="equations to print at most (default 12)")
    latex.set_defaults(run=_cmd_latex)
    for action in sub._choices_actions:  # each command's --help opens with its one-line description
        sub.choices[action.dest].description = action.help[0].upper() + action.help[1:] + "."
    return parser


def main(argv=None):
    """Entry point of the console script; returns the exit status (0 ok, 1 a run that did not finish
    well — see its status —, 2 an error, with its one-line message on stderr).

    Runs with one BLAS thread (on the 2-core machines two threads made SGD up to 16× slower).
    """
    args = _parser().parse_args(argv)
    previous = signal.signal(signal.SIGTERM, _terminate) if _in_main_thread() else None
    try:
        with threadpool_limits(1, "blas"), warnings.catch_warnings():
            warnings.simplefilter("default")
            status = args.run(args)
    except MomentgenError as error:
        print(f"momentgen: error: {error}", file=sys.stderr)
        return 2
    except OSError as error:
        print(f"momentgen: error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("momentgen: interrupted", file=sys.stderr)
        return 130
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
    return status or 0


def _in_main_thread():
    return threading.current_thread() is threading.main_thread()


def _terminate(signum, frame):
    """SIGTERM ends a run like Ctrl-C: the worker processes of `momentgen.core.parallel` are stopped with it."""
    raise KeyboardInterrupt


if __name__ == "__main__":
    sys.exit(main())
