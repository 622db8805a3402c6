"""How many equations does a truncation need? Demand-driven closure vs all words.

For the tied (K = 2: student S1 trainable, teacher S2 fixed) and untied (K = 2) models,
derives the degree-M truncation needed for the weak-recovery observables and the one
with every canonical word, and plots state size and nnz against M.

Writes ``OUT/hierarchy_sizes.png`` and ``OUT/hierarchy_sizes.json``.
Run: ``python examples/hierarchy_sizes.py --out out/examples``.
"""

import argparse
import json
import pathlib
import time

from matplotlib.figure import Figure

from momentgen.compiler.hierarchy import Model, build
from momentgen.core.files import PAPER_FORMATS, save_figure

CASES = {
    "tied": (Model("tied", 2, [1]), ["S1 S2"], range(2, 17)),
    "untied": (Model("untied", 2, [1]), ["M1 M2^T", "M1 M2"], range(2, 7)),
}


def measure():
    rows = []
    for name, (model, observables, degrees) in CASES.items():
        for degree in degrees:
            for closure, obs in (("demand-driven", observables), ("all words", "all")):
                start = time.perf_counter()
                program = build(model, degree, obs)
                rows.append(
                    {
                        "model": name,
                        "closure": closure,
                        "degree": degree,
                        "words": len(program.words),
                        "nnz": program.nnz,
                        "dropped_words": len(program.dropped_words),
                        "seconds": round(time.perf_counter() - start, 4),
                    }
                )
                print(f"{name:7s} M={degree:2d} {closure:14s} words={len(program.words):7d} nnz={program.nnz:8d}")
    return rows


def plot(rows, path):
    fig = Figure(figsize=(10, 4))
    axes = fig.subplots(1, 2)
    for ax, name in zip(axes, CASES):
        for closure, style in (("demand-driven", "o-"), ("all words", "s--")):
            sel = [r for r in rows if r["model"] == name and r["closure"] == closure]
            ax.semilogy([r["degree"] for r in sel], [r["words"] for r in sel], style, label=f"{closure}: words")
            ax.semilogy([r["degree"] for r in sel], [r["nnz"] for r in sel], style, alpha=0.5, label=f"{closure}: nnz")
        ax.set(title=f"{name}, K = 2, observables {CASES[name][1][0]!r}…", xlabel="truncation degree M", ylabel="count")
        ax.legend(fontsize=8)
    fig.tight_layout()
    save_figure(fig, path, formats=PAPER_FORMATS, dpi=120)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="out/examples", help="output directory")
    out = pathlib.Path(parser.parse_args().out)
    out.mkdir(parents=True, exist_ok=True)
    rows = measure()
    (out / "hierarchy_sizes.json").write_text(json.dumps(rows, indent=1))
    plot(rows, out / "hierarchy_sizes.png")
    print(f"wrote {out / 'hierarchy_sizes.png'} and {out / 'hierarchy_sizes.json'}")


if __name__ == "__main__":
    main()
