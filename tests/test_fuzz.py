"""Hypothesis fuzzing of ``step``: no action, however malformed, raises or corrupts the world."""

import json

import gymnasium as gym
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trace_gym.registration import trace_env_ids


# Huge integers (past Python's int-to-str digit limit), NaN and infinities are values a dict action can carry.
def _hostile(name: str) -> int | float:
    """Built on draw, by name: hypothesis reprs its strategies, and a repr of 10**5000 raises too."""
    return {"big": 10**5000, "-big": -(10**5000), "2**64": 2**64, "nan": float("nan"), "inf": float("inf")}[
        name
    ]


HOSTILE_NUMBERS = st.sampled_from(["big", "-big", "2**64", "nan", "inf"]).map(_hostile)
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | HOSTILE_NUMBERS
    | st.floats(allow_nan=True)
    | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=12,
)
TOOL_NAMES = ["find_member", "search_books", "get_book", "checkout", "respond", "nope", ""]


@st.composite
def actions(draw):
    name = draw(st.sampled_from(TOOL_NAMES) | st.text(max_size=10))
    arguments = draw(
        json_values
        | st.dictionaries(st.sampled_from(["book_id", "member_id", "email", "title"]), json_values)
    )
    choice = draw(st.integers(0, 6))
    if choice == 0:
        return draw(st.text(max_size=200))
    if choice in (1, 2):
        try:  # huge integers cannot be written as JSON text by Python: they go in a dict action instead
            inner = arguments if choice == 1 else json.dumps(arguments, allow_nan=True)
            text = json.dumps({"name": name, "arguments": inner}, allow_nan=True)
        except ValueError:
            return {"content": None, "tool_calls": [{"function": {"name": name, "arguments": arguments}}]}
        return text if choice == 1 else f"<tool_call>{text}</tool_call>"
    if choice == 3:
        return {
            "content": draw(st.none() | st.text(max_size=20)),
            "tool_calls": [{"function": {"name": name, "arguments": arguments}}],
        }
    if choice == 4:
        return draw(st.dictionaries(st.text(max_size=10), json_values, max_size=3))
    if choice == 5:
        return "<tool_call>" + draw(st.text(max_size=60))
    return draw(json_values)


ENV_IDS = [e for e in trace_env_ids() if not e.startswith("trace/broken-")]  # see test_env_contract.py


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 10_000),
    env_index=st.integers(0, len(ENV_IDS) - 1),
    batch=st.lists(actions(), min_size=1, max_size=6),
)
def test_step_never_raises_and_invalid_actions_leave_state_unchanged(seed, env_index, batch):
    env = gym.make(ENV_IDS[env_index]).unwrapped
    env.reset(seed=seed)
    for action in batch:
        before = env.world.state_hash() if env.world is not None else None
        shown = len(env.messages)
        obs, reward, terminated, truncated, info = env.step(action)
        assert env.observation_space.contains(obs)
        assert 0.0 <= reward <= 1.0
        assert info["invalid_action"] in {None, "parse", "unknown_tool", "schema", "precondition"}
        answers = [m["content"] for m in obs[shown:] if m["role"] == "tool"]
        if info["invalid_action"] == "parse" or (answers and all(a.startswith("Error:") for a in answers)):
            assert env.world is None or env.world.state_hash() == before
        if terminated or truncated:
            break


class _Opaque:
    def __repr__(self) -> str:
        raise RuntimeError("no repr")


def _deep(depth: int) -> list:
    value: list = []
    for _ in range(depth):
        value = [value]
    return value


def _deep_dict(depth: int) -> dict:
    value: dict = {}
    for _ in range(depth):
        value = {"a": value}
    return value


ODD_VALUES = [
    {1, 2},
    b"bytes",
    _Opaque(),
    object(),
    _deep(100_000),
    _deep_dict(100_000),
    float("nan"),
    float("inf"),
    -float("inf"),
    10**5000,  # json.dumps raises ValueError on it (Python's int-to-str digit limit)
    {1: "int key"},
    ("a", "tuple"),
    "\udc80",
]


def _odd_actions(name: str) -> list:
    found = []
    for value in ODD_VALUES:
        found.append({"content": "", "tool_calls": [{"function": {"name": name, "arguments": {"x": value}}}]})
        found.append({"content": value, "tool_calls": []})
        found.append(value)
    # An integer literal past the digit limit inside JSON text (json.loads raises ValueError on it).
    found.append(json.dumps({"name": name, "arguments": {"x": 1}}).replace(": 1}", ": " + "9" * 5000 + "}"))
    # A lone surrogate inside a written value: stored by the tool, hashed at the end of the episode.
    found.append(
        f'<tool_call>{{"name": "{name}", "arguments": {{"message": "\\udc80", "summary": "\\udc80"}}}}</tool_call>'
    )
    return found


def test_step_never_raises_on_any_python_value_up_to_the_episode_end():
    for env_id in ENV_IDS:
        env = gym.make(env_id).unwrapped
        env.max_invalid_turns = env.max_turns = 10_000
        env.reset(seed=0)
        for tool in env.tools:
            for action in _odd_actions(tool["function"]["name"]):
                obs, reward, terminated, truncated, info = env.step(action)
                assert env.observation_space.contains(obs)
                if terminated or truncated:
                    env.reset(seed=0)
        env.max_turns = (
            getattr(env, "turn", 0) + 1
        )  # the next step ends the episode: the verifier hashes the final state
        for action in ("\udc80", {"content": "\udc80"}):
            _, reward, terminated, truncated, _ = env.step(action)
            assert 0.0 <= reward <= 1.0
            if terminated or truncated:
                break
