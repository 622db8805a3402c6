"""The randomized `verify` campaign: configurations drawn with a fixed seed across kinds, L, K, token
covariances, width ratios, initial laws (identity, from-file, means), losses and weight decay.

``python -m tests.campaign --out out/campaign`` (``make verify-campaign``) runs `momentgen.evidence.verification` on
each and writes the table (config → verdict → worst leg) as JSON and Markdown;
``tests/end_to_end/test_campaign.py`` (marker ``slow``) asserts the verdicts.
"""

import argparse
import json
import pathlib
import sys
import time

import numpy as np
from threadpoolctl import threadpool_limits

from momentgen.evidence.verification import verify
from momentgen.setting.config import parse_config
from momentgen.setting.matrices import initial_factors

SEED = 20261203
COUNT = 16
LOSSES = [
    {"builtin": "mse", "activation": "h1"},
    {"builtin": "mse", "activation": "h2"},
    {"builtin": "mse", "activation": "tanh"},
    {"builtin": "mse", "activation": "erf"},
    {"builtin": "softmax-mse"},
    {"expression": "(G[1,1,1] - G[1,1,2])**2 + 0.05 * G[1,1,1]**4"},
]


def draw(index, folder):
    """The ``index``-th configuration (a raw dict); from-file inits are written under ``folder``."""
    rng = np.random.default_rng([SEED, index])
    kind = ["tied", "untied", "direct", "symmetric"][index % 4]
    L = int(rng.choice([1, 2]))
    K = int(rng.choice([2, 3]))
    loss = dict(LOSSES[int(rng.integers(len(LOSSES)))])
    if "softmax-mse" in loss.values() and L == 1:
        L = 2
    if "expression" in loss:
        L = 1
    if kind == "untied" and loss.get("activation") in ("h2",):  # the untied h2 saddle: SGD escapes at O(ln d) only
        loss["activation"] = "h1"
    raw = {
        "model": {"kind": kind, "L": L, "K": K, "trainable": [1], "gamma": float(rng.choice([0.0, 0.1]))},
        "loss": {**loss, **({"teacher": list(range(2, K + 1))} if "builtin" in loss and K > 2 else {})},
        "init": {},
        "truncation": {
            "degree": 9 if kind == "tied" else (2 if kind in ("direct", "symmetric") else 4),
            "closure": "zero",
            "observables": [],  # the order parameters and the words the coefficients read
        },
        "integrate": {"T": 0.2 if kind != "untied" else 0.05, "points": 6},
        # κ = ηd/B = 0.0075: the κ → 0 curve (finite_lr = false) is what is verified, and verify compares
        # it with SGD at this κ with no allowance, so κ is small enough for its O(κ) effect to be unresolved
        "sgd": {"d": 100, "lr": 0.0075 * 256 / 100, "batch": 256},
    }
    polynomial = "expression" in loss or loss.get("activation") in ("h1", "h2", "h3")
    if kind in ("direct", "symmetric") and polynomial:
        # the closed kinds' zero closure carries the finite-learning-rate term exactly, and a polynomial
        # loss's noise moments are exact (Wick): verify the curve SGD follows at κ (draw 15 without the
        # term: finite-d 1.2× its tolerance, with it 0.1×)
        raw["integrate"]["finite_lr"] = True
    if kind not in ("direct", "symmetric"):  # a flow closure over the whole horizon (closed kinds: zero is exact)
        raw["truncation"].update(closure="quadrature", degree=9 if kind == "tied" else 5)
    if L == 2:
        rho = float(rng.choice([0.0, 0.3]))
        raw["model"]["C"] = [[1.0, rho], [rho, 1.0]]
    for k in range(1, K + 1):
        spec = {"kind": "gaussian"}
        if kind == "tied":
            spec["width_ratio"] = float(rng.choice([0.5, 1.0, 2.0]))
        if kind == "untied" and k == 1:
            spec["mean"] = float(rng.choice([0.0, 0.5]))
        if k > 1 and kind == "tied" and rng.random() < 0.3:
            spec = {"kind": "identity", "c": 1.0}
        raw["init"][str(k)] = spec
    if kind != "untied" and rng.random() < 0.4:  # a from-file teacher (its own finite-d draw at d = 100)
        k = K
        spec_raw = parse_config(raw)
        factor = initial_factors(spec_raw.model, spec_raw.inits(), 100, 1000 + index)[k - 1]
        path = pathlib.Path(folder) / f"campaign{index}_teacher.npz"
        np.savez(path, **({"W": factor} if kind == "tied" else {"S": factor}))
        raw["init"][str(k)] = {"kind": "from-file", "path": str(path)}
    return raw


def describe(raw):
    model, loss = raw["model"], raw["loss"]
    inits = ",".join(_describe_init(s) for s in raw["init"].values())
    name = loss.get("builtin", "expr") + (f"/{loss['activation']}" if "activation" in loss else "")
    C = "" if "C" not in model else f" C12={model['C'][0][1]:g}"
    closure = raw["truncation"]["closure"]
    return f"{model['kind']} L={model['L']} K={model['K']}{C} γ={model['gamma']:g} {name} [{inits}] {closure}"


def _describe_init(spec):
    ratio = f"r{spec['width_ratio']:g}" if "width_ratio" in spec else ""
    return spec["kind"][:4] + ratio + (f"m{spec['mean']:g}" if spec.get("mean") else "")


def run_one(raw, progress=False):
    config = parse_config(raw)
    start = time.perf_counter()
    result = verify(config, dims=(100, 200), seeds=tuple(range(6)), steps=1500, progress=progress)
    finite = result.checks.get("finite-d", {}).get("observables", {})
    worst = max(finite.items(), key=lambda item: item[1]["ratio"]) if finite else None
    return {
        "config": describe(raw),
        "verdict": result.verdict,
        "message": result.message,
        "checks": {name: check.get("passed") for name, check in result.checks.items()},
        "drift": result.checks["drift"]["message"],
        "finite_d": f"μ({worst[0]}): {worst[1]['ratio']:.2f}× tolerance" if worst else "—",
        "seconds": time.perf_counter() - start,
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="out/campaign")
    parser.add_argument("--count", type=int, default=COUNT)
    args = parser.parse_args()
    threadpool_limits(1)
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for index in range(args.count):
        raw = draw(index, out)
        row = {"index": index, **run_one(raw)}
        rows.append(row)
        print(
            f"{index:2d} {row['verdict']:9s} {row['seconds']:5.0f} s  {row['config']}  — {row['message']}", flush=True
        )
        (out / "campaign.json").write_text(
            json.dumps({"seed": SEED, "command": " ".join(sys.argv), "rows": rows}, indent=1)
        )
    lines = [
        "| # | configuration | verdict | drift (worst) | finite-d (worst) | message | s |",
        "|---|---|---|---|---|---|---|",
    ]
    columns = ("index", "config", "verdict", "drift", "finite_d", "message")
    lines += ["| " + " | ".join(str(r[c]) for c in columns) + f" | {r['seconds']:.0f} |" for r in rows]
    (out / "campaign.md").write_text("\n".join(lines) + "\n")
    print(f"wrote {out / 'campaign.json'} and campaign.md")


if __name__ == "__main__":
    main()
