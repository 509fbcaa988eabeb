"""The module layers (docs/design.md, "The layout"): a module imports only modules of
its own layer or lower, and no two modules import each other, directly or through others.
Imports are read with ``ast`` (inside functions too), so a lazy import cannot hide a circle."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "jaxrl_async"

# Bottom to top; a module belongs to the first entry that is its name or a package above it.
# The packages are the floors of docs/design.md's "The layout"; inside ``runners``, ``run`` and
# ``search`` the modules stand on floors of their own.
LAYERS = [
    ["jaxrl_async.version", "jaxrl_async.envs"],
    ["jaxrl_async.networks"],
    ["jaxrl_async.config"],
    ["jaxrl_async.algos"],
    # runners: the loops' parts, the two runners, then the host path a stage a floor
    ["jaxrl_async.runners.rollout", "jaxrl_async.runners.state", "jaxrl_async.runners.stopping",
     "jaxrl_async.runners.divergence"],
    ["jaxrl_async.runners.common", "jaxrl_async.runners.placement"],
    ["jaxrl_async.runners.programs", "jaxrl_async.runners.pipeline", "jaxrl_async.runners.sync"],
    ["jaxrl_async.runners.actor_learner", "jaxrl_async.runners.host_trajectory"],
    ["jaxrl_async.runners.host_batcher"],
    ["jaxrl_async.runners.host_streams"],
    ["jaxrl_async.runners.host_programs"],
    ["jaxrl_async.runners.host_actors"],
    ["jaxrl_async.runners"],
    # run: one training run and what it leaves behind
    ["jaxrl_async.run.distributed", "jaxrl_async.run.compile_cache",
     "jaxrl_async.run.checkpoint_checks", "jaxrl_async.run.evaluate_host",
     "jaxrl_async.run.sinks"],
    ["jaxrl_async.run.evaluate", "jaxrl_async.run.checkpoint", "jaxrl_async.run.config_files",
     "jaxrl_async.run.tracking"],
    ["jaxrl_async.run.train", "jaxrl_async.run"],
    # search: many runs
    ["jaxrl_async.search.sweep_result", "jaxrl_async.search.held_out",
     "jaxrl_async.search.points"],
    ["jaxrl_async.search.sweep_program", "jaxrl_async.search.sweep_chunks"],
    ["jaxrl_async.search.sweep"],
    ["jaxrl_async.search.population", "jaxrl_async.search.exploit",
     "jaxrl_async.search.population_result"],
    ["jaxrl_async.search.population_checkpoint"],
    ["jaxrl_async.search.pbt", "jaxrl_async.search.optuna_study",
     "jaxrl_async.search.optuna_search", "jaxrl_async.search"],
    # the command, above the public face (``jaxrl_async``) it may import
    ["jaxrl_async.cli"],
]

# Which package may import which: each imports only those below it (and itself).
PACKAGES = ["envs", "networks", "config", "algos", "runners", "run", "search", "cli"]


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def imports(name: str, path: Path, known: set[str]) -> set[str]:
    """The package modules ``name`` imports (``from a import b``: ``a.b`` where that is a
    module, else ``a``)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{parent}.{base}" if base else parent
            for alias in node.names:
                found.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base)
    return {m for m in found if m in known and m != name}


def layer(name: str) -> int:
    for index, names in enumerate(LAYERS):
        if any(name == n or name.startswith(n + ".") for n in names):
            return index
    raise AssertionError(f"{name} is in no layer: add it to LAYERS (and to docs/design.md)")


def test_every_module_imports_only_its_layer_or_lower():
    found = modules()
    wrong = []
    for name, path in found.items():
        if name == "jaxrl_async":  # the package's public face re-exports every layer
            continue
        for other in imports(name, path, set(found)):
            if other != "jaxrl_async" and layer(other) > layer(name):
                wrong.append(f"{name} (layer {layer(name)}) imports {other} "
                             f"(layer {layer(other)})")
    assert not wrong, "\n".join(wrong)


def test_no_import_circles():
    found = modules()
    graph = {name: imports(name, path, set(found)) - {"jaxrl_async"}
             for name, path in found.items()}
    circles = []
    for start in graph:
        stack, seen = [(start, (start,))], set()
        while stack:
            node, trail = stack.pop()
            for nxt in graph[node]:
                if nxt == start:
                    circles.append(" -> ".join((*trail, start)))
                elif nxt not in seen:
                    seen.add(nxt)
                    stack.append((nxt, (*trail, nxt)))
    # A package's __init__ importing its own submodules is not a circle unless one of them
    # imports the package back.
    assert not circles, "\n".join(sorted(set(circles)))


def test_no_module_is_loaded_by_a_string():
    offenders = [name for name, path in modules().items()
                 if "import_module(" in path.read_text() and name != "jaxrl_async.envs.host"]
    assert not offenders, f"importlib.import_module where an import would do: {offenders}"


def package_of(name: str) -> str:
    return name.split(".")[1] if name.count(".") else ""


def test_packages_import_only_packages_below_them():
    found = modules()
    wrong = []
    for name, path in found.items():
        mine = package_of(name)
        if mine not in PACKAGES:  # the public face and version.py
            continue
        for other in imports(name, path, set(found)):
            theirs = package_of(other)
            if theirs in PACKAGES and PACKAGES.index(theirs) > PACKAGES.index(mine):
                wrong.append(f"{name} ({mine}) imports {other} ({theirs})")
            if other == "jaxrl_async" and mine != "cli":
                wrong.append(f"{name} imports the public face jaxrl_async")
    assert not wrong, "\n".join(wrong)


def test_no_module_sits_loose_beside_the_packages():
    loose = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert loose == ["__init__.py", "version.py"], loose
