"""Draw the committed figures again from their numbers, with the current figure code.

Each figure in ``docs/figures`` has a JSON sidecar (`momentgen.core.figures.save`) holding its numbers, the
provenance of the run that measured them, and the function that draws it (``drawn_by``). This redraws every
PNG given (default: all of ``docs/figures``) from its JSON — no computation is repeated — and records in the
JSON the commit it was drawn at (``drawn_at``) and its layout checks. Copy a fresh example output into
``docs/figures`` first when the numbers themselves should change (``make examples``).
Run: ``python examples/redraw_figures.py [docs/figures/x.json …]``.
"""

import argparse
import json
import pathlib
import sys

from momentgen.core import figures
from momentgen.core.errors import MomentgenError
from momentgen.core.files import provenance, save_figure, write_json

ROOT = pathlib.Path(__file__).resolve().parents[1]


def redraw(path):
    """Draw ``path``'s figure again beside it; returns its layout problems."""
    data = json.loads(path.read_text())
    figure = figures.draw_again(data, ROOT)
    problems = figures.layout_problems(figure)
    save_figure(figure, path.with_suffix(".png"), dpi=120, bbox_inches="tight")
    drawn = provenance()
    write_json(path, {**data, "figure_checks": problems, "drawn_at": {k: drawn[k] for k in ("git_commit", "date")}})
    return problems


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("sidecars", nargs="*", type=pathlib.Path)
    args = parser.parse_args()
    paths = args.sidecars or sorted(p.with_suffix(".json") for p in (ROOT / "docs" / "figures").glob("*.png"))
    for path in paths:
        try:
            problems = redraw(path)
        except MomentgenError as error:
            sys.exit(f"{path}: {error}")
        print(f"{path.with_suffix('.png')}: {'; '.join(problems) or 'ok'}")


if __name__ == "__main__":
    main()
