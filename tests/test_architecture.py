"""The shape of the code base: no import circles, and no module reaching for another's private
names.

Every first-party module is read as text (nothing is imported), and every import counts: at the
top, under ``TYPE_CHECKING`` and deferred inside a function alike, since each is a dependency
a reader must follow.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = {
    "nrllm_core": ROOT / "nrllm_core",
    "nrllm_builtin": ROOT / "plugins" / "builtin" / "nrllm_builtin",
    "nrllm_repurpose": ROOT / "plugins" / "repurpose" / "nrllm_repurpose",
    "nrllm_mcp": ROOT / "plugins" / "mcp" / "nrllm_mcp",
    "nrllm_otel": ROOT / "plugins" / "otel" / "nrllm_otel",
    "nrllm_bedrock": ROOT / "plugins" / "bedrock" / "nrllm_bedrock",
}


@cache
def modules() -> dict[str, Path]:
    """Every first-party module by dotted name (Alembic's migration scripts are not modules
    anything imports)."""
    found = {}
    for package, folder in PACKAGES.items():
        for path in folder.rglob("*.py"):
            parts = [package, *path.relative_to(folder).with_suffix("").parts]
            if "migrations" in parts:
                continue
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def _imported(module: str, path: Path) -> Iterator[tuple[str, str | None]]:
    """(module imported, name taken from it or ``None``) for every import in ``path``."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, None
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parents = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parents, *([node.module] if node.module else [])])
            for alias in node.names:
                yield base, alias.name


def edges(module: str) -> set[str]:
    """The first-party modules ``module`` imports: ``from package import submodule`` is an
    import of the submodule, ``from module import name`` one of the module."""
    known = modules()
    found = set()
    for imported, name in _imported(module, known[module]):
        if name is not None and f"{imported}.{name}" in known:
            found.add(f"{imported}.{name}")
        elif imported in known:
            found.add(imported)
    found.discard(module)
    return found


def circles() -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan's algorithm)."""
    graph = {module: edges(module) for module in modules()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for successor in graph[node]:
            if successor not in index:
                visit(successor)
                low[node] = min(low[node], low[successor])
            elif successor in on_stack:
                low[node] = min(low[node], index[successor])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for node in graph:
        if node not in index:
            visit(node)
    return found


def test_no_module_imports_itself_in_a_circle() -> None:
    assert circles() == []


def test_the_walk_sees_a_circle_and_every_kind_of_import(tmp_path: Path) -> None:
    # The check itself: a deferred and a typed-only import close a circle it must report.
    modules.cache_clear()
    package = tmp_path / "nrllm_core"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("def f():\n    from nrllm_core import b\n")
    (package / "b.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from nrllm_core.a import f\n"
    )
    saved = dict(PACKAGES)
    PACKAGES.clear()
    PACKAGES["nrllm_core"] = package
    try:
        assert circles() == [["nrllm_core.a", "nrllm_core.b"]]
    finally:
        PACKAGES.clear()
        PACKAGES.update(saved)
        modules.cache_clear()


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def private_names_taken(module: str) -> Iterator[str]:
    """``from other import _name`` where ``_name`` is no module of its own, and any import by
    one distribution of another's private module."""
    known = modules()
    distribution = module.partition(".")[0]
    for imported, name in _imported(module, known[module]):
        top = imported.partition(".")[0]
        if top not in PACKAGES:
            continue
        if name is not None and _private(name) and f"{imported}.{name}" not in known:
            yield f"{module} takes {name} from {imported}"
        reached = imported if name is None else f"{imported}.{name}"
        if top != distribution and any(_private(part) for part in reached.split(".")):
            yield f"{module} imports {reached}, private to {top}"


def private_attributes_read(module: str) -> Iterator[str]:
    """``other._name`` on a module imported as ``from package import other``."""
    known = modules()
    tree = ast.parse(known[module].read_text(encoding="utf-8"))
    aliases = {
        alias.asname or alias.name: f"{node.module}.{alias.name}"
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
        if f"{node.module}.{alias.name}" in known
    }
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id in aliases
            and _private(node.attr)
        ):
            yield f"{module} reads {aliases[node.value.id]}.{node.attr}"


def test_no_module_reaches_for_another_modules_private_names() -> None:
    found = [
        finding
        for module in sorted(modules())
        for check in (private_names_taken, private_attributes_read)
        for finding in check(module)
    ]
    assert found == []


def _nrllm_types(hint: object, found: set[type]) -> None:
    import typing

    if isinstance(hint, type) and hint.__module__.startswith("nrllm_core"):
        found.add(hint)
    for argument in typing.get_args(hint):
        _nrllm_types(argument, found)


def test_every_type_a_public_signature_names_is_public() -> None:
    """What a host or a plugin meets in a public signature, it can import from nrllm_core."""
    import inspect
    import typing

    import anyio
    import click

    import nrllm_core
    import nrllm_core.store

    # What the signatures name: the public names, the store's, and two libraries' own types.
    public_names = {
        **{name: getattr(nrllm_core.store, name) for name in nrllm_core.store.__all__},
        **{name: getattr(nrllm_core, name) for name in nrllm_core.__all__},
        "click": click,
        "CapacityLimiter": anyio.CapacityLimiter,
    }
    found: set[type] = set()
    unresolved: list[str] = []
    for name in nrllm_core.__all__:
        public = getattr(nrllm_core, name)
        members = [public]
        if inspect.isclass(public):
            members += [
                m.fget if isinstance(m, property) else m
                for n, m in vars(public).items()
                if (not n.startswith("_") or n == "__init__")
                and (callable(m) or isinstance(m, property))
            ]
        for member in members:
            try:
                hints = typing.get_type_hints(member, localns=public_names)
            except TypeError:
                continue
            except NameError as exc:
                # A name its module imports for mypy alone, and nrllm_core does not export.
                unresolved.append(f"{name}: {exc.name}")
                continue
            for hint in hints.values():
                _nrllm_types(hint, found)
    missing = sorted(t.__name__ for t in found if t.__name__ not in public_names)
    assert (missing, unresolved) == ([], []), (missing, unresolved)
