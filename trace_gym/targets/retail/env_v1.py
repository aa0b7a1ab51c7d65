"""``trace/retail-v1``: the retail target that rewards the capability, not the phrasing (see docs/retail.md).

Same domain, tools and task templates as ``trace/retail-v0`` (``env.py``), with:

* the v1 generator (``generate_task(..., version=1)``): zip codes that match the state, unambiguous fallback
  variants, grammatical transfer summaries, and capability declarations that cover every task (policy-adherence
  on every write, information-gathering on every task, multi-step-completion on every multi-request task);
* the v1 scripted user (``user_v1.py``): intents and slots instead of keywords, obstacles answered only after
  they happened, confirmations only of proposals that name the goal's action and details;
* the v1 verifier (``verifier_v1.py``): confirmation by content, facts stated as answers (no spraying), writes
  and answers after the reads they need, labels computed over the requests the agent engaged with;
* ``oracle_actions(without=...)``: the oracle with one capability removed (see :data:`ABLATIONS`);
* a content split: a task's key (its requests and what they are about, without names and ids) decides its
  split, so no test task occurs in the train split.

Spaces, rewards, termination and difficulty are those of :class:`~trace_gym.targets.retail.env.RetailEnv`
(default difficulty 2); the reward components are listed in ``verifier_v1.py``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

from trace_gym.core.env import Evaluation
from trace_gym.targets.retail.env import RetailEnv
from trace_gym.targets.retail.policy import HINT_V1, POLICY_V1
from trace_gym.targets.retail.tasks import Task
from trace_gym.targets.retail.user import RetailUser
from trace_gym.targets.retail.user_v1 import RetailUserV1
from trace_gym.targets.retail.verifier_v1 import evaluate
from trace_gym.worlds.world import canonical_json

# Capability -> what the scripted agent "oracle minus that capability" does.
ABLATIONS: dict[str, str] = {
    "precondition-checking": "never reads the orders and products a request is about before acting or answering",
    "policy-adherence": "never asks the user to confirm a change",
    "information-gathering": "never asks the user for what only the user knows (it uses the values unasked)",
    "multi-step-completion": "stops after the first request (says goodbye to every later one)",
}
PRECONDITION_READS = ("get_order_details", "get_product_details")
GOODBYE = "I'm glad I could help with that. Have a great day!"


class RetailEnvV1(RetailEnv):
    __doc__ = RetailEnv.__doc__
    description = (
        "Retail customer service (tau-bench style), v1: intent-and-slot user, confirmation by content, "
        "facts stated as answers, reads before acting; oracle ablations per capability."
    )
    version: ClassVar[int] = 1
    superseded_by = None
    ablatable_capabilities: ClassVar[tuple[str, ...]] = tuple(ABLATIONS)
    content_split: ClassVar[bool] = True

    policy_text: ClassVar[str] = POLICY_V1
    hint_text: ClassVar[str] = HINT_V1
    verify: ClassVar[Callable[..., Evaluation]] = staticmethod(evaluate)

    def _scripted_user(self, task: Task) -> RetailUser:
        return RetailUserV1(task, state=self._live_state, clock=lambda: self.turn, calls=lambda: self.calls)

    def task_key(self) -> str:
        """What makes two instances the same task: the requests (kind, variant, obstacle, push, transfer), the
        authentication path, and the products and amounts they are about; names, ids and wording left out."""
        if self.task is None:
            raise RuntimeError("call reset() before task_key()")
        return canonical_json(task_content(self.task))

    def oracle_actions(self, without: str | None = None) -> list[dict[str, Any]]:
        """The reference solution (``without=None``), or the scripted agent "oracle minus one capability"
        (one of :attr:`ablatable_capabilities`, see :data:`ABLATIONS`)."""
        if self.task is None:
            raise RuntimeError("call reset() before oracle_actions()")
        if without is None:
            return [dict(action) for action in self.task.oracle]
        if without not in ABLATIONS:
            raise ValueError(
                f"cannot remove capability {without!r}; supported: {', '.join(self.ablatable_capabilities)}"
            )
        return ablated_oracle(self.task, without)


def task_content(task: Task) -> dict[str, Any]:
    state = task.initial_state

    def products(order_id: str | None) -> list[str]:
        order = state["orders"].get(order_id) if order_id else None
        return sorted(item["name"] for item in order["items"]) if order else []

    return {
        "auth": task.auth,
        "requests": [
            {
                "kind": r.kind,
                "variant": r.variant,
                "obstacle": r.obstacle,
                "push": r.push,
                "transfer": r.transfer,
                "products": products(r.order_id),
                "needs": [[n.name, n.value] for n in r.needs],
                "writes": [[w.tool, sorted(k for k in w.args if k != "order_id")] for w in r.writes],
            }
            for r in task.requests
        ],
    }


def ablated_oracle(task: Task, without: str) -> list[dict[str, Any]]:
    """The oracle's actions with one capability removed (see :data:`ABLATIONS`)."""
    if without == "multi-step-completion":
        later = sum(len(r.script) for r in task.requests[1:])
        kept = task.oracle[: len(task.oracle) - later]
        return [dict(a) for a in kept] + [{"content": GOODBYE} for _ in range(8)]
    asks = set(task.asks).union(*(r.asks for r in task.requests))
    targets = {(tool, key) for r in task.requests for tool, key in r.reads}
    actions: list[dict[str, Any]] = []
    for action in task.oracle:
        content = action.get("content") or ""
        if not action.get("tool_calls"):
            if without == "policy-adherence" and content.endswith("Do you confirm (yes/no)?"):
                continue
            if without == "information-gathering" and content in asks:
                continue
            actions.append(dict(action))
            continue
        calls = action["tool_calls"]
        if without == "precondition-checking":
            calls = [c for c in calls if not _target_read(c, targets)]
        if calls:
            actions.append({**action, "tool_calls": calls})
    return actions


def _target_read(call: dict[str, Any], targets: set[tuple[str, str]]) -> bool:
    import json

    fn = call["function"]
    if fn["name"] not in PRECONDITION_READS:
        return False
    arguments = json.loads(fn["arguments"])
    return any((fn["name"], value) in targets for value in arguments.values())
