"""An independent split-overlap key: what a task *means*, computed without the env's own task key (issue 31).

A content split assigns each task to train or test by a hash of the env's ``task_key()``; measuring overlap with
that same key is zero by construction and finds nothing when the key itself is too fine (``( -2 - 4 )`` and
``( ( ( -2 - 4 ) ) )`` were two keys, so one could be test and the other train). :func:`semantic_key` computes
a second key from what the agent sees, by other code and on purpose coarser:

- an arithmetic question (``Calculate 3 + ( 4 * 2 ).``): the expression as a *function of its literals*, by
  evaluating it exactly at its own numbers and at two pseudo-random rational points (each distinct number
  standing for one random rational), plus the multiset of its numbers. Two forms of one expression (redundant
  parentheses, a sum's or product's operands swapped, ``a + -b`` vs ``a - b``, ``a / b * c`` vs ``a * c / b``)
  are the same function and share the key; different expressions differ at a random point (polynomial identity
  testing), even when they agree in value (``-6 / 1 + 1`` and ``1 / 1 + -6``);
- a question that is a list of numbers to combine symmetrically (gcd, lcm): the multiset of its numbers;
- any other question: its text, case- and whitespace-folded, with its numbers and words kept in order;
- an env that is not a single-question env: its rendered instance, case- and whitespace-folded.

``check_split_overlap`` (``trace check``) requires 0 test instances sharing this key with the train split too.
"""

from __future__ import annotations

import ast
import hashlib
import re
from fractions import Fraction
from typing import Any

_EXPRESSION = re.compile(r"[-+*/()\d\s.]*\d[-+*/()\d\s.]*")
_NUMBER = re.compile(r"\d+(?:\.\d+)?")
SYMMETRIC_NUMBER_SETS = ("gcd", "lcm")  # reasoning-gym datasets whose answer is symmetric in the numbers


def _point(number: Fraction, salt: int) -> Fraction:
    """The value a literal stands for at evaluation point ``salt``: a pseudo-random rational, the same for
    every occurrence of the same number."""
    digest = hashlib.sha256(f"{salt}:{number}".encode()).digest()
    return Fraction(int.from_bytes(digest[:6], "big") + 1, int.from_bytes(digest[6:9], "big") + 1)


def _value(node: ast.AST, salt: int | None) -> Fraction:
    """The exact value of an arithmetic expression tree (+, -, *, / and signs only); with ``salt``, each
    literal stands for a pseudo-random rational instead (the expression as a function of its literals)."""
    if isinstance(node, ast.Expression):
        return _value(node.body, salt)
    if (
        isinstance(node, ast.Constant)
        and isinstance(node.value, int | float)
        and not isinstance(node.value, bool)
    ):
        number = Fraction(str(node.value))
        return number if salt is None else _point(number, salt)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
        v = _value(node.operand, salt)
        return -v if isinstance(node.op, ast.USub) else v
    if isinstance(node, ast.BinOp):
        a, b = _value(node.left, salt), _value(node.right, salt)
        if isinstance(node.op, ast.Add):
            return a + b
        if isinstance(node.op, ast.Sub):
            return a - b
        if isinstance(node.op, ast.Mult):
            return a * b
        if isinstance(node.op, ast.Div):
            return a / b
    raise ValueError("not plain arithmetic")


def arithmetic_key(text: str) -> str | None:
    """The key of the longest arithmetic expression in ``text`` (see the module docstring), else None."""
    runs = [m.group(0).strip().rstrip(".").strip() for m in _EXPRESSION.finditer(text)]
    runs = [r for r in runs if re.search(r"\d\s*[-+*/]\s*[-(\d]", r)]  # an operator between two operands
    if not runs:
        return None
    expr = max(runs, key=len)
    if len(expr) > 2000:
        return None
    try:
        tree = ast.parse(expr, mode="eval")
        values = [_value(tree, salt) for salt in (None, 1, 2)]
    except (SyntaxError, ValueError, ZeroDivisionError, RecursionError):
        return None
    numbers = sorted(Fraction(n) for n in _NUMBER.findall(expr))
    return f"arith|{'|'.join(map(str, values))}|{','.join(map(str, numbers))}"


def _folded(text: str) -> str:
    return " ".join(str(text).casefold().split())


def semantic_key(env: Any) -> str:
    """The independent key of ``env``'s current instance (after ``reset``)."""
    env = getattr(env, "unwrapped", env)
    entry = getattr(env, "entry", None)
    if isinstance(entry, dict) and "question" in entry:  # a single-question env (reasoning-gym)
        question = str(entry["question"])
        if getattr(env, "dataset_name", "") in SYMMETRIC_NUMBER_SETS:
            return "numbers|" + ",".join(sorted(_NUMBER.findall(question), key=Fraction))
        key = arithmetic_key(question)
        return key if key is not None else "text|" + _folded(question)
    return "instance|" + _folded(env.render_instance())
