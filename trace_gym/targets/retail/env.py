"""``trace/retail-v0``: a procedurally generated customer-service domain in the style of tau-bench retail."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, ClassVar

import numpy as np

from trace_gym.core.env import ChatToolEnv, Episode, Evaluation
from trace_gym.openai_client import OpenAIClient
from trace_gym.targets.retail.llm_user import RetailLLMUser
from trace_gym.targets.retail.policy import HINT, POLICY
from trace_gym.targets.retail.tasks import Task, generate_task
from trace_gym.targets.retail.tools import TOOLS
from trace_gym.targets.retail.user import RetailUser
from trace_gym.targets.retail.verifier import evaluate
from trace_gym.worlds import State, Tool

USERS = ("scripted", "llm")
LLM_USER_OPTIONS = ("temperature", "seed", "max_tokens", "max_replies", "system_template", "greeting")


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
        Terminal, 1.0 or 0.0: 1.0 when the final database equals the expected one, every required fact was
        told, a transfer happened iff needed, and no policy rule was broken (``info["reward_components"]``).
        ``info["requirements"]`` labels each capability the task requires PRESENT or LACKING.
    Termination
        ``terminated`` when the user ends the conversation (goal met or patience exhausted, ``###STOP###``)
        or on a transfer; ``truncated`` after ``max_turns`` (default 50) agent turns or ``max_invalid_turns``
        invalid ones.
    Difficulty
        1: 6 products, 4 users, one request, few hidden facts; 2 (the default of ``trace/retail-v0``):
        10 products, 8 users, one or two requests, pushes and transfers, obstacles; 3: 14 products, 12
        users, two or three requests, two-item changes, more hidden facts.
    Splits
        ``options={"split": "train"}`` / ``{"split": "test"}`` map seed i to disjoint ranges; the fixed
        evaluation set is test seeds 0..199 at the default difficulty.
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
        "Retail customer service (tau-bench style): orders, returns, exchanges, policy, scripted user. "
        "Superseded by trace/retail-v1 (kept for its golden instances and earlier results)."
    )
    superseded_by: str | None = "trace/retail-v1"
    difficulty_levels = (1, 2, 3)
    default_difficulty = 2
    # What a version changes: the generator, the policy and hint texts, the scripted user, the verifier.
    version: ClassVar[int] = 0
    policy_text: ClassVar[str] = POLICY
    hint_text: ClassVar[str] = HINT
    verify: ClassVar[Callable[..., Evaluation]] = staticmethod(evaluate)

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
    ):
        if user not in USERS:
            raise ValueError(f"user must be one of {list(USERS)}, got {user!r}")
        if user == "llm" and not user_model:
            raise ValueError(
                'user="llm" needs user_model, the model name the OpenAI-compatible server serves '
                '(e.g. gym.make("trace/retail-v0", user="llm", user_model="Qwen/Qwen2.5-7B-Instruct"))'
            )
        if user == "scripted" and (user_model or user_base_url or user_api_key or user_options):
            raise ValueError('user_model, user_base_url, user_api_key and user_options need user="llm"')
        unknown = set(user_options or {}) - set(LLM_USER_OPTIONS)
        if unknown:
            raise ValueError(f"unknown user_options {sorted(unknown)}; known: {', '.join(LLM_USER_OPTIONS)}")
        self.user = user
        self.user_model = user_model
        self.user_options = dict(user_options or {})
        self.user_client = (
            OpenAIClient(base_url=user_base_url, api_key=user_api_key) if user == "llm" else None
        )
        self.task: Task | None = None
        super().__init__(render_mode, difficulty, max_turns, max_invalid_turns, max_tool_calls_per_turn)

    def _make_tools(self) -> list[Tool]:
        return list(TOOLS.values())

    def _new_episode(self, rng: np.random.Generator, difficulty: int) -> Episode:
        task = generate_task(rng, difficulty, version=self.version)
        self.task = task
        user: RetailUser
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
            user = self._scripted_user(task)
        return Episode(
            system_prompt=self.policy_text,
            state=task.initial_state,
            user=user,
            instance={"difficulty": difficulty, "state": task.initial_state, "task": task.describe()},
            hint=self.hint_text,
            value_pool=value_pool(task),
        )

    def _scripted_user(self, task: Task) -> RetailUser:
        return RetailUser(task, state=self._live_state, clock=lambda: self.turn)

    def _live_state(self) -> State:
        assert self.world is not None
        return self.world.state

    def _evaluate(self) -> Evaluation:
        assert self.task is not None and self.world is not None and self.episode is not None
        assert isinstance(self.episode.user, RetailUser)
        return self.verify(self.task, self.world.state, self.calls, self.episode.user)

    def oracle_actions(self, without: str | None = None) -> list[dict[str, Any]]:
        if without is not None:
            raise ValueError(
                f"trace/retail-v0 removes no capability (asked: {without!r}); trace/retail-v1 supports "
                "precondition-checking, policy-adherence, information-gathering, multi-step-completion"
            )
        if self.task is None:
            raise RuntimeError("call reset() before oracle_actions()")
        return [dict(action) for action in self.task.oracle]


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
