"""BFCL's function docs as trace tools: OpenAI function schemas in JSON Schema, with a read/write kind.

The schemas keep BFCL's names, descriptions, properties, required lists and defaults; only BFCL's type names
become JSON Schema's (``dict`` -> ``object``, ``float`` -> ``number``, ``tuple`` -> ``array``, ``any`` -> no
constraint), and the top level declares no other arguments. The schemas are what the agent is shown; calls
are checked against the methods' signatures, not the types (``world.py``, as BFCL runs them). The kind
is what trace's probes need (which tools change the state); it plays no part in BFCL's verdict.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from trace_gym.targets.bfcl.data import function_docs
from trace_gym.worlds.tools import State, Tool, ToolError, ToolKind

TYPES = {
    "dict": "object",
    "float": "number",
    "integer": "integer",
    "string": "string",
    "array": "array",
    "boolean": "boolean",
    "tuple": "array",
}
# Tools that only read (checked against the classes' code: none of them assigns to a public attribute).
READ_PREFIXES = ("get_", "list_", "search_", "view_", "display", "estimate_", "check_", "find_", "filter_")
READ_TOOLS = frozenset(
    {
        "cat", "diff", "du", "find", "grep", "ls", "pwd", "sort", "tail", "wc",
        "message_get_login_status", "posting_get_login_status", "ticket_get_login_status",
        "trading_get_login_status", "travel_get_login_status", "compute_exchange_rate", "retrieve_invoice",
        "verify_traveler_information", "notify_price_change", "gallon_to_liter", "liter_to_gallon",
    }
)  # fmt: skip
THINK_CLASSES = frozenset({"MathAPI"})  # stateless calculators


def json_schema(bfcl: dict[str, Any], top: bool = False) -> dict[str, Any]:
    """BFCL's parameter schema in JSON Schema (Draft 2020-12)."""
    schema: dict[str, Any] = {}
    kind = bfcl.get("type")
    if kind in TYPES:
        schema["type"] = TYPES[kind]
    for key in ("description", "enum", "default"):
        if key in bfcl:
            schema[key] = bfcl[key]
    if isinstance(bfcl.get("properties"), dict):
        schema["properties"] = {name: json_schema(sub) for name, sub in bfcl["properties"].items()}
    if isinstance(bfcl.get("items"), dict):
        schema["items"] = json_schema(bfcl["items"])
    if bfcl.get("required"):
        schema["required"] = list(bfcl["required"])
    if top:
        schema["type"] = "object"
        schema.setdefault("properties", {})
        schema["additionalProperties"] = False
    return schema


def tool_kind(cls: str, name: str) -> ToolKind:
    if cls in THINK_CLASSES:
        return "think"
    return "read" if name in READ_TOOLS or name.startswith(READ_PREFIXES) else "write"


def _not_here(state: State, arguments: dict[str, Any]) -> Any:
    # BFCL tools run on the API class instances of a BfclWorld, never through this handler.
    raise ToolError("this tool runs on BFCL's API classes")


def make_tools() -> dict[str, tuple[str, Tool]]:
    """Every function of the multi-turn classes: name -> (class, tool), in BFCL's doc order (a new dict of the
    same frozen tools each call)."""
    return dict(_all_tools())


@cache
def _all_tools() -> tuple[tuple[str, tuple[str, Tool]], ...]:
    # built once per process: checking the ~130 schemas took 0.155 s of every env's construction
    return tuple(
        (
            doc["name"],
            (
                cls,
                Tool(
                    name=doc["name"],
                    description=doc["description"],
                    parameters=json_schema(doc.get("parameters", {}), top=True),
                    handler=_not_here,
                    kind=tool_kind(cls, doc["name"]),
                ),
            ),
        )
        for cls, docs in function_docs().items()
        for doc in docs
    )
