"""The static half of "trust nothing": an AST check of a generated env module before anything runs it.

Rejected, each with the line and the reason: imports outside :data:`ALLOWED_IMPORTS` (no ``os``, ``socket``,
``subprocess``, ``pathlib``, ``importlib``...), relative and star imports, the builtins that run code or reach
the outside (``eval``, ``exec``, ``compile``, ``__import__``, ``open``, ``input``, ``globals``...),
``getattr``/``setattr``/``delattr`` with a computed or dunder name, dunder attributes and names (the classic
sandbox escapes through ``__class__``, ``__subclasses__``, ``__globals__``, ``__builtins__``), and file I/O
methods of allowed libraries (``numpy.save``, ``ndarray.tofile``...). It is a filter, not a proof: the
runtime guard of :mod:`trace_gym.synthesis.sandbox` backs it up.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

ALLOWED_IMPORTS = (
    "__future__",
    "abc",
    "collections",
    "copy",
    "dataclasses",
    "enum",
    "functools",
    "itertools",
    "json",
    "math",
    "re",
    "string",
    "typing",
    "numpy",
    "gymnasium",
    "jsonschema",
    "trace_gym.core",
    "trace_gym.derived",
    "trace_gym.worlds",
    "trace_gym.targets.retail.data",
    "trace_gym.targets.retail.policy",
    "trace_gym.targets.retail.tools",
)
FORBIDDEN_CALLS = frozenset(
    {"eval", "exec", "compile", "__import__", "open", "input", "breakpoint", "globals", "locals", "vars",
     "memoryview", "help", "exit", "quit"}
)  # fmt: skip
NAME_CALLS = frozenset({"getattr", "setattr", "delattr", "hasattr"})
IO_ATTRIBUTES = frozenset(
    {"save", "savez", "savez_compressed", "savetxt", "load", "loadtxt", "genfromtxt", "fromfile", "tofile",
     "memmap", "fromregex", "DataSource", "system", "popen", "remove", "unlink", "rmdir", "rename"}
)  # fmt: skip
ALLOWED_DUNDERS = frozenset({"__init__", "__name__", "__doc__", "__all__", "__post_init__", "__future__"})
MAX_SOURCE_CHARS = 100_000


@dataclass(frozen=True)
class Problem:
    line: int
    message: str

    def __str__(self) -> str:
        return f"line {self.line}: {self.message}"


def allowed_import(name: str) -> bool:
    return any(name == allowed or name.startswith(allowed + ".") for allowed in ALLOWED_IMPORTS)


def _dunder(name: str) -> bool:
    return name.startswith("__") and name.endswith("__") and name not in ALLOWED_DUNDERS


def static_check(source: str) -> list[Problem]:
    """Every problem found in ``source`` (empty: the module may go on to the sandbox)."""
    if len(source) > MAX_SOURCE_CHARS:
        return [Problem(0, f"the module has {len(source)} characters; at most {MAX_SOURCE_CHARS}")]
    try:
        tree = ast.parse(source)
    except SyntaxError as err:
        return [Problem(err.lineno or 0, f"syntax error: {err.msg}")]
    problems: list[Problem] = []

    def add(node: ast.AST, message: str) -> None:
        problems.append(Problem(getattr(node, "lineno", 0), message))

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if not allowed_import(alias.name):
                    add(
                        node,
                        f"import of {alias.name!r} is not allowed (allowed: {', '.join(ALLOWED_IMPORTS)})",
                    )
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                add(node, "relative imports are not allowed")
            elif not allowed_import(node.module or ""):
                add(
                    node,
                    f"import from {node.module!r} is not allowed (allowed: {', '.join(ALLOWED_IMPORTS)})",
                )
            if any(alias.name == "*" for alias in node.names):
                add(node, "star imports are not allowed")
            for alias in node.names:
                if alias.name in FORBIDDEN_CALLS or _dunder(alias.name) or alias.name in IO_ATTRIBUTES:
                    add(node, f"importing {alias.name!r} is not allowed")
        elif isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Name) and func.id in NAME_CALLS:
                name = node.args[1] if len(node.args) > 1 else None
                if not (isinstance(name, ast.Constant) and isinstance(name.value, str)):
                    add(node, f"{func.id}() with a computed attribute name is not allowed")
                elif name.value.startswith("__"):
                    add(node, f"{func.id}() of the dunder attribute {name.value!r} is not allowed")
        elif isinstance(node, ast.Name):
            if node.id in FORBIDDEN_CALLS:
                add(node, f"{node.id!r} is not allowed (no code execution, file or console access)")
            elif _dunder(node.id):
                add(node, f"the name {node.id!r} is not allowed")
        elif isinstance(node, ast.Attribute):
            if _dunder(node.attr):
                add(node, f"the dunder attribute {node.attr!r} is not allowed")
            elif node.attr in IO_ATTRIBUTES:
                add(node, f"the attribute {node.attr!r} (file or process access) is not allowed")
            elif node.attr in FORBIDDEN_CALLS:
                add(node, f"the attribute {node.attr!r} is not allowed")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and "__" in node.value:
            stripped = node.value.strip()
            if stripped.startswith("__") and stripped.endswith("__") and stripped not in ALLOWED_DUNDERS:
                add(node, f"the string {stripped!r} names a dunder; not allowed")
    return sorted(problems, key=lambda p: p.line)
