"""A paraphrasing agent for retail-v2: the oracle's actions, every message reworded (written for the tests,
not taken from the user simulator's lexicon), so that a verifier keyed to the oracle's wording would fail it."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

# (pattern over the oracle's message, rewording); the first match wins. Several wordings per message kind,
# chosen by the seed, so that each is exercised.
Rewrite = Callable[[re.Match[str]], str]
PARAPHRASES: list[tuple[re.Pattern[str], list[Rewrite]]] = [
    (
        re.compile(r"^I can help with that\. First, could you tell me your email"),
        [
            lambda m: "Happy to help. How can I identify your account?",
            lambda m: "Sure thing! To look you up, may I have the e-mail address on file?",
            lambda m: "Before we start I need to verify who you are: what's the address you log in with?",
        ],
    ),
    (
        re.compile(r"^I could not find an account with that email\."),
        [
            lambda m: "Hmm, nothing comes up for that address. What's your full name and postal code?",
            lambda m: (
                "That e-mail doesn't match any account, unfortunately. Please share your first and last name "
                "plus your ZIP."
            ),
        ],
    ),
    (
        re.compile(r"^Which order is it\?"),
        [
            lambda m: "Which one of your orders do you mean?",
            lambda m: "Can you give me the order number, please?",
        ],
    ),
    (
        re.compile(r"^Could you tell me the reason for cancelling order (#W\d+)\?"),
        [
            lambda m: f"May I ask why you'd like to cancel {m.group(1)}?",
            lambda m: "What's prompting the cancellation?",
        ],
    ),
    (
        re.compile(r"^What is the new shipping address for order (#W\d+)\?"),
        [
            lambda m: "What's the new delivery address?",
            lambda m: f"Where should we send {m.group(1)} from now on?",
        ],
    ),
    (
        re.compile(r"^Which payment method should I use for the price difference\?"),
        [
            lambda m: "How would you like to settle the difference?",
            lambda m: "Which card or account should cover the price difference?",
        ],
    ),
    (
        re.compile(r"^Which payment method should the refund go to"),
        [
            lambda m: "Where should the refund go: back to the original payment method, or onto a gift card?",
            lambda m: "How would you like to be refunded?",
        ],
    ),
    (
        re.compile(r"^I will (.*) Do you confirm \(yes/no\)\?$", re.DOTALL),
        [
            lambda m: f"Here is the plan: I'm going to {m.group(1)} Is this correct?",
            lambda m: f"Just to double-check before I act - {m.group(1)} Shall I proceed?",
            lambda m: f"Summary: {m.group(1)} Can I go ahead?",
        ],
    ),
    (
        re.compile(r"^I could not find order (#W\d+)\."),
        [
            lambda m: (
                f"There is no order {m.group(1)} in our system. Do you remember anything else about it?"
            ),
            lambda m: f"I'm unable to locate {m.group(1)}. Could you describe the order some other way?",
        ],
    ),
    (
        re.compile(r"^I'm sorry, the (.*) is not available\.$"),
        [
            lambda m: f"Unfortunately the {m.group(1)} is sold out right now.",
            lambda m: f"The {m.group(1)} is out of stock.",
        ],
    ),
    (
        re.compile(
            r"^The price difference is (\$[\d,.]+), but your gift card balance of (\$[\d,.]+) is not enough"
        ),
        [
            lambda m: (
                f"Your gift card only has {m.group(2)}, which doesn't cover the {m.group(1)} difference."
            ),
            lambda m: (
                f"The gift card balance ({m.group(2)}) is insufficient for the price difference of {m.group(1)}."
            ),
        ],
    ),
    (
        re.compile(r"^I'm sorry, but order (#W\d+) is already (\w+), so it cannot be cancelled\.$"),
        [
            lambda m: (
                f"Order {m.group(1)} has been {m.group(2)} already, so I'm afraid cancelling isn't possible."
            ),
            lambda m: (
                f"I checked: the status of {m.group(1)} is {m.group(2)}. Only orders that haven't been "
                "processed yet can be cancelled."
            ),
        ],
    ),
    (
        re.compile(r"^I understand, but an order that is (\w+) cannot be cancelled"),
        [
            lambda m: f"I hear you, but since it's {m.group(1)}, our rules don't allow a cancellation.",
            lambda m: "I'm sorry, I can't make an exception to the cancellation policy.",
        ],
    ),
    (
        re.compile(r"^You have \d+ (\w+) orders \(.*\); together they cost (\$[\d,.]+)\.$"),
        [
            lambda m: f"Your {m.group(1)} orders add up to {m.group(2)} in total.",
            lambda m: f"All together, that comes to {m.group(2)}.",
        ],
    ),
    (
        re.compile(r"^I'm sorry, but I can only help with your own account\."),
        [
            lambda m: (
                "I'm afraid I can't touch someone else's order - they would have to reach out to us themselves."
            ),
        ],
    ),
    (
        re.compile(r"^I understand, but I cannot act on another person's account"),
        [lambda m: "Sorry, even with their okay I'm not able to do anything on another customer's account."],
    ),
    (
        re.compile(r"^(?:Done|Order|The return)(.*)$", re.DOTALL),
        [lambda m: f"All set!{m.group(1)}", lambda m: f"Finished - {m.group(0)}"],
    ),
]


def paraphrase(text: str, choice: int) -> str:
    for pattern, rewrites in PARAPHRASES:
        match = pattern.search(text)
        if match:
            return rewrites[choice % len(rewrites)](match)
    return text


def paraphrased_oracle(actions: list[dict[str, Any]], choice: int) -> list[dict[str, Any]]:
    """The oracle with each message reworded (wording ``choice``; tool calls unchanged)."""
    return [
        {**a, "content": paraphrase(a["content"], choice)}
        if not a.get("tool_calls") and a.get("content")
        else a
        for a in actions
    ]
