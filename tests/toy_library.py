"""A small test-only domain for the world engine: a library with members, books and loans.

The task: a member (who reveals their email when asked) wants to borrow one book by title. The agent must
look the member up, find the book, check it is available, ask for confirmation, check it out, and tell the
member the due date. Registered as ``trace/test-library-v0`` by tests/conftest.py only.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from trace_gym.core.env import ChatToolEnv, Episode, Evaluation
from trace_gym.registration import register_env
from trace_gym.worlds import Fact, Precondition, ScriptedUser, State, Tool, ToolError

FIRST = ["ada", "alan", "grace", "edsger", "barbara", "donald", "frances", "john"]
TITLES = [
    "Dune",
    "Emma",
    "Ulysses",
    "Beloved",
    "Middlemarch",
    "Solaris",
    "Kindred",
    "Persuasion",
    "Neuromancer",
]
POLICY = (
    "You are a library assistant. Identify the member by email before anything else. "
    "Ask for explicit confirmation (yes/no) before checking out a book. Only available books can be lent."
)


def _member(state: State, member_id: str) -> dict[str, Any]:
    if member_id not in state["members"]:
        raise ToolError(f"member {member_id!r} not found")
    return state["members"][member_id]


def _book(state: State, book_id: str) -> dict[str, Any]:
    if book_id not in state["books"]:
        raise ToolError(f"book {book_id!r} not found")
    return state["books"][book_id]


def find_member(state: State, args: dict[str, Any]) -> Any:
    for member_id, member in sorted(state["members"].items()):
        if member["email"] == args["email"]:
            return {"member_id": member_id}
    raise ToolError(f"no member with email {args['email']!r}")


def search_books(state: State, args: dict[str, Any]) -> Any:
    hits = [
        bid for bid, book in sorted(state["books"].items()) if args["title"].lower() in book["title"].lower()
    ]
    return {"book_ids": hits}


def get_book(state: State, args: dict[str, Any]) -> Any:
    return _book(state, args["book_id"])


def checkout(state: State, args: dict[str, Any]) -> Any:
    _member(state, args["member_id"])
    book = _book(state, args["book_id"])
    book["status"] = "on_loan"
    book["borrower"] = args["member_id"]
    return {"book_id": args["book_id"], "due_in_days": book["loan_days"]}


def _available(state: State, args: dict[str, Any]) -> str | None:
    book = state["books"].get(args["book_id"])
    if book is not None and book["status"] != "available":
        return f"book {args['book_id']} is {book['status']}, only available books can be checked out"
    return None


def _string(description: str) -> dict[str, Any]:
    return {"type": "string", "description": description}


TOOLS = [
    Tool(
        "find_member",
        "Find a member id by email.",
        {
            "type": "object",
            "properties": {"email": _string("member email")},
            "required": ["email"],
            "additionalProperties": False,
        },
        find_member,
    ),
    Tool(
        "search_books",
        "Find book ids whose title contains the given text.",
        {
            "type": "object",
            "properties": {"title": _string("part of a title")},
            "required": ["title"],
            "additionalProperties": False,
        },
        search_books,
    ),
    Tool(
        "get_book",
        "Read a book's details (title, status, loan_days).",
        {
            "type": "object",
            "properties": {"book_id": _string("book id, like B123")},
            "required": ["book_id"],
            "additionalProperties": False,
        },
        get_book,
    ),
    Tool(
        "checkout",
        "Lend a book to a member. Requires book.status == available.",
        {
            "type": "object",
            "properties": {"member_id": _string("member id"), "book_id": _string("book id")},
            "required": ["member_id", "book_id"],
            "additionalProperties": False,
        },
        checkout,
        kind="write",
        preconditions=(Precondition("book.status == available", _available),),
    ),
]


class LibraryEnv(ChatToolEnv):
    """Borrow one book for an identified member (test-only domain)."""

    capability = "test-library"
    description = "Test-only library domain: identify a member, check availability, confirm, lend a book."
    difficulty_levels = (1, 2)

    def _make_tools(self) -> list[Tool]:
        return list(TOOLS)

    def _new_episode(self, rng: np.random.Generator, difficulty: int) -> Episode:
        n_members, n_books = (3, 4) if difficulty == 1 else (6, 8)
        members = {}
        for i in rng.choice(len(FIRST), size=n_members, replace=False):
            member_id = f"M{int(rng.integers(100, 1000))}"
            members[member_id] = {
                "name": FIRST[int(i)],
                "email": f"{FIRST[int(i)]}{int(rng.integers(10, 99))}@mail.com",
            }
        books = {}
        for i in rng.choice(len(TITLES), size=n_books, replace=False):
            book_id = f"B{int(rng.integers(100, 1000))}"
            status = "available" if rng.random() < 0.7 else "on_loan"
            books[book_id] = {
                "title": TITLES[int(i)],
                "status": status,
                "loan_days": int(rng.integers(7, 29)),
                "borrower": None,
            }
        available = sorted(b for b, book in books.items() if book["status"] == "available")
        if not available:  # make sure every task is solvable
            available = [sorted(books)[0]]
            books[available[0]]["status"] = "available"
        member_id = sorted(members)[int(rng.integers(len(members)))]
        book_id = available[int(rng.integers(len(available)))]
        state = {"members": members, "books": books}
        self.target = {"member_id": member_id, "book_id": book_id}
        member, book = members[member_id], books[book_id]
        facts = [Fact("email", f"My email is {member['email']}.", ("email", "e-mail"))]
        user = ScriptedUser(
            request=f"Hi, I would like to borrow {book['title']}.",
            facts=facts,
            goal_met=lambda: (
                any(told_days(book["loan_days"], m) for m in self.agent_messages)
                and self.world is not None
                and self.world.state["books"][book_id]["status"] == "on_loan"
            ),
        )
        return Episode(
            system_prompt=POLICY,
            state=state,
            user=user,
            instance={"state": state, "target": self.target},
            hint="Find the member by email, search the title, read the book to check its status, then confirm.",
            value_pool={
                "member_id": sorted(members),
                "book_id": sorted(books),
                "email": [m["email"] for m in members.values()],
            },
        )

    def _evaluate(self) -> Evaluation:
        assert self.world is not None
        book = self.world.state["books"][self.target["book_id"]]
        lent_right = book["status"] == "on_loan" and book["borrower"] == self.target["member_id"]
        others_untouched = all(
            b["borrower"] is None or b_id == self.target["book_id"]
            for b_id, b in self.world.state["books"].items()
            if b_id != self.target["book_id"]
        )
        # the first figure the agent states is its answer: a wrong number corrected later does not count
        stated = [m for m in self.agent_messages if NUMBER.search(m)]
        told_due = bool(stated) and told_days(book["loan_days"], stated[0])
        # a checkout the tools refused (the book was not available) breaks the policy, refused or not
        no_violation = not any(c.name == "checkout" and c.error is not None for c in self.calls)
        checked_first = any(c.name == "get_book" and c.error is None for c in self.calls)
        components = {
            "final_state": float(lent_right and others_untouched),
            "due_date_told": float(told_due),
            "no_violation": float(no_violation),
        }
        return Evaluation(
            reward=components["final_state"] * components["due_date_told"] * components["no_violation"],
            components=components,
            requirements={"precondition-checking": "PRESENT" if checked_first else "LACKING"},
        )

    def oracle_actions(self) -> list[dict[str, Any]]:
        assert self.episode is not None
        state = self.episode.instance["state"]
        member_id, book_id = self.target["member_id"], self.target["book_id"]
        email, title = state["members"][member_id]["email"], state["books"][book_id]["title"]

        def call(name: str, **arguments: Any) -> dict[str, Any]:
            import json

            return {
                "content": "",
                "tool_calls": [
                    {"type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}
                ],
            }

        return [
            {"content": "Could you tell me your email address?"},
            call("find_member", email=email),
            call("search_books", title=title),
            call("get_book", book_id=book_id),
            {"content": f"I can lend you {title} ({book_id}). Do you confirm (yes/no)?"},
            call("checkout", member_id=member_id, book_id=book_id),
            {"content": f"Done: {title} is yours for {state['books'][book_id]['loan_days']} days."},
        ]


NUMBER = re.compile(r"(?<![\w#.])\d+(?![\w.])")  # a figure on its own, not part of an id such as B123


def told_days(days: int, message: str) -> bool:
    """The message states the loan period as its only number (a list of candidate numbers tells nothing)."""
    return NUMBER.findall(message) == [str(days)]


register_env("trace/test-library-v0", entry_point="tests.toy_library:LibraryEnv")
