"""Fig. 1: tied attention, L = 2 tokens, row-softmax, MSE — truncation degrees vs online SGD.

`examples/configs/fig1_tied_softmax.toml`: d = 400, η = 0.01, B = 512 (ηd/B = 0.0078 ≪ 1, so
the Itô bias of SGD is below 1 %), no weight decay. Theory: zero-closure degrees 2…10, each
with its validity horizon, started from the moments of the first seed's d × d matrices
(MATH.md §7), and the matrix-model closure (n = 400, from the d = ∞ law, valid for all
times); reference: SGD (mean ± sd over seeds) and the finite-d matrix flow from the same
matrices.

Writes ``OUT/compare.png`` and ``OUT/compare.json`` (series and the sup-error table; the
``sup_error_valid`` column is the error on each degree's validity window).
Run: ``python examples/fig1_softmax.py --out out/examples/fig1 [--d 400 --seeds 2]``.
"""

import argparse
import pathlib

from momentgen.compare import compare
from momentgen.config import load_config

CONFIG = pathlib.Path(__file__).with_name("configs") / "fig1_tied_softmax.toml"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="out/examples/fig1")
    parser.add_argument("--d", type=int, default=400)
    parser.add_argument("--seeds", type=int, default=2)
    args = parser.parse_args()
    config = load_config(CONFIG)
    data = compare(config, degrees=(2, 4, 6, 8, 10), dims=(args.d,), seeds=list(range(args.seeds)), out=args.out,
                   closures=("zero", "matrix-model"), theory_init="finite")  # fmt: skip
    sgd = config.section("sgd")
    print(f"eta d / B = {sgd['lr'] * args.d / sgd['batch']:.4f}")
    print(f"{'theory':>20s} {'valid_until':>11s}  sup|theory − SGD| on q12: all / in window")
    for name, theory in data["theory"].items():
        row = next(r for r in data["table"] if r["theory"] == name and r["comparison"] == "theory-sgd"
                   and r["observable"] == "S1 S2")  # fmt: skip
        print(f"{name:>20s} {theory['valid_until']:11.4f}  {row['sup_error']:.2e} / {row['sup_error_valid']:.2e}")
    flow = next(r for r in data["table"] if r["comparison"] == "flow-sgd" and r["observable"] == "S1 S2")
    print(f"flow vs SGD on q12: {flow['sup_error']:.2e}; wrote {args.out}/compare.png and compare.json")


if __name__ == "__main__":
    main()
