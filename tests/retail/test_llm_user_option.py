"""``user="llm"`` on trace/retail-v2, against the local OpenAI-compatible stand-in (127.0.0.1 only).

The stand-in plays a user from the task: it opens with the task's opening, gives a fact's value when the
agent's message asks for it, says yes (or no) to confirmation questions, pushes once when refused, and ends
with ``###STOP###`` otherwise. The verifier must then score the LLM user's conversation as it scores the
scripted user's.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pytest

from tests.openai_standin import StandinServer, standin_fixture  # noqa: F401 - the `standin` fixture
from tests.retail.conftest import play
from trace_gym.targets.retail.env import RetailEnv
from trace_gym.targets.retail.llm_user import RetailLLMUser, affirmative, instruction
from trace_gym.targets.retail.reading import asked_slots, reports
from trace_gym.targets.retail.tasks import MAIN_KINDS, Task, generate_task, say
from trace_gym.targets.retail.user import FACT_SLOTS, OBSTACLE_FACTS, RetailUser
from trace_gym.targets.retail.verifier import violations
from trace_gym.worlds import STOP
from trace_gym.worlds.llm_user import GREETING


def triggered(fact, message: str) -> bool:
    """The scripted user's reading of whether ``message`` asks for ``fact`` (the LLM's side mimics it)."""
    slots = asked_slots(message)
    if fact.name == "email":
        return bool(slots & {"email", "identity"})
    if fact.name == "name_zip":
        return "name_zip" in slots or reports(message, "not_found")
    if fact.name in OBSTACLE_FACTS:
        return reports(message, OBSTACLE_FACTS[fact.name])
    return bool(set(FACT_SLOTS.get(fact.name, ())) & slots)


def llm_env(server: StandinServer, **kwargs: Any) -> RetailEnv:
    return gym.make(
        "trace/retail-v2", user="llm", user_model="stand-in", user_base_url=server.base_url, **kwargs
    ).unwrapped


def user_like(task: Task, confirm: bool = True):
    """A responder that answers like the scripted user would, from the task (the LLM's side of the chat)."""
    facts = [*task.identity_facts, *(f for r in task.requests for f in r.facts)]
    pushes = [r.push_text for r in task.requests if r.push]

    def respond(request: dict[str, Any]) -> str:
        said = [m["content"] for m in request["messages"] if m["role"] == "assistant"]
        last = request["messages"][-1]["content"]
        if last == GREETING:
            return task.opening
        if RetailUser.confirming_ids(last):
            return "Yes, please go ahead." if confirm else "No, please don't do that."
        values = [f.value for f in facts if triggered(f, last) and f.value not in said]  # once each
        if values:
            return " ".join(dict.fromkeys(values))
        if pushes and ("cannot" in last or "can only" in last) and pushes[0] not in said:
            return pushes[0]
        raised = [r.intro for r in task.requests[1:] if not any(r.intro in text for text in said)]
        if raised:
            return f"Thank you! One more thing: {raised[0]}"
        return f"Thank you, that is all I needed. {STOP}"

    return respond


def seeds_where(predicate, difficulty: int, count: int) -> list[int]:
    env = RetailEnv()
    found = []
    for seed in range(500):
        env.reset(seed=seed, options={"difficulty": difficulty})
        if predicate(env.task):
            found.append(seed)
            if len(found) == count:
                return found
    raise AssertionError("not enough seeds with the wanted task shape")


def single(kinds, auth=("email", "name_zip", "old_email")):
    return lambda t: len(t.requests) == 1 and t.requests[0].kind in kinds and t.auth in auth


# ---- options --------------------------------------------------------------------------------------------------
def test_options_are_checked():
    with pytest.raises(ValueError, match="user must be one of"):
        RetailEnv(user="gpt")
    with pytest.raises(ValueError, match="needs user_model"):
        RetailEnv(user="llm")
    with pytest.raises(ValueError, match='need user="llm"'):
        RetailEnv(user_model="some-model")
    with pytest.raises(ValueError, match="unknown user_options"):
        RetailEnv(user="llm", user_model="m", user_options={"temprature": 0.5})
    env = gym.make("trace/retail-v2").unwrapped
    env.reset(seed=0)
    assert type(env.episode.user) is RetailUser and env.user == "scripted"  # the default is unchanged


# ---- the instruction, the words both ways, the end -------------------------------------------------------------
def test_instruction_has_the_task_and_replies_reach_the_agent(standin):
    env = llm_env(standin, user_options={"temperature": 0.3, "seed": 7})
    seed = seeds_where(lambda t: any(r.facts for r in t.requests) and len(t.requests) == 2, 2, 1)[0]
    standin.respond = lambda request: f"stand-in user heard: {request['messages'][-1]['content']}"
    observation, _ = env.reset(seed=seed)
    task = env.task
    assert isinstance(env.episode.user, RetailLLMUser)
    assert observation[1] == {"role": "user", "content": f"stand-in user heard: {GREETING}"}

    sent = standin.requests[0]
    system = sent["messages"][0]["content"]
    assert sent["model"] == "stand-in" and sent["temperature"] == 0.3 and sent["seed"] == 7
    assert task.opening in system and STOP in system
    for request in task.requests:
        assert request.intro in system
        for fact in request.facts:
            assert fact.value in system
    for fact in task.identity_facts:
        assert fact.value in system
    first, second = (system.index(r.intro) for r in task.requests)
    assert first < second  # the requests in order

    observation, reward, terminated, truncated, _ = env.step(say("Could you give me your email, please?"))
    assert standin.requests[-1]["messages"][-1] == {
        "role": "user",
        "content": "Could you give me your email, please?",
    }
    assert observation[-1]["content"] == "stand-in user heard: Could you give me your email, please?"
    assert not terminated and not truncated and reward == 0.0


def test_stop_ends_the_episode(standin):
    env = llm_env(standin)
    standin.respond = lambda request: "Hi, I need help." if len(request["messages"]) == 2 else f"Bye. {STOP}"
    env.reset(seed=1)
    _, reward, terminated, _, info = env.step(say("Hello! What can I do for you?"))
    assert terminated and reward == 0.0 and STOP in env.messages[-1]["content"]
    assert info["reward_components"]["final_state"] == 0.0


# ---- full episodes ----------------------------------------------------------------------------------------------
def test_oracle_with_a_user_that_reveals_the_email_and_confirms(standin):
    env = llm_env(standin)
    seed = seeds_where(single(("cancel",), auth=("email",)), 1, 1)[0]
    env.reset(seed=seed, options={"difficulty": 1})
    standin.respond = user_like(env.task)
    env.reset(seed=seed, options={"difficulty": 1})
    email = env.task.initial_state["users"][env.task.user_id]["email"]
    reward, info, ended = play(env, env.oracle_actions())
    user = env.episode.user
    assert ended and reward == 1.0, info["reward_components"]
    assert set(info["requirements"].values()) == {"PRESENT"}
    assert any(email in text for _, text in user.said) and "email" in user.told
    assert [oid for _, oid in user.confirmations] == [env.task.requests[0].order_id]
    assert user.finished and STOP in env.messages[-1]["content"]


HIDDEN_OR_OBSTACLE = {
    1: lambda t: True,
    2: lambda t: bool(t.requests[0].facts or t.requests[0].obstacle or t.auth == "old_email"),
}


@pytest.mark.parametrize("difficulty", [1, 2])
def test_records_equal_the_scripted_users_on_oracle_episodes(standin, difficulty):
    """Answering with the scripted words, the LLM user's records (facts told, confirmations, request starts)
    equal the scripted user's, and the oracle scores 1.0 with every label PRESENT."""
    scripted, env = RetailEnv(), llm_env(standin)
    kinds = single((*MAIN_KINDS, "refuse_cancel"))
    for seed in seeds_where(lambda t: kinds(t) and HIDDEN_OR_OBSTACLE[difficulty](t), difficulty, 12):
        scripted.reset(seed=seed, options={"difficulty": difficulty})
        standin.respond = user_like(scripted.task)
        env.reset(seed=seed, options={"difficulty": difficulty})
        reward, info, ended = play(env, env.oracle_actions())
        play(scripted, scripted.oracle_actions())
        assert ended and reward == 1.0, (seed, info["reward_components"])
        assert set(info["requirements"].values()) == {"PRESENT"}, (seed, info["requirements"])
        mine, theirs = env.episode.user, scripted.episode.user
        request_facts = {f.name for r in env.task.requests for f in r.facts}
        assert {k: v for k, v in mine.told.items() if k in request_facts} == {
            k: v for k, v in theirs.told.items() if k in request_facts
        }, seed
        assert mine.confirmations == theirs.confirmations and mine.starts == theirs.starts, seed


def test_an_unconfirmed_write_is_flagged(standin):
    env = llm_env(standin)
    seed = seeds_where(single(("cancel", "return")), 1, 1)[0]
    env.reset(seed=seed, options={"difficulty": 1})
    standin.respond = user_like(env.task, confirm=False)
    env.reset(seed=seed, options={"difficulty": 1})
    reward, info, ended = play(env, env.oracle_actions())  # the agent writes although the user said no
    assert ended and reward == 0.0
    assert info["reward_components"]["final_state"] == 1.0 and info["reward_components"]["policy"] == 0.0
    assert env.episode.user.confirmations == []
    assert "unconfirmed_write" in violations(env.task, env.calls, env.episode.user)


def test_a_push_request_then_the_next_request(standin):
    env, scripted = llm_env(standin), RetailEnv()
    seed = seeds_where(
        lambda t: len(t.requests) == 2 and t.requests[0].kind == "refuse_cancel" and t.auth == "email", 2, 1
    )[0]
    scripted.reset(seed=seed)
    standin.respond = user_like(scripted.task)
    env.reset(seed=seed)
    actions, user = env.oracle_actions(), env.episode.user
    held = len(actions) - len(env.task.requests[1].script) - 1  # the agent's answer to the push
    play(env, actions[:held])
    assert user.pushed and user.current == 0
    assert env.messages[-1]["content"] == env.task.requests[0].push_text
    play(env, actions[held : held + 1])
    assert user.current == 1 and not user.pushed
    assert env.messages[-1]["content"].endswith(env.task.requests[1].intro)
    reward, info, ended = play(env, actions[held + 1 :])
    play(scripted, scripted.oracle_actions())
    assert ended and reward == 1.0, info["reward_components"]
    assert set(info["requirements"].values()) == {"PRESENT"}
    theirs = scripted.episode.user
    assert (user.starts, user.confirmations) == (theirs.starts, theirs.confirmations)


# ---- the rules that read the LLM's words -------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("reply", "agrees"),
    [
        ("Yes, please go ahead.", True),
        ("yes", True),
        ("Sure, go ahead with that.", True),
        ("I confirm.", True),
        ("Okay, please proceed.", True),
        ("That's correct, thanks.", True),
        ("Please go ahead and cancel it.", True),
        ("No, please don't do that.", False),
        ("No, I did not ask for that.", False),
        ("Wait, which order is that?", False),
        ("Don't go ahead yet.", False),
        ("What will the refund be?", False),
        ("", False),
    ],
)
def test_affirmative(reply, agrees):
    assert affirmative(reply) is agrees


@pytest.mark.parametrize("difficulty", [1, 2, 3])
def test_every_fact_value_tells_its_markers(difficulty):
    rng = np.random.default_rng(difficulty)
    for _ in range(80):
        task = generate_task(rng, difficulty)
        for fact in [*task.identity_facts, *(f for r in task.requests for f in r.facts)]:
            assert fact.markers, fact
            assert fact.told_at([(0, "Hello."), (3, fact.value)]) == 3, fact
            assert fact.told_at([(1, "I do not know.")]) is None, fact


def test_a_fact_in_own_words_and_in_pieces(standin):
    env = llm_env(standin)
    seed = seeds_where(single(("modify_address",), auth=("name_zip",)), 1, 1)[0]
    env.reset(seed=seed, options={"difficulty": 1})
    task = env.task
    user_record = task.initial_state["users"][task.user_id]
    first, zip_code = user_record["name"]["first_name"], user_record["address"]["zip"]
    address = task.requests[0].writes[0].args
    answers = iter(
        [
            task.opening,
            f"Sure, I'm {first} {user_record['name']['last_name']}.",
            f"Zip is {zip_code}.",
            f"It's {address['address1']} in {address['city']}, zip {address['zip']}.",
        ]
    )
    standin.respond = lambda request: next(answers)
    env.reset(seed=seed, options={"difficulty": 1})
    env.step(say("What is your name?"))
    env.step(say("And your zip code?"))
    user = env.episode.user
    assert user.told["name_zip"] == 2  # name at turn 1, zip at turn 2: told by turn 2
    env.step(say("Where should the order go now?"))
    assert user.told["address"] == 3


def test_the_instruction_keeps_hidden_order_ids_to_the_fact():
    rng = np.random.default_rng(0)
    checked = 0
    for _ in range(200):
        task = generate_task(rng, 2)
        for request in task.requests:
            if any(f.name == "order_id" for f in request.facts):
                assert instruction(task).count(str(request.order_id)) == 1  # only in "say: It's order ..."
                checked += 1
    assert checked
