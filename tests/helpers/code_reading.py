"""The project's Python as `ast` sees it, with names resolved across its modules (tests/helpers/docs_inventory.py).

Each module of portal_export/, tasks/ and ops/ parsed once, with what its names stand for: its
imports (also those inside functions), its functions and classes, its module-level constants; a
dotted name found back to its definition; the strings an expression can be.
"""

import ast
import functools
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from tests import ROOT  # noqa: E402

PACKAGES = ("portal_export", "tasks", "ops")
SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)


@dataclass
class Module:
    name: str
    tree: ast.Module
    imports: dict[str, str] = field(default_factory=dict)  # local name -> dotted target
    defs: dict[str, ast.AST] = field(default_factory=dict)  # functions and classes
    consts: dict[str, ast.expr] = field(default_factory=dict)  # module-level NAME = value


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _pairs(target: ast.expr, value: ast.expr) -> Iterator[tuple[str, ast.expr]]:
    """NAME = value, and A, B = 1, 2 element by element."""
    if isinstance(target, ast.Name):
        yield target.id, value
    elif isinstance(target, ast.Tuple) and isinstance(value, ast.Tuple) and len(target.elts) == len(value.elts):
        for t, v in zip(target.elts, value.elts, strict=True):
            yield from _pairs(t, v)


def _load(path: Path) -> Module:
    mod = Module(_module_name(path), ast.parse(path.read_text(), str(path)))
    package = mod.name if path.name == "__init__.py" else mod.name.rpartition(".")[0]
    for node in ast.walk(mod.tree):  # imports inside functions too (pandas only where needed)
        if isinstance(node, ast.Import):
            for a in node.names:
                mod.imports[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(
                    package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else [])
                )
            for a in node.names:
                mod.imports[a.asname or a.name] = f"{base}.{a.name}"
    for node in mod.tree.body:
        if isinstance(node, ast.FunctionDef | ast.ClassDef):
            mod.defs[node.name] = node
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                mod.consts.update(_pairs(target, node.value))
        elif isinstance(node, ast.AnnAssign) and node.value is not None and isinstance(node.target, ast.Name):
            mod.consts[node.target.id] = node.value
    return mod


@functools.cache
def modules() -> dict[str, Module]:
    found = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            mod = _load(path)
            found[mod.name] = mod
    return found


def walk_scope(node: ast.AST) -> Iterator[ast.AST]:
    """ast.walk of a function's own body: nested functions, lambdas and classes are theirs."""
    todo = list(ast.iter_child_nodes(node))
    while todo:
        child = todo.pop()
        yield child
        if not isinstance(child, SCOPES):
            todo.extend(ast.iter_child_nodes(child))


def dotted(mod: Module, node: ast.expr) -> str | None:
    """The full dotted name an expression names: `run_alert.alert_test` -> `ops.run_alert.alert_test`."""
    if isinstance(node, ast.Name):
        if node.id in mod.imports:
            return mod.imports[node.id]
        return f"{mod.name}.{node.id}" if node.id in mod.defs or node.id in mod.consts else None
    if isinstance(node, ast.Attribute):
        base = dotted(mod, node.value)
        return f"{base}.{node.attr}" if base else None
    return None


def lookup(name: str | None) -> tuple[Module, str | None] | None:
    """(module, its top-level name or None for the module itself) of a dotted name of the project."""
    if not name:
        return None
    mods = modules()
    if name in mods:
        return mods[name], None
    base, _, attr = name.rpartition(".")
    if base in mods:
        mod = mods[base]
        if attr in mod.defs or attr in mod.consts:
            return mod, attr
        return lookup(mod.imports.get(attr))  # re-exported
    return None


def definition(name: str | None) -> tuple[Module, ast.AST] | None:
    found = lookup(name)
    if found is None or found[1] is None or found[1] not in found[0].defs:
        return None
    return found[0], found[0].defs[found[1]]


def constant(name: str | None) -> tuple[Module, ast.expr] | None:
    found = lookup(name)
    if found is None or found[1] is None or found[1] not in found[0].consts:
        return None
    return found[0], found[0].consts[found[1]]


def local_values(scope: ast.AST, name: str) -> list[ast.expr]:
    """What a function assigns to a local name (plain, annotated, walrus, `with ... as`)."""
    found: list[ast.expr] = []
    for node in walk_scope(scope):
        if isinstance(node, ast.Assign):
            for target in node.targets:
                found += [v for n, v in _pairs(target, node.value) if n == name]
        elif isinstance(node, ast.AnnAssign | ast.NamedExpr) and isinstance(node.target, ast.Name):
            found += [node.value] if node.target.id == name and node.value is not None else []
        elif isinstance(node, ast.withitem) and isinstance(node.optional_vars, ast.Name):
            found += [node.context_expr] if node.optional_vars.id == name else []
    return found


def loop_sources(scope: ast.AST, name: str) -> list[ast.expr]:
    """What a loop or comprehension variable runs over."""
    return [
        node.iter
        for node in walk_scope(scope)
        if isinstance(node, ast.For | ast.comprehension)
        and isinstance(node.target, ast.Name)
        and node.target.id == name
    ]


@dataclass(frozen=True)
class Frame:
    mod: Module
    scope: ast.AST | None = None  # the function (or lambda) being read; None: module level
    cls: ast.ClassDef | None = None  # its class, for self.method()
    bound: tuple[tuple[str, frozenset[int]], ...] = ()  # parameters -> the codes the caller passed


def strings(frame: Frame, node: ast.expr) -> set[str]:
    """The strings an expression can be: literals, constants (also imported ones), tuples of them,
    loop variables over them; an f-string as a template with {} for each value."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return {node.value}
    if isinstance(node, ast.JoinedStr):
        return {"".join(v.value if isinstance(v, ast.Constant) else "{}" for v in node.values)}
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        return set().union(*(strings(frame, e) for e in node.elts))
    if isinstance(node, ast.IfExp):
        return strings(frame, node.body) | strings(frame, node.orelse)
    if isinstance(node, ast.BoolOp):
        return set().union(*(strings(frame, v) for v in node.values))
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("frozenset", "tuple", "set"):
        return set().union(*(strings(frame, a) for a in node.args))
    if isinstance(node, ast.Name) and frame.scope is not None:
        sources = loop_sources(frame.scope, node.id)
        if sources:
            return set().union(*(strings(frame, s) for s in sources))
    if isinstance(node, ast.Name | ast.Attribute):
        found = constant(dotted(frame.mod, node))
        if found is not None:
            return strings(Frame(found[0]), found[1])
    return set()


def class_consts(node: ast.ClassDef) -> Iterator[tuple[str, ast.expr]]:
    for stmt in node.body:
        if isinstance(stmt, ast.Assign):
            for target in stmt.targets:
                yield from _pairs(target, stmt.value)
