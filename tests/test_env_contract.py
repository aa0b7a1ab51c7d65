"""The env contract of DESIGN.md, on every registered trace env and on the test-only library domain."""

import json
import warnings

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

from trace_gym.registration import trace_env_ids

# test_validation.py registers deliberately broken envs (trace/broken-*); they are not under contract here.
ALL_ENVS = [e for e in trace_env_ids() if not e.startswith("trace/broken-")]
# retail's derived envs are one class over one target; the first reset of each scans 1,000 target tasks (~20 s),
# so the default run checks one of them and `tox -e slow` the other six
DEFAULT_RETAIL_DERIVED = "trace/retail-precondition-checking-v0"


def _marks(env_id: str) -> list[pytest.MarkDecorator]:
    derived_from_retail = gym.spec(env_id).kwargs.get("target_id") == "trace/retail-v2"
    return [pytest.mark.slow] if derived_from_retail and env_id != DEFAULT_RETAIL_DERIVED else []


@pytest.mark.parametrize("env_id", [pytest.param(e, marks=_marks(e), id=e) for e in ALL_ENVS])
def test_check_env_with_warnings_as_errors(env_id):
    env = gym.make(env_id)  # outside: a superseded id is made with Gymnasium's "out of date" note
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_env(env.unwrapped)
        # gym.make's passive checker runs on the first reset and step
        env.reset(seed=1)
        env.step(env.action_space.sample())
        env.close()


def _oracle_params() -> list:
    """Every env, the retail-derived ones but one marked slow: each of their resets replays a source task's
    prefix (~6 s an oracle episode, ~30 s an env here), and tests/derived/test_retail_derived.py already plays
    every one's oracle continuation in the default run."""
    envs = [e for e in ALL_ENVS if e != "trace/test-library-v0"] or ["trace/test-library-v0"]
    derived = [e for e in envs if e.startswith("trace/retail-") and e.endswith("-v0")]
    kept = {"trace/retail-error-recovery-v0"} & set(derived) or set(derived[:1])
    return [pytest.param(e, marks=pytest.mark.slow) if e in derived and e not in kept else e for e in envs]


@pytest.mark.parametrize("env_id", _oracle_params())
def test_oracle_scores_one_and_requirements_are_labels(env_id):
    env = gym.make(env_id)
    for seed in range(5):
        env.reset(seed=seed, options={"split": "train"})
        for action in env.unwrapped.oracle_actions():
            obs, reward, terminated, truncated, info = env.step(action)
            assert env.observation_space.contains(obs)
        assert terminated or truncated
        assert reward == 1.0, info.get("reward_components")
        assert set(info["requirements"].values()) <= {"PRESENT", "LACKING"}


def play(env, actions):
    for action in actions:
        result = env.step(action)
        if result[2] or result[3]:
            break
    return result


def call(name, **arguments):
    return {"content": "", "tool_calls": [{"function": {"name": name, "arguments": json.dumps(arguments)}}]}


@pytest.mark.parametrize(
    ("action", "kind", "fragment"),
    [
        ("<tool_call>{oops</tool_call>", "parse", "could not be read: invalid JSON"),
        (call("teleport"), "unknown_tool", "unknown tool 'teleport'"),
        (call("get_book", book=3), "schema", "'book_id' is a required property"),
        (call("checkout", member_id="M0", book_id="B0"), "precondition", "not found"),
    ],
)
def test_invalid_actions_are_answered_flagged_and_harmless(library_env, action, kind, fragment):
    obs, info = library_env.reset(seed=4)
    before = library_env.unwrapped.world.state_hash()
    obs, reward, terminated, truncated, info = library_env.step(action)
    assert info["invalid_action"] == kind
    assert fragment in obs[-1]["content"]
    assert library_env.unwrapped.world.state_hash() == before
    assert (reward, terminated, truncated) == (0.0, False, False)


def test_episode_truncates_after_max_invalid_turns():
    env = gym.make("trace/test-library-v0", max_invalid_turns=3)
    env.reset(seed=0)
    outcomes = [env.step("<tool_call>{</tool_call>")[2:4] for _ in range(3)]
    assert outcomes == [(False, False), (False, False), (False, True)]


def test_episode_truncates_after_max_turns():
    env = gym.make("trace/test-library-v0", max_turns=2)
    env.reset(seed=0)
    assert env.step(call("search_books", title="a"))[3] is False
    _, reward, terminated, truncated, info = env.step(call("search_books", title="b"))
    assert truncated and not terminated and reward == 0.0 and "reward_components" in info


def test_step_after_the_end_needs_a_reset(library_env):
    library_env.reset(seed=0)
    play(library_env, library_env.unwrapped.oracle_actions())
    with pytest.raises(RuntimeError, match="call reset"):
        library_env.unwrapped.step("hello")


def test_hint_goes_in_the_system_prompt_and_base_prompt_in_info(library_env):
    plain, info_plain = library_env.reset(seed=2)
    hinted, info_hinted = library_env.reset(seed=2, options={"hint": True})
    assert (
        hinted[0]["content"].startswith(plain[0]["content"]) and hinted[0]["content"] != plain[0]["content"]
    )
    assert info_hinted["base_system_prompt"] == plain[0]["content"] == info_plain["base_system_prompt"]
    assert hinted[1:] == plain[1:]  # the hint changes advice, never the task


def test_splits_are_disjoint_seed_ranges(library_env):
    train = {
        library_env.reset(seed=s, options={"split": "train"})[0][1]["content"]
        + library_env.unwrapped.render_instance()
        for s in range(20)
    }
    test = {
        library_env.reset(seed=s, options={"split": "test"})[0][1]["content"]
        + library_env.unwrapped.render_instance()
        for s in range(20)
    }
    assert not train & test
    with pytest.raises(ValueError, match="outside split 'test'"):
        library_env.reset(seed=10**7, options={"split": "test"})
    with pytest.raises(ValueError, match="unknown split"):
        library_env.reset(seed=0, options={"split": "dev"})


def test_bad_options_and_difficulty_get_clear_errors(library_env):
    with pytest.raises(ValueError, match="unknown reset options"):
        library_env.reset(seed=0, options={"hnt": True})
    with pytest.raises(ValueError, match="difficulty must be one of"):
        library_env.reset(seed=0, options={"difficulty": 9})
    with pytest.raises(ValueError, match="difficulty must be one of"):
        gym.make("trace/test-library-v0", difficulty=0)


def test_difficulty_changes_instance_size(library_env):
    library_env.reset(seed=0, options={"difficulty": 1})
    small = len(library_env.unwrapped.world.state["books"])
    library_env.reset(seed=0, options={"difficulty": 2})
    assert len(library_env.unwrapped.world.state["books"]) > small


def test_ansi_render_is_the_transcript():
    env = gym.make("trace/test-library-v0", render_mode="ansi")
    env.reset(seed=0)
    env.step(call("search_books", title="Dune"))
    text = env.render()
    assert "[system]" in text and "[assistant calls search_books]" in text and "[tool search_books" in text


def test_parallel_tool_calls_in_one_turn_and_limit():
    env = gym.make("trace/test-library-v0", max_tool_calls_per_turn=2)
    env.reset(seed=0)
    two = {"tool_calls": [{"name": "search_books", "arguments": {"title": "a"}}] * 2}
    obs, *_, info = env.step(two)
    assert [m["role"] for m in obs[-3:]] == ["assistant", "tool", "tool"] and info["invalid_action"] is None
    obs, *_, info = env.step({"tool_calls": [{"name": "search_books", "arguments": {"title": "a"}}] * 3})
    assert info["invalid_action"] == "parse" and "at most 2" in obs[-1]["content"]


def test_calls_of_one_turn_are_independent_and_an_invalid_one_changes_nothing():
    env = gym.make("trace/test-library-v0").unwrapped
    env.reset(seed=3)
    member, book = env.target["member_id"], env.target["book_id"]
    mixed = {
        "tool_calls": [
            {"name": "checkout", "arguments": {"member_id": member, "book_id": book}},
            {"name": "teleport", "arguments": {}},
            {"name": "checkout", "arguments": {"member_id": member, "book_id": book}},  # now on loan
        ]
    }
    obs, _, _, _, info = env.step(mixed)
    assert info["invalid_action"] == "unknown_tool"
    answers = [m["content"] for m in obs[-3:]]
    assert answers[0].startswith("{") and answers[1].startswith("Error: unknown tool")
    assert "only available books" in answers[2]
    alone = gym.make("trace/test-library-v0").unwrapped
    alone.reset(seed=3)
    alone.step(call("checkout", member_id=member, book_id=book))
    assert env.world.state_hash() == alone.world.state_hash()
