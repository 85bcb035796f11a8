"""The layers, as an executable rule: a package imports only from the packages below it.

Bottom to top, the data flow of ``docs/architecture.md``::

    queues -> broker.protocol -> broker.core -> broker.store | broker.client
           -> broker.network -> broker.admin -> migrations -> broker.service -> broker.spark
           -> admin_api -> broker.bench -> broker.cli

Packages on one line of ``LAYERS`` are independent of each other. Every import counts,
also the ones made inside a function to keep the CLI fast. Beyond the layers: ``protocol``
and ``core`` use only the queue manager's pure value modules and load no I/O at run time, the
Spark job never imports the routing loop, nothing imports another package's private names, and
``migrations`` reads the tables of the packages below it (their ``schema`` modules) and nothing
else of them.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("queues", "broker", "admin_api", "migrations")

LAYERS: tuple[tuple[str, ...], ...] = (
    ("queues",),
    ("broker.protocol",),
    ("broker.core",),
    ("broker.store", "broker.client"),
    ("broker.network",),
    ("broker.admin",),
    ("migrations",),
    ("broker.service",),
    ("broker.spark",),
    ("admin_api",),
    ("broker.bench",),
    ("broker.cli",),
)
# The queue manager's modules that hold values and codecs and do no I/O: all the pure layers
# (protocol, core) may use of it.
PURE = ("broker.protocol", "broker.core")
PURE_QUEUES = frozenset(
    f"queues.{name}"
    for name in ("definition", "dlh", "errors", "formatting", "ids", "message", "names", "reasons", "xqh")
)
# What a shell must never import, whatever the layers allow.
FORBIDDEN = {
    "broker.spark": ("broker.service.router", "broker.service.router_pool"),
}


def _component(module: str) -> str:
    for layer in LAYERS:
        for component in layer:
            if module == component or module.startswith(component + "."):
                return component
    if module == "broker":
        return "broker"
    raise AssertionError(f"{module} belongs to no layer: add it to LAYERS")


def _level(component: str) -> int:
    return next(i for i, layer in enumerate(LAYERS) if component in layer)


def _modules() -> Iterator[tuple[str, Path]]:
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            yield ".".join(parts[:-1] if parts[-1] == "__init__" else parts), path


def _imports(module: str, path: Path) -> Iterator[tuple[str, str, int]]:
    """(imported module, imported name or '', line) for every import of the project's code."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, "", node.lineno
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                yield base, alias.name, node.lineno


def _project(module: str) -> bool:
    return module.split(".")[0] in PACKAGES


def _target(base: str, name: str) -> str:
    """``from broker.core import engine`` imports the module ``broker.core.engine``."""
    candidate = f"{base}.{name}" if name else base
    path = ROOT / Path(*candidate.split("."))
    return candidate if path.with_suffix(".py").is_file() or path.is_dir() else base


def violations(modules: Iterable[tuple[str, Path]] | None = None) -> list[str]:
    found = []
    for module, path in _modules() if modules is None else modules:
        if module == "broker":
            continue
        own = _component(module)
        for base, name, line in _imports(module, path):
            if not _project(base):
                continue
            target = _target(base, name)
            where = f"{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}:{line}"
            if name.startswith("_") and _component(target) != own:
                found.append(f"{where}: {module} imports the private name {name} of {target}")
            other = _component(target)
            if other == own:
                continue
            if own == "migrations" and not target.endswith(".schema"):
                found.append(f"{where}: migrations imports {target}, not a package's tables")
            if own in PURE and other == "queues" and target not in PURE_QUEUES:
                found.append(f"{where}: {module} ({own}, pure) imports {target}, which does I/O")
            if _level(other) >= _level(own):
                found.append(f"{where}: {module} ({own}) imports {target} ({other}), not a layer below")
            for banned in FORBIDDEN.get(own, ()):
                if target == banned or target.startswith(banned + "."):
                    found.append(f"{where}: {module} imports {target}, which {own} must never use")
    return found


def test_every_import_goes_down_the_layers() -> None:
    assert violations() == []


def cycles() -> list[list[str]]:
    """The project's modules that import each other, directly or round a circle (every import
    counts, those made inside a function or only for type checking too): each circle's members."""
    graph: dict[str, set[str]] = {}
    for module, path in _modules():
        graph[module] = {
            _target(base, name) for base, name, _ in _imports(module, path) if _project(base)
        } - {module}
    found: list[list[str]] = []
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []

    def visit(module: str) -> None:  # Tarjan's strongly connected components
        index[module] = low[module] = len(index)
        stack.append(module)
        for target in graph[module] & graph.keys():
            if target not in index:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in stack:
                low[module] = min(low[module], index[target])
        if low[module] == index[module]:
            members = stack[stack.index(module) :]
            del stack[stack.index(module) :]
            if len(members) > 1:
                found.append(sorted(members))

    for module in graph:
        if module not in index:
            visit(module)
    return found


def test_no_modules_import_each_other() -> None:
    """A circle makes its modules one unit that can be neither read nor tested alone: what two
    parts share goes below both (``service/mqtt/host.py``, ``streams.py``, ``bench/mqtt_runs.py``)."""
    assert cycles() == []


def test_schema_modules_hold_only_tables() -> None:
    """``migrations`` reads them without loading the rest of their package's code."""
    for module, path in _modules():
        if module.endswith(".schema"):
            imported = {_target(base, name) for base, name, _ in _imports(module, path) if _project(base)}
            assert imported <= {"queues.schema"}, (module, imported)


@pytest.mark.parametrize(
    ("module", "never"),
    [
        ("broker.spark.job", "broker.service.router"),
        ("broker.spark.task", "broker.service.router"),
        ("broker.core", "broker.store"),
        ("broker.protocol", "broker.core"),
        ("broker.client", "broker.store"),
        ("broker.cli", "sqlalchemy"),
    ],
)
def test_what_an_import_loads_at_run_time(module: str, never: str) -> None:
    """The rule holds for what is really loaded too (a package ``__init__`` runs on the way
    to any module in it); the CLI's parser loads no SQL at all, for a fast ``--help``."""
    code = f"import sys, {module}; print({never!r} in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_the_architecture_table_lists_the_layers_in_their_order() -> None:
    """``docs/architecture.md`` ("Where a change goes") is the map a reader goes by: one row per
    package of ``LAYERS``, bottom first."""
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    section = text.split("## Where a change goes", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    folders = [row.split("|")[1].strip().strip("`") for row in rows]
    listed = [folder.removesuffix("/").removesuffix(".py").replace("/", ".") for folder in folders]
    assert listed == [component for layer in LAYERS for component in layer]


@pytest.mark.parametrize("package", PURE)
def test_the_pure_layers_load_no_io_at_run_time(package: str) -> None:
    """Every module of ``protocol`` and ``core`` imported, through whatever ``__init__`` or lazy
    re-export they pass: no database driver, socket or event loop is loaded."""
    code = (
        "import importlib, pkgutil, sys\n"
        f"root = importlib.import_module({package!r})\n"
        "for info in pkgutil.walk_packages(root.__path__, root.__name__ + '.'):\n"
        "    importlib.import_module(info.name)\n"
        "io = ('sqlalchemy', 'psycopg', 'sqlite3', 'socket', 'asyncio', 'httpx', 'queues.sql',"
        " 'queues.manager', 'queues.database')\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in io or m in io))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_a_pure_layer_importing_the_queue_managers_io_is_reported(tmp_path: Path) -> None:
    source = tmp_path / "fake.py"
    source.write_text("from queues import sql\nfrom queues.errors import MQError\n", encoding="utf-8")
    (found,) = violations([("broker.core.fake", source)])
    assert "imports queues.sql, which does I/O" in found


def test_a_module_outside_every_layer_is_reported() -> None:
    with pytest.raises(AssertionError, match="belongs to no layer"):
        _component("broker.newthing")
