import pytest

from tests.toy_library import TOOLS
from trace_gym.worlds import ScriptedUser, Tool, ToolError, World, state_hash
from trace_gym.worlds.user import Fact


def make_world():
    state = {
        "members": {"M1": {"name": "ada", "email": "ada@x.org"}},
        "books": {
            "B1": {"title": "Dune", "status": "available", "loan_days": 14, "borrower": None},
            "B2": {"title": "Emma", "status": "on_loan", "loan_days": 7, "borrower": "M9"},
        },
    }
    return World(list(TOOLS), state)


def test_valid_write_changes_state_and_hash():
    world = make_world()
    before = world.state_hash()
    result = world.call("checkout", {"member_id": "M1", "book_id": "B1"})
    assert result.error is None and '"due_in_days":14' in result.output
    assert world.state["books"]["B1"]["borrower"] == "M1"
    assert world.state_hash() != before


@pytest.mark.parametrize(
    ("name", "arguments", "kind", "fragment"),
    [
        ("lend", {}, "unknown_tool", "unknown tool 'lend'. Available tools: checkout, find_member"),
        ("checkout", {"member_id": "M1"}, "schema", "'book_id' is a required property"),
        ("checkout", {"member_id": 1, "book_id": "B1"}, "schema", "member_id: 1 is not of type 'string'"),
        ("checkout", {"member_id": "M1", "book_id": "B1", "x": 1}, "schema", "Additional properties"),
        ("checkout", {"member_id": "M1", "book_id": "B2"}, "precondition", "B2 is on_loan"),
        ("checkout", {"member_id": "M7", "book_id": "B1"}, "precondition", "member 'M7' not found"),
        ("find_member", {"email": "nobody@x.org"}, "precondition", "no member with email"),
    ],
)
def test_invalid_calls_name_the_problem_and_leave_state_unchanged(name, arguments, kind, fragment):
    world = make_world()
    before = world.state_hash()
    result = world.call(name, arguments)
    assert result.error == kind
    assert result.output.startswith("Error: ") and fragment in result.output
    assert world.state_hash() == before


def test_a_handler_failing_half_way_leaves_no_partial_write():
    def half_write(state, args):
        state["books"]["B1"]["status"] = "lost"
        raise ToolError("disk full")

    world = World([Tool("half", "", {"type": "object"}, half_write, kind="write")], make_world().state)
    before = world.state_hash()
    assert world.call("half", {}).error == "precondition"
    assert world.state_hash() == before


def test_state_hash_is_independent_of_key_order():
    assert state_hash({"a": 1, "b": [1, 2]}) == state_hash({"b": [1, 2], "a": 1})
    assert state_hash({"a": 1}) != state_hash({"a": 2})


def test_bad_schema_and_duplicate_tools_are_rejected_at_definition():
    with pytest.raises(Exception, match="is not valid"):
        Tool("t", "", {"type": "nope"}, lambda s, a: None)
    with pytest.raises(ValueError, match="duplicate tool names"):
        World([TOOLS[0], TOOLS[0]], {})


def test_scripted_user_reveals_facts_confirms_and_stops():
    done = {"flag": False}
    user = ScriptedUser(
        request="I want a book.",
        facts=[Fact("email", "My email is a@b.c.", ("email",))],
        confirms=lambda message: "Dune" in message,
        goal_met=lambda: done["flag"],
        patience=1,
    )
    assert user.opening() == "I want a book."
    assert user.reply("What is your email?").content == "My email is a@b.c."
    assert user.told == {"email"}
    assert user.reply("Shall I lend you Dune? (yes/no)").content.startswith("Yes")
    assert user.reply("Shall I lend you Emma? (yes/no)").content.startswith("No")
    assert not user.reply("The weather is nice.").done
    assert user.reply("Still nice.").done  # out of patience
    done["flag"] = True
    assert user.reply("Done.").done


def test_state_hash_accepts_any_string_a_tool_stored():
    from trace_gym.worlds.world import state_hash

    assert state_hash({"a": "\udc80"}) != state_hash({"a": "x"})
    assert state_hash({"a": "é"}) == state_hash({"a": "é"})
