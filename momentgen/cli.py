"""The ``momentgen`` command.

Subcommands:

* ``momentgen words --model tied --K 2 --degree 6``: count (or ``--list``) canonical words;
* ``momentgen hierarchy --model tied --K 2 --trainable 1 --degree 10 --observables "S1 S2"``:
  derive a truncation and print its diagnostics (words per degree, nnz, dropped words,
  coefficient symbols); ``--why WORD`` explains why a word is in the state.
"""

import argparse
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
