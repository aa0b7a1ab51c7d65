"""LLMUser against the local OpenAI-compatible stand-in (no network)."""

from __future__ import annotations

from tests.openai_standin import StandinServer, standin_fixture  # noqa: F401 - the `standin` fixture
from trace_gym.openai_client import OpenAIClient
from trace_gym.worlds.llm_user import GREETING, LLMUser
from trace_gym.worlds.user import STOP, UserReply, UserSimulator


def make_user(server: StandinServer, **kwargs) -> LLMUser:
    client = OpenAIClient(base_url=server.base_url, timeout=5.0)
    return LLMUser(
        "You want to return order #W1. Your zip code is 12345.", "stand-in", client=client, **kwargs
    )


def scripted(request):
    last = request["messages"][-1]["content"]
    if last == GREETING:
        return "I want to return an order."
    if "zip" in last:
        return "It is 12345."
    return f"Thanks, that is all. {STOP}"


def test_conversation_with_flipped_roles_and_stop(standin):
    standin.respond = scripted
    user = make_user(standin)
    assert isinstance(user, UserSimulator)
    assert user.opening() == "I want to return an order."
    assert user.reply("What is your zip code?") == UserReply("It is 12345.", done=False)
    final = user.reply("Done, the return is filed.")
    assert final.done and STOP in final.content

    sent = standin.requests[-1]
    roles = [m["role"] for m in sent["messages"]]
    assert roles == ["system", "user", "assistant", "user", "assistant", "user"]
    assert "return order #W1" in sent["messages"][0]["content"] and STOP in sent["messages"][0]["content"]
    assert sent["messages"][3] == {"role": "user", "content": "What is your zip code?"}  # the agent's words
    assert sent["messages"][4] == {"role": "assistant", "content": "It is 12345."}  # the user's own words
    assert sent["temperature"] == 0.0 and sent["seed"] == 0 and sent["model"] == "stand-in"


def test_opening_restarts_the_conversation(standin):
    standin.respond = scripted
    user = make_user(standin)
    user.opening()
    user.reply("What is your zip code?")
    user.opening()
    assert len(user.messages) == 3 and user.replies == 0


def test_max_replies_ends_a_runaway_conversation(standin):
    standin.respond = lambda request: "Hmm."
    user = make_user(standin, max_replies=2)
    user.opening()
    assert not user.reply("a").done
    last = user.reply("b")
    assert last.done and last.content.endswith(STOP)


def test_reply_before_opening_and_empty_content(standin):
    standin.respond = lambda request: {"content": None}
    user = make_user(standin, temperature=0.5, seed=None)
    assert user.reply("hello") == UserReply("", done=False)
    assert user.messages[0]["role"] == "system"
    assert "seed" not in standin.requests[-1] and standin.requests[-1]["temperature"] == 0.5
