"""``trace/retail-v2``: a procedurally generated customer-service domain in the style of tau-bench retail.

The generator is ``tasks.py``, the scripted user ``user.py`` (reading messages with ``reading.py``), the
verifier ``verifier.py``; ``oracle_actions(without=...)`` plays the oracle with one capability removed
(:data:`ABLATIONS`). A task's key (its requests and what they are about, without names and ids) decides its
split, so no test task occurs in the train split.

Versions: v0 (keyword user) and v1 (hedged answers and refused writes passed, a user strict on wording) are
retired; their ids answer with Gymnasium's "deprecated, use trace/retail-v2".
"""

from __future__ import annotations

import json
import pickle
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np

from trace_gym.core.env import ChatToolEnv, Episode, Evaluation
from trace_gym.openai_client import OpenAIClient
from trace_gym.targets.retail.data import money, order_total
from trace_gym.targets.retail.diagnosis import Diagnosis, decision_points
from trace_gym.targets.retail.facts import fmt
from trace_gym.targets.retail.llm_user import RetailLLMUser
from trace_gym.targets.retail.policy import HINT, POLICY
from trace_gym.targets.retail.tasks import Task, generate_task
from trace_gym.targets.retail.tools import TOOLS
from trace_gym.targets.retail.user import RetailUser, UserRecords
from trace_gym.targets.retail.verifier import assess, milestone_events
from trace_gym.worlds import State, Tool
from trace_gym.worlds.world import canonical_json

# Capability -> what the scripted agent "oracle minus that capability" does.
ABLATIONS: dict[str, str] = {
    "precondition-checking": "never reads the orders and products a request is about before acting or answering",
    "policy-adherence": "never asks the user to confirm a change",
    "information-gathering": "never asks the user for what only the user knows (it uses the values unasked)",
    "multi-step-completion": "stops after the first request (says goodbye to every later one)",
    "structured-reasoning": "never derives the amounts a request's records imply: states a naive figure (the whole "
    "order for a partial refund, the new items' price for a difference, every order for a total over some)",
}
PRECONDITION_READS = ("get_order_details", "get_product_details")
GOODBYE = "I'm glad I could help with that. Have a great day!"

USERS = ("scripted", "llm")
LLM_USER_OPTIONS = ("temperature", "seed", "max_tokens", "max_replies", "system_template", "greeting")
# tasks one env keeps for resets to a seed it drew before (about 25 KB pickled each); a pool scan's target
# keeps more (trace_gym.derived.pool.scan_target)
TASK_MEMO_SIZE = 1024


class RetailEnv(ChatToolEnv):
    """Retail customer service: authenticate a user, then cancel, modify, return or exchange their orders,
    answer questions about them, refuse what the policy forbids, and transfer what no tool can do.

    Each seed draws a database (products with variants, users with payment methods, orders) and a task: a
    user with one to three requests, composed from capability needs (see ``tasks.py``), who answers from a
    script (``user.py``).

    Observation space
        :class:`~trace_gym.core.spaces.ChatObservationSpace`: the conversation so far as OpenAI chat
        messages; the system message is the retail policy (plus expert advice with ``options={"hint": True}``).
    Action space
        :class:`~trace_gym.core.spaces.AssistantTurnSpace` over 14 tools: ``find_user_id_by_email``,
        ``find_user_id_by_name_zip``, ``get_user_details``, ``get_order_details``, ``get_product_details``,
        ``list_all_product_types``, ``calculate``, ``cancel_pending_order``, ``modify_pending_order_address``,
        ``modify_pending_order_items``, ``return_delivered_order_items``, ``exchange_delivered_order_items``,
        ``transfer_to_human_agents``, ``respond_to_user``; a turn without tool calls (or a
        ``respond_to_user`` call) is a message to the user.
    Rewards
        Terminal, 1.0 or 0.0: 1.0 when the final database equals the expected one, the first answer stated
        for every required fact was right (one figure), no message sprayed amounts, writes and answers came
        after the reads they need, a transfer happened iff needed, and no policy rule was broken, an
        attempted write the tools refused included (``info["reward_components"]``, see ``verifier.py``).
        ``info["requirements"]`` labels each capability the task requires PRESENT, LACKING or NA (its decision
        point not reached), ``info["first_failure"]`` names the earliest decision point where the agent
        deviated and ``info["outcome"]`` how the episode ended (``diagnosis.py``).
    Termination
        ``terminated`` when the user ends the conversation (goal met or patience exhausted, ``###STOP###``)
        or on a transfer; ``truncated`` after ``max_turns`` (default 50) agent turns or ``max_invalid_turns``
        invalid ones. With ``stop_when_decided=True`` (off by default), also ``terminated`` once the reward is
        fixed at 0 whatever follows: the first violation (:meth:`decided`, reported in ``info["decided"]``), so
        an evaluation spends no turns on an outcome that cannot change. The stop labels as a cut from outside: the
        first failure comes at or before the first violation, so the labels are those of the full episode.
    Difficulty
        1: 6 products, 4 users, one request, few hidden facts; 2 (the default of ``trace/retail-v2``):
        10 products, 8 users, one or two requests, pushes and transfers, obstacles; 3: 14 products, 12
        users, two or three requests, two-item changes, more hidden facts.
    Splits
        ``options={"split": "train"}`` / ``{"split": "test"}``: a content split (a task's key, see
        :meth:`task_key`, decides its split); the fixed evaluation set is test seeds 0..199 at difficulty 2.
    User
        ``user="scripted"`` (default): the deterministic scripted user. ``user="llm"``: the user is played
        by ``user_model`` behind an OpenAI-compatible server (``user_base_url``, else ``$OPENAI_BASE_URL``
        or ``http://127.0.0.1:8000/v1``; ``user_api_key``; ``user_options`` go to
        :class:`~trace_gym.worlds.llm_user.LLMUser`, e.g. ``{"temperature": 0.0, "max_replies": 30}``). The
        task, the tools and the verifier are the same; facts told and confirmations are read off the LLM's
        replies by text matching (``llm_user.py``).
    """

    capability = ""
    description = (
        "Retail customer service (tau-bench style): orders, returns, exchanges, policy; a scripted user that "
        "reads requests by structure; first-answer facts, refused writes count as violations."
    )
    superseded_by: str | None = None
    difficulty_levels = (1, 2, 3)
    default_difficulty = 2
    ablatable_capabilities: ClassVar[tuple[str, ...]] = tuple(ABLATIONS)
    content_split: ClassVar[bool] = True

    def __init__(
        self,
        render_mode: str | None = None,
        difficulty: int | None = None,
        max_turns: int = 50,
        max_invalid_turns: int = 5,
        max_tool_calls_per_turn: int = 8,
        user: str = "scripted",
        user_model: str | None = None,
        user_base_url: str | None = None,
        user_api_key: str | None = None,
        user_options: Mapping[str, Any] | None = None,
        stop_when_decided: bool = False,
    ):
        if user not in USERS:
            raise ValueError(f"user must be one of {list(USERS)}, got {user!r}")
        if user == "llm" and not user_model:
            raise ValueError(
                'user="llm" needs user_model, the model name the OpenAI-compatible server serves '
                '(e.g. gym.make("trace/retail-v2", user="llm", user_model="Qwen/Qwen2.5-7B-Instruct"))'
            )
        if user == "scripted" and (user_model or user_base_url or user_api_key or user_options):
            raise ValueError('user_model, user_base_url, user_api_key and user_options need user="llm"')
        unknown = set(user_options or {}) - set(LLM_USER_OPTIONS)
        if unknown:
            raise ValueError(f"unknown user_options {sorted(unknown)}; known: {', '.join(LLM_USER_OPTIONS)}")
        self.stop_when_decided = stop_when_decided
        self.user = user
        self.user_model = user_model
        self.user_options = dict(user_options or {})
        self.user_client = (
            OpenAIClient(base_url=user_base_url, api_key=user_api_key) if user == "llm" else None
        )
        self.task: Task | None = None
        self.diagnosis: Diagnosis | None = None
        self.parse_turns = 0
        # (difficulty, rng state before the draw) -> (pickled task, rng state after it); see _generate_task
        self._task_memo: OrderedDict[tuple[int, str], tuple[bytes, dict[str, Any]]] = OrderedDict()
        self.task_memo_size = TASK_MEMO_SIZE
        super().__init__(render_mode, difficulty, max_turns, max_invalid_turns, max_tool_calls_per_turn)

    def _make_tools(self) -> list[Tool]:
        return list(TOOLS.values())

    def _new_episode(self, rng: np.random.Generator, difficulty: int) -> Episode:
        task = self._generate_task(rng, difficulty)
        self.task = task
        self.diagnosis, self.parse_turns = None, 0
        user: UserRecords
        if self.user_client is not None:
            assert self.user_model is not None
            user = RetailLLMUser(
                task,
                state=self._live_state,
                clock=lambda: self.turn,
                model=self.user_model,
                client=self.user_client,
                **self.user_options,
            )
        else:
            user = RetailUser(task, state=self._live_state, clock=lambda: self.turn, calls=lambda: self.calls)
        return Episode(
            system_prompt=POLICY,
            state=task.initial_state,
            user=user,
            instance={"difficulty": difficulty, "state": task.initial_state, "task": task.describe()},
            hint=HINT,
            value_pool=value_pool(task),
        )

    def _generate_task(self, rng: np.random.Generator, difficulty: int) -> Task:
        """:func:`generate_task`, remembered per (difficulty, rng state): a reset to a seed this env drew before
        unpickles that task (about 1 ms) and leaves the rng where the draw left it, instead of drawing the
        database again (about 10 ms): the same task and the same random stream after it. A derived env's pool
        scan resets each source task several times (its replays: two thirds of a scan's resets), a GRPO group
        once per rollout. A copy per reset: nothing an episode does reaches the kept task."""
        key = (difficulty, json.dumps(rng.bit_generator.state, sort_keys=True))
        kept = self._task_memo.get(key)
        if kept is not None:
            self._task_memo.move_to_end(key)
            rng.bit_generator.state = kept[1]
            return pickle.loads(kept[0])
        task = generate_task(rng, difficulty)
        self._task_memo[key] = (pickle.dumps(task), rng.bit_generator.state)
        if len(self._task_memo) > self.task_memo_size:
            self._task_memo.popitem(last=False)
        return task

    def _live_state(self) -> State:
        assert self.world is not None
        return self.world.state

    def _evaluate(self) -> Evaluation:
        assert self.task is not None and self.world is not None and self.episode is not None
        assert isinstance(self.episode.user, UserRecords)
        # the conversation ended (the user stopped, a transfer), not the stop on a decided outcome: that is a cut
        # from outside, so the labels are those of the full episode up to it (no "gave up" at the next point)
        ended = (
            self.over
            and self.turn < self.max_turns
            and self.invalid_turns < self.max_invalid_turns
            and self.decided_stop is None
        )
        evaluation, self.diagnosis = assess(self.task, self.world.state, self.calls, self.episode.user, ended)
        return evaluation

    def step(self, action: Any):
        obs, reward, terminated, truncated, info = super().step(action)
        self.parse_turns += int(info.get("invalid_action") == "parse")
        if terminated or truncated:
            info["first_failure"] = self.first_failure()
            info["outcome"] = self.outcome(reward, truncated)
        return obs, reward, terminated, truncated, info

    def first_failure(self) -> dict[str, Any] | None:
        """The earliest decision point where the agent deviated (capability, agent turn, evidence), or None;
        computed with the episode's last score (``diagnosis.py``)."""
        if self.diagnosis is None:
            self._evaluate()
        assert self.diagnosis is not None
        return dict(self.diagnosis.first_failure) if self.diagnosis.first_failure else None

    def outcome(self, reward: float, truncated: bool | None = None) -> str:
        """How the episode ended: ``success``; ``malformed_output`` (the invalid-action limit, most of the invalid
        turns unreadable) or ``invalid_action_limit``; ``out_of_turns`` (the turn limit, or
        an episode cut from outside: ``truncated=None`` and not over); ``stopped`` (the agent's last turn said
        and did nothing); ``failed`` (it ended otherwise: the first failure, where there is one, says why)."""
        if reward >= 1.0:
            return "success"
        if self.invalid_turns >= self.max_invalid_turns:
            # mostly unreadable turns: malformed output, else wrong calls (unknown tools, schema)
            return "malformed_output" if 2 * self.parse_turns > self.invalid_turns else "invalid_action_limit"
        if truncated or (truncated is None and not self.over):
            return "out_of_turns"
        last = self.messages[-2] if len(self.messages) >= 2 else {}
        if (
            last.get("role") == "assistant"
            and not last.get("tool_calls")
            and not str(last.get("content") or "").strip()
        ):
            return "stopped"
        return "failed"

    # ---- the capability-env protocol (the same API as trace/bfcl) ------------------------------------------------
    def task_capabilities(self) -> tuple[str, ...]:
        """The capabilities the current task exercises (the ones ``info["requirements"]`` labels)."""
        if self.task is None:
            raise RuntimeError("call reset() before task_capabilities()")
        return tuple(self.task.capabilities)

    def decision_points(self) -> dict[str, list[int]]:
        """For each capability of the task, the indexes into :meth:`oracle_actions` of the oracle's actions
        that exercise it, in order (a capability env pre-fills the conversation up to one of them)."""
        if self.task is None:
            raise RuntimeError("call reset() before decision_points()")
        return decision_points(self.task)

    def task_key(self) -> str:
        """What makes two instances the same task: the requests (kind, variant, obstacle, push, transfer), the
        authentication path, and the products and amounts they are about; names, ids and wording left out."""
        if self.task is None:
            raise RuntimeError("call reset() before task_key()")
        return canonical_json(task_content(self.task))

    def first_user_message(self) -> str:
        """The user's opening message of the current instance (``trace check`` reports how many test
        episodes open like a train episode)."""
        if self.task is None:
            raise RuntimeError("call reset() before first_user_message()")
        return self.task.opening

    def oracle_actions(self, without: str | None = None, *, start: int = 0) -> list[dict[str, Any]]:
        """The reference solution (``without=None``), or the scripted agent "oracle minus one capability"
        (one of :attr:`ablatable_capabilities`, see :data:`ABLATIONS`). ``start``: what that agent does from
        the oracle's action ``start`` on, after the oracle's own first ``start`` actions (a derived env's
        prefix); ``start=0`` is the whole episode."""
        if self.task is None:
            raise RuntimeError("call reset() before oracle_actions()")
        if without is None:
            return [dict(action) for action in self.task.oracle[start:]]
        if without not in ABLATIONS:
            raise ValueError(
                f"cannot remove capability {without!r}; supported: {', '.join(self.ablatable_capabilities)}"
            )
        return ablated_oracle(self.task, without, start)

    def decided(self) -> dict[str, Any] | None:
        """The first violation of the episode so far (``verifier.milestone_events``: a broken policy rule, a wrong
        write, a wrong or uninformed answer, sprayed amounts): each fails a reward component for good, so the
        reward is 0 whatever follows. None while none happened (the reward may still be 0: a missing write or
        fact can still come)."""
        _, violations = self.milestone_events()
        if not violations:
            return None
        turn, violation = violations[0]
        return {"turn": turn, "violation": violation}

    def milestone_events(self) -> tuple[list[tuple[int, str]], list[tuple[int, str]]]:
        """(events, violations) of the episode so far, each ``(agent turn, key)``: the steps the verifier
        credits and the breaches no continuation repairs (``verifier.milestone_events``). A derived env's
        milestone reward matches the agent's events against the oracle's."""
        if self.task is None or self.episode is None:
            raise RuntimeError("call reset() before milestone_events()")
        assert isinstance(self.episode.user, UserRecords)
        return milestone_events(self.task, self.calls, self.episode.user)


def value_pool(task: Task) -> dict[str, list[Any]]:
    """Values of this instance by parameter name, so that sampled tool calls hit real records."""
    state = task.initial_state
    user = state["users"][task.user_id]
    orders = [state["orders"][o] for o in user["orders"]]
    item_ids = sorted({i["item_id"] for o in orders for i in o["items"]})
    variant_ids = sorted(
        {v for o in orders for i in o["items"] for v in state["products"][i["product_id"]]["variants"]}
    )
    users = [state["users"][u] for u in sorted(state["users"])]
    return {
        "user_id": [u["user_id"] for u in users],
        "email": [u["email"] for u in users],
        "first_name": sorted({u["name"]["first_name"] for u in users}),
        "last_name": sorted({u["name"]["last_name"] for u in users}),
        "zip": sorted({u["address"]["zip"] for u in users}),
        "order_id": sorted(user["orders"]) + sorted(state["orders"])[:6],
        "product_id": sorted(state["products"]),
        "item_ids": item_ids,
        "new_item_ids": variant_ids,
        "payment_method_id": sorted(user["payment_methods"])
        + sorted(m for u in users[:3] for m in u["payment_methods"]),
        "address1": [user["address"]["address1"]],
        "city": [user["address"]["city"]],
        "state": [user["address"]["state"]],
        "country": ["USA"],
        "expression": ["1 + 1", "100 - 12.5", "(20 + 30) * 2"],
    }


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


def ablated_oracle(task: Task, without: str, start: int = 0) -> list[dict[str, Any]]:
    """The oracle's actions with one capability removed (see :data:`ABLATIONS`), from the oracle's action
    ``start`` on: each ablation rewrites the oracle action by action (multi-step-completion: every action of
    a later request becomes a goodbye), so the agent lacking the capability after an oracle prefix of
    ``start`` actions plays the rewrite of ``task.oracle[start:]``."""
    if without == "multi-step-completion":
        later = sum(len(r.script) for r in task.requests[1:])
        kept = task.oracle[start : len(task.oracle) - later]
        return [dict(a) for a in kept] + [{"content": GOODBYE} for _ in range(8)]
    if without == "structured-reasoning":
        swaps = [swap for r in task.requests for swap in _naive_reasoning(task, r)]
        return [_swapped(action, swaps) for action in task.oracle[start:]]
    asks = set(task.asks).union(*(r.asks for r in task.requests))
    targets = {(tool, key) for r in task.requests for tool, key in r.reads}
    actions: list[dict[str, Any]] = []
    for action in task.oracle[start:]:
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


def _naive_reasoning(task: Task, request: Any) -> list[tuple[str, str]]:
    """What an agent that does not reason over the records states instead of the oracle's derived amounts, as
    text replacements (old, new) in the request's actions. None where the naive figure happens to be the right one
    (a cancellation's refund is the order's total; a return of every item): the ablated agent then succeeds, and
    the task does not need the capability. Orders found by reasoning (the most expensive, the one with a product)
    are left to the oracle: an agent that proposes another order hears the user's no, and what it does next is
    another capability's failure."""
    if "structured-reasoning" not in request.capabilities:
        return []
    orders = task.initial_state["orders"]
    swaps: list[tuple[str, str]] = []
    oid = request.order_id
    for need in request.needs:
        if need.kind != "money":
            continue
        naive = None
        if need.name == "total":  # every order of the user, whatever its status
            naive = sum(order_total(o) for o in orders.values() if o["user_id"] == task.user_id)
        elif need.name == "refund_amount" and oid:  # the whole order, not the items returned
            naive = order_total(orders[oid])
        elif need.name == "price_difference" and request.writes:  # the new items' price, not the difference
            args = request.writes[0].args
            items = {item["item_id"]: item["price"] for item in orders[args["order_id"]]["items"]}
            naive = sum(items[i] for i in args["item_ids"]) + float(need.value)
        if naive is not None and fmt(money(naive)) != fmt(need.value):
            swaps.append((fmt(need.value), fmt(money(naive))))
    return swaps


def _swapped(action: dict[str, Any], swaps: list[tuple[str, str]]) -> dict[str, Any]:
    """``action`` with every (old, new) replacement applied to its text and its calls' arguments."""
    text = json.dumps(action)
    for old, new in swaps:
        text = text.replace(old, new)
    return json.loads(text)


def _target_read(call: dict[str, Any], targets: set[tuple[str, str]]) -> bool:
    fn = call["function"]
    if fn["name"] not in PRECONDITION_READS:
        return False
    arguments = json.loads(fn["arguments"])
    return any((fn["name"], value) in targets for value in arguments.values())
