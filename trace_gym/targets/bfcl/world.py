"""The state of one BFCL episode: BFCL's own API class instances, and calls executed on them as BFCL does.

An instance per involved class is built and loaded exactly as ``execute_multi_turn_func_call`` does (a fresh
object, then ``_load_scenario(deepcopy(config), long_context=...)`` unless the class is stateless), each method
name maps to the last involved class that has it, and a call's answer is BFCL's text of its result: a string
as is, a dict as ``json.dumps`` (``str`` if that fails), anything else ``str``, and an exception as
``"Error during execution: <message>"``. BFCL evaluates a call's text with ``eval``; trace calls the bound
method with the parsed arguments, which is the same call for every JSON value (the parity test checks it).

Before a call runs, trace checks what would make Python refuse it before the method runs: the tool must be
a function of the task's classes (``unknown_tool``), and the arguments must bind to the method's signature,
nothing missing and nothing unexpected (``schema``); a rejected call runs nothing (BFCL would answer it with a
TypeError and change nothing either). Argument types are not enforced, as in BFCL: the API classes answer a
wrong type themselves (BFCL's ground truth passes ``ticket_id='ticket_001'`` where the doc says integer).
"""

from __future__ import annotations

import ast
import copy
import decimal
import hashlib
import importlib
import inspect
import json
import sys
from collections.abc import Callable, Iterable
from typing import Any

from trace_gym.targets.bfcl.data import BfclTask
from trace_gym.worlds.tools import Tool
from trace_gym.worlds.world import InvalidKind, ToolResult, canonical_json

BACKEND = "bfcl_eval.eval_checker.multi_turn_eval.func_source_code"
MODULES = {
    "GorillaFileSystem": "gorilla_file_system",
    "MathAPI": "math_api",
    "MessageAPI": "message_api",
    "TwitterAPI": "posting_api",
    "TicketAPI": "ticket_api",
    "TradingBot": "trading_bot",
    "TravelAPI": "travel_booking",
    "VehicleControlAPI": "vehicle_control",
}
STATELESS = frozenset({"MathAPI"})  # bfcl_eval.constants.executable_backend_config.STATELESS_CLASSES
# MathAPI computes what it is asked to: a precision of 10**9 digits or 2 ** (2 ** 200) would not finish (nor
# would it in BFCL), so step() refuses such calls up front; BFCL's tasks stay far below both limits.
MAX_PRECISION = 1000  # ``precision`` (logarithm, square_root) and ``decimal_places`` (round_number)
MAX_POWER_BITS = 100_000  # an integer power's result


def api_class(name: str) -> type:
    return getattr(importlib.import_module(f"{BACKEND}.{MODULES[name]}"), name)


def bfcl_text(result: Any) -> str:
    """BFCL's text of a call's result (``execute_multi_turn_func_call``)."""
    if type(result) is str:
        return result
    if type(result) is dict:
        try:
            return json.dumps(result)
        except Exception:  # noqa: BLE001 - BFCL falls back to str() for values json cannot encode
            return str(result)
    return str(result)


def parse_call(
    text: str, signatures: Callable[[str], inspect.Signature | None]
) -> tuple[str, dict[str, Any]]:
    """A ground-truth call's text (``"sort('a.txt')"``, ``"cd(folder='x')"``) as a name and named arguments;
    positional arguments are named from the method's signature."""
    node = ast.parse(text.strip(), mode="eval").body
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name):
        raise ValueError(f"not a plain function call: {text!r}")
    name = node.func.id
    arguments = {kw.arg: ast.literal_eval(kw.value) for kw in node.keywords if kw.arg is not None}
    if node.args:
        signature = signatures(name)
        if signature is None:
            raise ValueError(f"no signature to name the positional arguments of {text!r}")
        params = [p for p in signature.parameters.values() if p.name != "self"]
        for param, value in zip(params, node.args, strict=False):
            arguments[param.name] = ast.literal_eval(value)
    return name, arguments


def format_call(name: str, arguments: dict[str, Any]) -> str:
    """A call as BFCL's decoders write it (``bfcl_eval.model_handler.utils.convert_to_function_call``)."""
    return f"{name}({','.join(f'{k}={v!r}' for k, v in arguments.items())})"


def public_state(value: Any) -> Any:
    """Plain data of an instance's public attributes (what BFCL's state checker compares), cycle-safe."""
    seen: set[int] = set()

    def walk(item: Any) -> Any:
        if item is None or isinstance(item, bool | int | float | str):
            return item
        if id(item) in seen:
            return "<seen>"
        seen.add(id(item))
        try:
            if isinstance(item, dict):
                return [[walk(k), walk(v)] for k, v in item.items()]
            if isinstance(item, list | tuple):
                return [walk(v) for v in item]
            if isinstance(item, set | frozenset):
                return sorted((walk(v) for v in item), key=repr)
            if hasattr(item, "__dict__"):
                public = {k: v for k, v in vars(item).items() if not k.startswith("_")}
                return {"__class__": type(item).__name__, **{k: walk(v) for k, v in public.items()}}
            return repr(item)
        finally:
            seen.discard(id(item))

    return walk(value)


class BfclWorld:
    """The API class instances of one task; ``tools`` are the functions of its classes the agent may call."""

    def __init__(self, task: BfclTask, tools: dict[str, tuple[str, Tool]]):
        self.task = task
        self.instances: dict[str, Any] = {}
        self.methods: dict[str, Any] = {}
        for cls in task.involved_classes:
            instance = api_class(cls)()
            if cls not in STATELESS:
                instance._load_scenario(
                    copy.deepcopy(task.initial_config.get(cls, {})), long_context=task.long_context
                )
            self.instances[cls] = instance
            for name, method in inspect.getmembers(instance, predicate=inspect.ismethod):
                if not name.startswith("_"):
                    self.methods[name] = method  # a later class wins, as in BFCL's name mapping
        # Held-out functions are callable too: BFCL runs any method of the task's classes by name (and its
        # ground truth of multi_turn_miss_func_49 calls one before the turn that offers it).
        self.tools: dict[str, Tool] = {
            name: tool
            for name, (cls, tool) in tools.items()
            if cls in self.instances and name in self.methods
        }
        self.offered: list[str] = list(self.tools)  # what an error may list (the env hides held-out ones)

    def signature(self, name: str) -> inspect.Signature | None:
        method = self.methods.get(name)
        return inspect.signature(method) if method is not None else None

    def call(self, name: str, arguments: dict[str, Any]) -> ToolResult:
        """One agent call: trace's checks, then BFCL's execution. An error answer of the API (a dict with an
        ``error`` key, or an exception) that left the state unchanged is flagged ``precondition``."""
        tool = self.tools.get(name)
        if tool is None:
            known = ", ".join(sorted(self.offered))
            return ToolResult(
                name, f"Error: unknown tool {name!r}. Available tools: {known}.", "unknown_tool"
            )
        problem = argument_problem(self.methods[name], arguments)
        if problem:
            return ToolResult(name, f"Error: invalid arguments for {name}: {problem}", "schema")
        too_much = runaway(name, arguments)
        if too_much:
            return ToolResult(name, f"Error during execution: {too_much}", "precondition")
        before = self.state_hash()
        output, failed = self.execute(name, arguments)
        error: InvalidKind | None = None
        if failed and self.state_hash() == before:
            error = "precondition"
        return ToolResult(name, output, error)

    def execute(self, name: str, arguments: dict[str, Any]) -> tuple[str, bool]:
        """Run a method as BFCL does; returns BFCL's text of the result and whether it is an error.

        MathAPI sets the process-wide decimal and mpmath precisions before it computes; here they are put back
        after each call, so that no other code in the process (sympy under torch, another env) sees them."""
        mpmath = sys.modules.get("mpmath")
        dps = mpmath.mp.dps if mpmath is not None else None
        try:
            with decimal.localcontext():
                result = self.methods[name](**arguments)
        except Exception as err:  # noqa: BLE001 - BFCL turns any exception into an answer
            return f"Error during execution: {err}", True
        finally:
            if mpmath is not None:
                mpmath.mp.dps = dps
        failed = isinstance(result, dict) and "error" in result
        return bfcl_text(result), failed

    def run_ground_truth(self, calls: Iterable[str]) -> list[str]:
        """Execute ground-truth call texts (as BFCL executes them: no schema check, errors as answers)."""
        results = []
        for text in calls:
            try:
                name, arguments = parse_call(text, self.signature)
            except (ValueError, SyntaxError) as err:
                results.append(f"Error during execution: {err}")
                continue
            if name not in self.methods:
                results.append(f"Error during execution: name {name!r} is not defined")
                continue
            results.append(self.execute(name, arguments)[0])
        return results

    def snapshot(self) -> dict[str, Any]:
        return {cls: public_state(instance) for cls, instance in self.instances.items()}

    def state_hash(self) -> str:
        # surrogatepass: an agent may have stored any string, lone surrogates included
        text = canonical_json(self.snapshot())
        return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def runaway(name: str, arguments: dict[str, Any]) -> str | None:
    """Why a call would not finish in reasonable time or memory (see :data:`MAX_PRECISION`), else ``None``."""
    for key in ("precision", "decimal_places"):
        value = arguments.get(key)
        number = isinstance(value, int | float) and not isinstance(value, bool)
        # NaN is the API's business (it answers with an error at once): only sizes are refused
        if number and value == value and not abs(value) <= MAX_PRECISION:
            return f"{key} must be at most {MAX_PRECISION} in size in this environment, got {value!r}"
    base, exponent = arguments.get("base"), arguments.get("exponent")
    growing = isinstance(base, int) and isinstance(exponent, int) and abs(base) > 1 and exponent > 0
    if name == "power" and growing and exponent * abs(base).bit_length() > MAX_POWER_BITS:
        return f"the result would have more than {MAX_POWER_BITS} bits"
    return None


def argument_problem(method: Any, arguments: dict[str, Any]) -> str | None:
    """Why Python would refuse these arguments before the method runs (missing, unexpected), or text that is
    not valid Unicode; ``None`` when the call can run. Types are the API's business, as in BFCL."""
    try:
        inspect.signature(method).bind(**arguments)
    except TypeError as err:
        return str(err)
    try:
        json.dumps(arguments, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return "not valid Unicode text (lone surrogate)"
    return None
