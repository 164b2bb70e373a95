"""What the code offers an operator, read from the code itself (tests/repo/test_docs_complete.py).

Every name here comes out of the source by `ast` (the Makefile and luigi.cfg by their own syntax),
never from a list kept beside it: a command, exit code, environment variable, error code or config
key that someone adds later is found without editing this file.

Exit codes follow the value a command returns back through the functions it calls: literals,
module constants, `[retcode]` attributes, the arguments a callee returns, the methods of objects a
command makes. What cannot be followed (a callable passed in, a library's return) adds nothing.
"""

import ast
import configparser
import functools
import importlib
import re

from tests.helpers.code_reading import (
    ROOT,
    Frame,
    Module,
    class_consts,
    constant,
    definition,
    dotted,
    local_values,
    lookup,
    modules,
    strings,
    walk_scope,
)

CODE = re.compile(r"[A-Z][A-Z0-9_]{3,}")  # an error code: PLAN_BUSY, STORE_ERROR, PORTAL_HTTP_{}
TEMPLATE = re.compile(r"[A-Z][A-Z0-9_]*_\{\}")


# ---- exit codes -------------------------------------------------------------------------------


@functools.cache
def retcodes() -> dict[str, int]:
    """luigi.cfg's [retcode]: what `codes.task_failed` and friends are worth."""
    cfg = configparser.ConfigParser(interpolation=None)
    cfg.read(ROOT / "luigi.cfg")
    return {key: int(value) for key, value in cfg.items("retcode")}


def _callee(frame: Frame, call: ast.Call) -> tuple[Module, ast.AST, ast.ClassDef | None, bool] | None:
    """(module, function, its class, called on an instance) of a call the project defines."""
    func = call.func
    if isinstance(func, ast.Attribute):
        owner = _class_of(frame, func.value)
        if owner is not None:
            mod, cls = owner
            method = next((n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == func.attr), None)
            return (mod, method, cls, True) if method else None
    found = definition(dotted(frame.mod, func))
    if found is None or isinstance(found[1], ast.ClassDef):
        return None
    return found[0], found[1], None, False


def _class_of(frame: Frame, node: ast.expr) -> tuple[Module, ast.ClassDef] | None:
    """The project's class of an object: `self`, `Class(...)`, or a local made by `Class(...)`."""
    if isinstance(node, ast.Name) and node.id == "self" and frame.cls is not None:
        return frame.mod, frame.cls
    values = [node]
    if isinstance(node, ast.Name) and frame.scope is not None:
        values = local_values(frame.scope, node.id)
    for value in values:
        if isinstance(value, ast.Call):
            found = definition(dotted(frame.mod, value.func))
            if found is not None and isinstance(found[1], ast.ClassDef):
                return found[0], found[1]
    return None


def _bind(frame: Frame, call: ast.Call, func: ast.AST, method: bool, stack: tuple) -> dict[str, frozenset[int]]:
    params = [a.arg for a in func.args.posonlyargs + func.args.args]
    if method and params and params[0] in ("self", "cls"):
        params = params[1:]
    bound = {p: frozenset(exit_codes(frame, a, stack)) for p, a in zip(params, call.args, strict=False)}
    bound.update({k.arg: frozenset(exit_codes(frame, k.value, stack)) for k in call.keywords if k.arg})
    return bound


def exit_codes(frame: Frame, node: ast.expr | None, stack: tuple = ()) -> set[int]:
    """The integers `node` can evaluate to, as far as the code can be followed."""
    if node is None or len(stack) > 40:
        return set()
    if isinstance(node, ast.Constant):
        return {node.value} if type(node.value) is int else set()
    if isinstance(node, ast.Name):
        return _name_codes(frame, node, stack)
    if isinstance(node, ast.Attribute):
        if node.attr in retcodes():
            return {retcodes()[node.attr]}
        return exit_codes(frame, node.value, stack)  # facts.exit_code: whatever facts was made of
    if isinstance(node, ast.IfExp):
        return exit_codes(frame, node.body, stack) | exit_codes(frame, node.orelse, stack)
    if isinstance(node, ast.Subscript):
        return exit_codes(frame, node.value, stack)
    if isinstance(node, ast.Call):
        return _call_codes(frame, node, stack)
    parts = {
        ast.BoolOp: lambda n: n.values,
        ast.Tuple: lambda n: n.elts,
        ast.List: lambda n: n.elts,
        ast.Dict: lambda n: n.values,
    }
    for kind, children in parts.items():
        if isinstance(node, kind):
            return set().union(*(exit_codes(frame, c, stack) for c in children(node)))
    return set()


def _name_codes(frame: Frame, node: ast.Name, stack: tuple) -> set[int]:
    key = (id(frame.scope), node.id)
    if key in stack:
        return set()
    found = set().union(*(codes for name, codes in frame.bound if name == node.id))
    if frame.scope is not None:
        for value in local_values(frame.scope, node.id):
            found |= exit_codes(frame, value, (*stack, key))
    const = constant(dotted(frame.mod, node))
    if const is not None:
        found |= exit_codes(Frame(const[0]), const[1], (*stack, key))
    return found


def _call_codes(frame: Frame, node: ast.Call, stack: tuple) -> set[int]:
    callee = _callee(frame, node)
    if callee is None:  # int(x), max(...), a dataclass: what goes in may come out
        args = [*node.args, *(k.value for k in node.keywords)]
        return set().union(*(exit_codes(frame, a, stack) for a in args))
    mod, func, cls, method = callee
    if id(func) in stack:
        return set()
    inner = Frame(mod, func, cls, tuple(_bind(frame, node, func, method, stack).items()))
    return returns(inner, (*stack, id(func)))


def returns(frame: Frame, stack: tuple = ()) -> set[int]:
    scope = frame.scope
    if isinstance(scope, ast.Lambda):
        return exit_codes(frame, scope.body, stack)
    values = [n.value for n in walk_scope(scope) if isinstance(n, ast.Return)]
    return set().union(*(exit_codes(frame, v, stack) for v in values))


def commands() -> dict[str, tuple[Frame, ast.expr]]:
    """`python -m ops` subcommands: name -> (where its parser is made, its `func` default)."""
    found = {}
    for mod in modules().values():
        if not mod.name.startswith("ops."):
            continue
        for func in (d for d in mod.defs.values() if isinstance(d, ast.FunctionDef)):
            made, handlers = [], []
            for node in walk_scope(func):
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                    if node.func.attr == "add_parser" and node.args and isinstance(node.args[0], ast.Constant):
                        made.append((node.lineno, node.args[0].value))
                    for k in node.keywords if node.func.attr == "set_defaults" else ():
                        if k.arg == "func":
                            handlers.append((node.lineno, k.value))
            for line, handler in handlers:
                name = max((m for m in made if m[0] <= line), default=(0, None))[1]  # chained: one line
                found[name] = (Frame(mod, func), handler)
    return found


def command_exit_codes() -> dict[str, set[int]]:
    """Each subcommand's exit codes, its handler's return values followed through its calls."""
    found = {}
    for name, (frame, handler) in commands().items():
        if isinstance(handler, ast.Lambda):
            found[name] = returns(Frame(frame.mod, handler))
        else:
            target = definition(dotted(frame.mod, handler))
            assert target is not None, f"command {name}: cannot find its handler"
            found[name] = returns(Frame(target[0], target[1]))
    return found


def dispatcher_exit_codes() -> set[int]:
    """What the function that calls `args.func(args)` returns itself: every command's codes."""
    for mod in modules().values():
        for func in (d for d in mod.defs.values() if isinstance(d, ast.FunctionDef)):
            calls = [n for n in walk_scope(func) if isinstance(n, ast.Call)]
            if any(isinstance(c.func, ast.Attribute) and c.func.attr == "func" for c in calls):
                return returns(Frame(mod, func))
    raise AssertionError("no function calls args.func(args)")


# ---- environment variables --------------------------------------------------------------------


def _is_environ(frame: Frame, node: ast.expr) -> bool:
    return dotted(frame.mod, node) == "os.environ"


def environment_reads() -> dict[str, str]:
    """Every variable the code reads from the environment -> where (module)."""
    found: dict[str, str] = {}
    for mod in modules().values():
        scopes = [None, *(n for n in ast.walk(mod.tree) if isinstance(n, ast.FunctionDef | ast.Lambda))]
        for scope in scopes:
            frame = Frame(mod, scope)
            for node in walk_scope(scope) if scope is not None else walk_scope(mod.tree):
                for name in _environment_keys(frame, node):
                    found.setdefault(name, mod.name)
    return found


def _environment_keys(frame: Frame, node: ast.AST) -> set[str]:
    if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load) and _is_environ(frame, node.value):
        return strings(frame, node.slice)
    if isinstance(node, ast.Compare) and any(_is_environ(frame, c) for c in node.comparators):
        return strings(frame, node.left)
    if isinstance(node, ast.Call) and node.args and isinstance(node.func, ast.Attribute):
        getter = dotted(frame.mod, node.func) == "os.getenv"
        if getter or (node.func.attr == "get" and _is_environ(frame, node.func.value)):
            return strings(frame, node.args[0])
    return set()


MAKE_OWN = {"MAKE", "MAKEFILE_LIST", "MAKEFLAGS", "CURDIR", "SHELL"}


def make_variables() -> set[str]:
    """The Makefile's variables an operator may set: `X ?= ...`, `export X`, and every `$(X)` the
    Makefile uses without assigning it itself (DRY_RUN)."""
    text = "\n".join(line for line in (ROOT / "Makefile").read_text().splitlines() if not line.lstrip().startswith("#"))
    offered = set(re.findall(r"^([A-Z][A-Z0-9_]*)\s*\?=", text, re.M))
    for line in re.findall(r"^export\s+(.+)$", text, re.M):
        offered |= set(line.split())
    assigned = set(re.findall(r"^([A-Z][A-Z0-9_]*)\s*:?=", text, re.M))
    used = set(re.findall(r"\$\(([A-Z][A-Z0-9_]*)\)", text))
    return offered | (used - assigned - MAKE_OWN)


# ---- error codes ------------------------------------------------------------------------------


def error_classes() -> set[str]:
    """Dotted names of ExportError and every class of the project derived from it."""
    found = {"portal_export.errors.ExportError"}
    grew = True
    while grew:
        grew = False
        for mod in modules().values():
            for name, node in mod.defs.items():
                full = f"{mod.name}.{name}"
                bases = {_resolved(dotted(mod, b)) for b in getattr(node, "bases", ())}
                if isinstance(node, ast.ClassDef) and full not in found and bases & found:
                    found.add(full)
                    grew = True
    return found


def _resolved(name: str | None) -> str | None:
    """A re-exported name to where it is defined."""
    found = lookup(name)
    return f"{found[0].name}.{found[1]}" if found and found[1] else name


def _mentions_code(node: ast.expr) -> bool:
    if isinstance(node, ast.Name | ast.Attribute):
        return "code" in (node.id if isinstance(node, ast.Name) else node.attr)
    return _is_code_get(node)


def _is_code_get(node: ast.AST) -> bool:
    """`x.get("code")`, `x.get("code", default)`."""
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "get"
        and bool(node.args)
        and isinstance(node.args[0], ast.Constant)
        and node.args[0].value == "code"
    )


def _code_sources(frame: Frame, node: ast.AST, errors: set[str]) -> list[ast.expr]:
    """The expressions at `node` that are an error code."""
    if isinstance(node, ast.Call) and _resolved(dotted(frame.mod, node.func)) in errors:
        return node.args[:1] + [k.value for k in node.keywords if k.arg == "code"]
    if isinstance(node, ast.Call) and _is_code_get(node):
        return node.args[1:2]
    if (
        isinstance(node, ast.Call) and len(node.args) > 1
    ):  # Answer(False, "UNRECOGNIZED_ANSWER"): a failed answer's code
        first = node.args[0]
        return node.args[1:2] if isinstance(first, ast.Constant) and first.value is False else []
    if isinstance(node, ast.Dict):
        return [
            v for k, v in zip(node.keys, node.values, strict=True) if isinstance(k, ast.Constant) and k.value == "code"
        ]
    if isinstance(node, ast.BoolOp) and any(_mentions_code(v) for v in node.values):
        return [v for v in node.values if not _mentions_code(v)]
    if isinstance(node, ast.Return) and node.value is not None and "code" in getattr(frame.scope, "name", ""):
        return [node.value]
    return []


def error_codes() -> dict[str, str]:
    """Every error code the project raises, records or reports -> the module; `{}` for a value
    formatted in (PORTAL_HTTP_{})."""
    errors = error_classes()
    found: dict[str, str] = {}
    for mod in modules().values():
        sources: list[tuple[Frame, ast.expr]] = []
        for scope in [None, *(n for n in ast.walk(mod.tree) if isinstance(n, ast.FunctionDef | ast.Lambda))]:
            frame = Frame(mod, scope)
            for node in walk_scope(scope if scope is not None else mod.tree):
                sources += [(frame, s) for s in _code_sources(frame, node, errors)]
        for node in mod.defs.values():  # class attribute CODE = "..." of an error class
            if isinstance(node, ast.ClassDef) and f"{mod.name}.{node.name}" in errors:
                sources += [(Frame(mod), v) for n, v in class_consts(node) if n == "CODE"]
        if mod.name == "portal_export.errors":  # its constants are the service's codes it maps
            sources += [(Frame(mod), v) for v in mod.consts.values()]
        for frame, source in sources:
            for code in strings(frame, source):
                if CODE.fullmatch(code) or TEMPLATE.fullmatch(code):
                    found.setdefault(code, mod.name)
    return found


# ---- luigi.cfg keys ---------------------------------------------------------------------------


def _luigi_config_class(name: str | None) -> str | None:
    """The section of a Luigi config class named by a dotted name (luigi.interface.core -> core)."""
    if not name or not name.startswith("luigi."):
        return None
    module, _, attr = name.rpartition(".")
    try:
        obj = getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError):
        return None
    luigi = importlib.import_module("luigi")
    return obj.__name__ if isinstance(obj, type) and issubclass(obj, luigi.Config) else None


def _project_config_classes() -> dict[str, tuple[Module, ast.ClassDef]]:
    found = {}
    for mod in modules().values():
        for name, node in mod.defs.items():
            if isinstance(node, ast.ClassDef) and any(dotted(mod, b) == "luigi.Config" for b in node.bases):
                found[f"{mod.name}.{name}"] = (mod, node)
    return found


def _section_of(frame: Frame, node: ast.expr) -> str | None:
    """The section of a config object: `luigi.interface.core()`, a local or parameter made of one."""
    if isinstance(node, ast.Call):
        name = dotted(frame.mod, node.func)
        if name in _project_config_classes():
            return name.rpartition(".")[2]
        return _luigi_config_class(name)
    if isinstance(node, ast.Name) and isinstance(frame.scope, ast.FunctionDef):
        for value in local_values(frame.scope, node.id):
            section = _section_of(frame, value)
            if section:
                return section
        args = frame.scope.args
        for arg in args.posonlyargs + args.args + args.kwonlyargs:
            if arg.arg == node.id and arg.annotation is not None:
                return _luigi_config_class(dotted(frame.mod, arg.annotation))
    return None


def _is_parser(frame: Frame, node: ast.expr) -> bool:
    """`luigi.configuration.get_config()`, or a local holding it."""
    if isinstance(node, ast.Call):
        return (dotted(frame.mod, node.func) or "").endswith("configuration.get_config")
    if isinstance(node, ast.Name) and frame.scope is not None:
        return any(_is_parser(frame, v) for v in local_values(frame.scope, node.id))
    return False


GETTERS = {"get", "getint", "getfloat", "getboolean", "getintdict", "has_option"}


def _is_getter(frame: Frame, node: ast.AST) -> bool:
    """`get_config().getint(section, key, ...)` and the like."""
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and len(node.args) >= 2
        and node.func.attr in GETTERS
        and _is_parser(frame, node.func.value)
    )


def config_reads() -> set[tuple[str, str]]:
    """(section, key) the code reads: its luigi.Config classes' parameters, `get_config().get*()`
    calls, and attributes of Luigi's own config objects (`luigi.interface.core().workers`)."""
    found = set()
    for (mod, cls), name in ((v, k) for k, v in _project_config_classes().items()):
        for key, value in class_consts(cls):
            if isinstance(value, ast.Call) and (dotted(mod, value.func) or "").endswith("Parameter"):
                found.add((name.rpartition(".")[2], key))
    for mod in modules().values():
        for scope in [n for n in ast.walk(mod.tree) if isinstance(n, ast.FunctionDef)]:
            frame = Frame(mod, scope)
            for node in walk_scope(scope):
                if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load):
                    section = _section_of(frame, node.value)
                    if section:
                        found.add((section, node.attr))
                if _is_getter(frame, node):
                    for section in strings(frame, node.args[0]):
                        found |= {(section, key) for key in strings(frame, node.args[1])}
    return found


def luigi_cfg_keys() -> set[tuple[str, str]]:
    cfg = configparser.ConfigParser(interpolation=None)
    cfg.read(ROOT / "luigi.cfg")
    return {(section, key) for section in cfg.sections() for key in cfg[section]}
