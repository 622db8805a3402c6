"""The house's layout: the packages import one way, every module is in docs/ARCHITECTURE.md's table, the 0.2 module
paths still import, and the import of the package stays light."""

import ast
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "momentgen"

#: The floors, from the ground up: a package may import its own modules and those of the floors below it. The
#: reference is beside the theory (compiler, dynamics), never above it: it imports neither.
FLOORS = ("core", "laws", "models", "setting", ("compiler", "reference"), "dynamics", "evidence", "interface")
BELOW = {}
for _level, _floor in enumerate(FLOORS):
    for _package in (_floor,) if isinstance(_floor, str) else _floor:
        BELOW[_package] = {p for f in FLOORS[:_level] for p in ((f,) if isinstance(f, str) else f)} | {_package}
BELOW["dynamics"] -= {"reference"}  # the theory's dynamics does not read the reference either


def _imports():
    """{module: set of the momentgen modules it imports, at any place in the file}, from the source text; ``from
    package import name`` counts the module ``package.name`` where there is one, else the package."""
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(ROOT).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        found[name] = []
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                base = package.split(".")[: len(package.split(".")) - node.level + 1] if node.level else []
                module = ".".join([*base, node.module] if node.module else base)
                found[name] += [(module, a.name) for a in node.names]
            elif isinstance(node, ast.Import):
                found[name] += [(a.name, None) for a in node.names]

    def resolve(module, item):
        return f"{module}.{item}" if f"{module}.{item}" in found else module

    return {m: {resolve(*i) for i in items if i[0].startswith("momentgen")} for m, items in found.items()}


def test_every_package_imports_only_its_own_floor_and_those_below():
    """Issue 42: data flows one way. Each subpackage of momentgen imports only itself and the floors below it
    (`FLOORS`), lazy imports inside functions included; the reference imports no theory."""
    wrong = []
    for module, targets in _imports().items():
        here = module.split(".")[1] if module.count(".") else None
        if here is None:
            continue  # the package's face: its lazy table reaches every floor on purpose
        for target in targets:
            there = target.split(".")[1]
            if there in BELOW and there not in BELOW[here]:
                wrong.append(f"{module} → {target}")
    assert not wrong, wrong


def test_no_module_imports_itself_through_a_circle():
    """No two modules import each other, directly or through others (a circle through lazy imports counts)."""
    graph = _imports()

    edges = {m: targets & set(graph) - {m} for m, targets in graph.items()}
    state = {}

    def visit(m, path):
        state[m] = "open"
        for t in edges[m]:
            if state.get(t) == "open":
                raise AssertionError(" → ".join([*path[path.index(t) :], t]))
            if t not in state:
                visit(t, [*path, t])
        state[m] = "done"

    for m in sorted(edges):
        if m not in state and m != "momentgen":
            visit(m, [m])


#: Old paths of 0.2 and where they live now: a package, a subpackage's module, a renamed module, the public examples.
MOVED = {"closures": "dynamics.closures", "config.checks": "setting.config.checks", "emit": "compiler.emit",
         "_kernel": "compiler.kernel", "potential.quadrature": "compiler.potential.quadrature",
         "examples": "interface.examples", "words": "models.words", "reference": "reference"}  # fmt: skip


def test_the_flat_paths_of_0_2_import_the_same_module():
    """`import momentgen.<old path>` gives the module object at its new path (old notebooks, the figures'
    ``drawn_by`` names and generated modules keep working), in a fresh process."""
    code = "; ".join(
        [
            "import importlib",
            f"pairs = {MOVED!r}",
            "same = [importlib.import_module('momentgen.' + old) is importlib.import_module('momentgen.' + new) "
            "for old, new in pairs.items()]",
            "print(all(same), importlib.import_module('momentgen.closures').__name__)",
        ]
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["True", "momentgen.dynamics.closures"]


def test_import_does_not_load_sympy_numba_or_matplotlib():
    code = "import momentgen, sys; print(sorted(m for m in ('sympy', 'numba', 'matplotlib') if m in sys.modules))"
    assert (
        subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip() == "[]"
    )


def test_every_module_is_in_the_architecture_layer_table():
    """docs/ARCHITECTURE.md's layer table names every module of the package (issue 40: eight were missing), each
    once; a module added without a place in the layers fails here."""
    import re

    table = [line for line in (ROOT / "docs" / "ARCHITECTURE.md").read_text().splitlines() if line.startswith("| ")]
    named = re.findall(r"`([A-Za-z_]+)/?`", " ".join(table))
    modules = [p for p in PACKAGE.rglob("*.py") if p.stem != "__init__"]
    missing = sorted(str(p.relative_to(ROOT)) for p in modules if p.stem not in named)
    assert not missing, f"not in docs/ARCHITECTURE.md's layer table: {missing}"
    packages = {p.parent.name for p in modules if p.parent.name != "momentgen"}
    assert packages <= set(named), packages - set(named)
