"""The library's packages are layers that only point down, with no circle between them.

Every module under transformer_jax/ is read as source (its AST: nothing is imported, so a
lazy import hides nothing), and every import in it counts: at the top, inside functions and
under `if TYPE_CHECKING:`. A package may import only packages of a lower layer; a project
module is imported inside a function only where that guards a heavy optional library
(`FUNCTION_LEVEL_ALLOWED`, naming the library). WORKSPACE.md draws the same map.
"""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "transformer_jax"

# Bottom first. A package (or a module directly under transformer_jax/) imports only the
# packages of the layers below its own: never one of its own layer, never one above.
LAYERS: list[tuple[str, ...]] = [
    ("lazy",),  # the packages' re-exports, imported on first use
    ("ops", "runtime"),  # pure jnp functions; process tuning
    ("nn", "data"),  # Flax modules over ops; the input pipeline and text forms
    ("workdir", "decoding"),  # what a run leaves on disk; search over the decode cache
    ("training", "inference"),  # the train loop; the Translator
    ("evaluation", "export", "sweeps"),  # reports and evaluators; exports; sweep runner
    ("serving",),  # the HTTP server: a Translator or an export (engines), batcher, app
    (  # the parts of launch: --help, renamed flags, --config checks, logs, decoding flags, cache
        "launch_help",
        "launch_renamed_flags",
        "launch_config_args",
        "launch_logs",
        "launch_decoding_flags",
        "launch_cache",
    ),
    ("launch", "testing"),  # what launchers check; helpers for tests and benchmarks
]

# (importing module, imported module) -> the heavy optional library the lazy import guards.
FUNCTION_LEVEL_ALLOWED: dict[tuple[str, str], str] = {
    # The fra_eng TFDS builder registers itself when imported: the dataset-name check asks
    # for it without importing TFDS where the config is only validated.
    ("transformer_jax.data.catalogue", "transformer_jax.data.fra_eng"): "tensorflow_datasets",
    # translate draws a plot only when --attention_plot asks: matplotlib's ~0.3 s import
    # was a tenth of a one-line translate.
    ("transformer_jax.evaluation.translate_cli", "transformer_jax.evaluation.plots"): "matplotlib",
}


@dataclasses.dataclass(frozen=True)
class Import:
    module: str  # the importing module, e.g. transformer_jax.training.train
    path: str  # its file, relative to the repository
    line: int
    target: str  # the imported project module, e.g. transformer_jax.workdir.checkpoints
    in_function: bool

    def __str__(self) -> str:
        where = " (inside a function)" if self.in_function else ""
        return f"{self.path}:{self.line} imports {self.target}{where}"


def module_name(path: Path, root: Path) -> str:
    parts = [root.name, *path.relative_to(root).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def resolve(name: str, root: Path) -> str:
    """`name` if it is a module or package of the project under `root`, else its parent
    (`from pkg.mod import function` imports pkg.mod)."""
    relative = Path(*name.split(".")[1:]) if "." in name else Path()
    base = root / relative
    if base.with_suffix(".py").is_file() or (base / "__init__.py").is_file():
        return name
    return name.rsplit(".", 1)[0]


def project_imports(root: Path = ROOT) -> list[Import]:
    """Every import of a project module in every module under `root`."""
    found = []
    for path in sorted(root.rglob("*.py")):
        module = module_name(path, root)
        package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node, in_function in _walk(tree, in_function=False):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:  # relative: from the package, up level - 1 packages
                    parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join(parts + ([node.module] if node.module else []))
                else:
                    base = node.module or ""
                names = [f"{base}.{alias.name}" for alias in node.names]
            elif _is_lazy_exports(node):  # a package's re-exports, imported on first use
                names = []
                for key, value in zip(node.args[1].keys, node.args[1].values, strict=True):
                    if key.value == package:  # a module of the package, exported as itself
                        names.extend(f"{package}.{name.value}" for name in value.elts)
                    else:
                        names.append(key.value)
            else:
                continue
            for name in names:
                if name == root.name or name.startswith(root.name + "."):
                    found.append(
                        Import(
                            module,
                            str(path.relative_to(root.parent)),
                            node.lineno,
                            resolve(name, root),
                            in_function,
                        )
                    )
    return found


def _is_lazy_exports(node: ast.AST) -> bool:
    """`lazy.exports(__name__, {"module": ["name", ...], ...})` (transformer_jax/lazy.py)."""
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "exports"
        and isinstance(node.func.value, ast.Name)
        and node.func.value.id == "lazy"
        and len(node.args) == 2
        and isinstance(node.args[1], ast.Dict)
    )


def _walk(node: ast.AST, *, in_function: bool):
    for child in ast.iter_child_nodes(node):
        inside = in_function or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef)
        yield child, inside
        yield from _walk(child, in_function=inside)


def unit(module: str) -> str:
    """The layered unit of a module: its package under transformer_jax (or the top-level
    module itself, e.g. launch); "" for the root package."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def layer_of(name: str, layers: list[tuple[str, ...]]) -> int | None:
    return next((i for i, units in enumerate(layers) if name in units), None)


def order_violations(imports: list[Import], layers: list[tuple[str, ...]]) -> list[str]:
    """One line per import of a package that is not in a lower layer than the importer's."""
    problems = []
    for imp in imports:
        source, target = unit(imp.module), unit(imp.target)
        if source == target or target == "":  # within a package; the root imports nothing
            continue
        mine, theirs = layer_of(source, layers), layer_of(target, layers)
        if mine is None or theirs is None:
            continue  # reported by test_every_package_has_a_layer
        if theirs >= mine:
            below = [u for units in layers[:mine] for u in units]
            kind = "its own layer" if theirs == mine else f"layer {theirs}, above it"
            may = f"only {', '.join(below)}" if below else "no other package"
            problems.append(
                f"{imp}: {source} (layer {mine}) may import {may}; {target} is in {kind}"
            )
    return problems


def package_circles(imports: list[Import]) -> list[str]:
    """Every circle of imports between packages, each with one import per edge."""
    edges: dict[str, dict[str, Import]] = {}
    for imp in imports:
        source, target = unit(imp.module), unit(imp.target)
        if source != target and target:
            edges.setdefault(source, {}).setdefault(target, imp)
    circles, seen = [], set()

    def visit(node: str, path: list[str]) -> None:
        for nxt in sorted(edges.get(node, {})):
            if nxt in path:
                cycle = path[path.index(nxt) :] + [nxt]
                key = frozenset(cycle)
                if key not in seen:
                    seen.add(key)
                    steps = [str(edges[a][b]) for a, b in zip(cycle, cycle[1:], strict=False)]
                    circles.append(" -> ".join(cycle) + ": " + "; ".join(steps))
            else:
                visit(nxt, [*path, nxt])

    for start in sorted(edges):
        visit(start, [start])
    return circles


def lazy_imports(imports: list[Import], allowed: dict[tuple[str, str], str]) -> list[str]:
    return [
        f"{imp}: import it at the top of the module. A function-level import of a project "
        "module is kept only to guard a heavy optional library: then list it in "
        "FUNCTION_LEVEL_ALLOWED (tests/test_layering.py) with the library's name, and say "
        "which in a comment beside it"
        for imp in imports
        if imp.in_function and (imp.module, imp.target) not in allowed
    ]


# --- the library ---------------------------------------------------------------------------


def test_every_package_has_a_layer():
    units = {p.stem if p.is_file() else p.name for p in ROOT.iterdir()}
    units = {
        u
        for u in units
        if not u.startswith(("_", "."))
        and ((ROOT / u / "__init__.py").is_file() or (ROOT / f"{u}.py").is_file())
    }
    missing = sorted(u for u in units if layer_of(u, LAYERS) is None)
    assert not missing, (
        f"transformer_jax/{missing} is in no layer: add it to LAYERS in tests/test_layering.py "
        "(and to the map in WORKSPACE.md), above every package it imports."
    )


def test_the_root_package_imports_nothing_of_the_project():
    imports = [i for i in project_imports() if i.module == "transformer_jax"]
    assert not imports, [str(i) for i in imports]


def test_imports_point_down_the_layers():
    problems = order_violations(project_imports(), LAYERS)
    assert not problems, "imports against the layer order:\n" + "\n".join(problems)


def test_no_circle_between_packages():
    circles = package_circles(project_imports())
    assert not circles, "circles between packages:\n" + "\n".join(circles)


def test_project_modules_are_imported_at_the_top():
    problems = lazy_imports(project_imports(), FUNCTION_LEVEL_ALLOWED)
    assert not problems, "function-level imports:\n" + "\n".join(problems)


# --- the checks themselves, on a small tree with every fault ------------------------------


@pytest.fixture
def faulty(tmp_path) -> Path:
    root = tmp_path / "transformer_jax"
    files = {
        "__init__.py": "",
        "lazy.py": "",
        "ops/__init__.py": (  # re-exports read from lazy.exports: one up, one of its own
            "from transformer_jax import lazy\n"
            "__getattr__, __dir__, __all__ = lazy.exports(\n"
            '    __name__, {"transformer_jax.nn.layers": ["Dense"], "transformer_jax.ops": '
            '["masks"]}\n'
            ")\n"
        ),
        "ops/masks.py": "from transformer_jax.nn import layers\n",  # up: nn is above ops
        "nn/__init__.py": "",
        "nn/layers.py": "from ..ops import masks\n",  # relative, down: fine
        "training/__init__.py": "",
        "training/train.py": (
            "from transformer_jax.inference import translator\n"  # same layer
            "def f():\n    from transformer_jax.nn.layers import Dense\n"  # lazy, down
        ),
        "inference/__init__.py": "",
        "inference/translator.py": (
            "from typing import TYPE_CHECKING\n"
            "if TYPE_CHECKING:\n    from transformer_jax.training import train\n"
        ),
    }
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def test_the_checks_find_every_fault(faulty):
    imports = project_imports(faulty)
    assert {(i.module, i.target, i.in_function) for i in imports} == {
        ("transformer_jax.ops", "transformer_jax.lazy", False),
        ("transformer_jax.ops", "transformer_jax.nn.layers", False),
        ("transformer_jax.ops", "transformer_jax.ops.masks", False),
        ("transformer_jax.ops.masks", "transformer_jax.nn.layers", False),
        ("transformer_jax.nn.layers", "transformer_jax.ops.masks", False),
        ("transformer_jax.training.train", "transformer_jax.inference.translator", False),
        ("transformer_jax.training.train", "transformer_jax.nn.layers", True),
        ("transformer_jax.inference.translator", "transformer_jax.training.train", False),
    }
    order = order_violations(imports, LAYERS)
    assert len(order) == 4, order
    for where in ("ops/masks.py:1", "ops/__init__.py:2"):
        assert any(
            f"{where} imports transformer_jax.nn.layers: ops (layer 1) may import only lazy; "
            "nn is in layer 2, above it" in line
            for line in order
        ), order
    assert any("training" in line and "its own layer" in line for line in order), order
    circles = package_circles(imports)
    assert len(circles) == 2, circles  # ops <-> nn, training <-> inference
    assert any(c.startswith("inference -> training -> inference") for c in circles), circles
    lazy = lazy_imports(imports, {})
    assert len(lazy) == 1 and "training/train.py:3" in lazy[0], lazy
    allowed = {("transformer_jax.training.train", "transformer_jax.nn.layers"): "a library"}
    assert not lazy_imports(imports, allowed)
