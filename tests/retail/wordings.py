"""Paraphrase sets for the retail user, one family per kind of oracle message, at least 10 wordings each.

Written for these tests (not taken from the user's lexicon) the way competent human agents word things:
synonyms of the slot, alternatives, requests phrased as statements ("let me know ..."), back-references to
details said before, US and UK spellings, negative phrasings of a status or an obstacle. Each family is split
in two halves: ``TUNE`` (used while building ``reading.py``) and ``HELD_OUT`` (measured once at the end).

A wording maps the oracle message's match to one message, or to a list of messages sent in turn (a proposal
stated first and confirmed by a back-reference).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

Wording = Callable[[re.Match[str]], "str | list[str]"]


@dataclass(frozen=True)
class Family:
    name: str
    pattern: re.Pattern[str]  # over the oracle's message
    wordings: tuple[Wording, ...]

    @property
    def tune(self) -> tuple[Wording, ...]:
        return self.wordings[0::2]

    @property
    def held_out(self) -> tuple[Wording, ...]:
        return self.wordings[1::2]


def _f(name: str, pattern: str, *wordings: Wording) -> Family:
    assert len(wordings) >= 10, name
    return Family(name, re.compile(pattern, re.DOTALL), wordings)


FAMILIES = (
    _f(
        "email",
        r"^I can help with that\. First, could you tell me your email",
        lambda m: "Happy to help! What's the e-mail address on your account?",
        lambda m: "Sure. Please let me know the email you signed up with.",
        lambda m: "To get started I'll need your email address.",
        lambda m: "Could you share the address you log in with?",
        lambda m: "Before anything else, I need to verify your identity. Can you provide your email?",
        lambda m: "Let me pull up your account - what email is it registered under?",
        lambda m: "I'd be glad to assist. May I have your e-mail, please?",
        lambda m: "First things first: which email address do you use with us?",
        lambda m: "Kindly send me the email on file so I can authenticate you.",
        lambda m: "No problem. What is your email, or else your full name and zip code?",
        lambda m: "Let me know your email and I'll look you up.",
        lambda m: "I need to confirm who I'm speaking with. What's your email address?",
    ),
    _f(
        "name_zip",
        r"^I could not find an account with that email\.",
        lambda m: "That email doesn't match any account. Could you give me your full name and ZIP code?",
        lambda m: (
            "I'm not finding anything under that address. What are your first and last name, and your postcode?"
        ),
        lambda m: "No account comes up for that email. Please share your name and postal code instead.",
        lambda m: "Hmm, that e-mail isn't in our system. Can I have your name plus zip?",
        lambda m: "I couldn't locate an account with that email. Let me know your name and zip code.",
        lambda m: "Nothing turned up for that address. What's your surname, first name and zip code?",
        lambda m: "That one didn't work. Could you tell me your full name and the ZIP of your home address?",
        lambda m: "There's no account with that email, unfortunately. I'll need your name and zip code.",
        lambda m: "Sorry, that email is not recognised. What name and postal code is the account under?",
        lambda m: "The lookup failed for that email. Please provide your first name, last name and zip.",
        lambda m: "I was unable to find you by email. Could you send me your name and zip code?",
        lambda m: "No match for that email on our side. What's your name, and your zip code?",
    ),
    _f(
        "order_id",
        r"^Which order is it\? Please tell me the order id\.",
        lambda m: "What's the order number?",
        lambda m: "Which of your orders do you mean?",
        lambda m: "Could you give me the order ID, please?",
        lambda m: "Let me know which order this is about.",
        lambda m: "Which purchase would you like to cancel?",
        lambda m: "Can you tell me the order's number? It starts with #W.",
        lambda m: "I'll need the order reference to continue.",
        lambda m: "What order are you referring to?",
        lambda m: "Please share the number of the order.",
        lambda m: "Which one is it - do you have the order number handy?",
        lambda m: "Could you identify the order for me (its number)?",
        lambda m: "Which order would that be?",
    ),
    _f(
        "reason",
        r"^Could you tell me the reason for cancelling order (#W\d+)\?",
        lambda m: f"May I ask why you'd like to cancel {m.group(1)}?",
        lambda m: "What's the reason for the cancellation?",
        lambda m: "Let me know why you want to cancel it.",
        lambda m: "Is it no longer needed, or was it ordered by mistake?",
        lambda m: "What made you decide to cancel?",
        lambda m: f"Could you give me the reason for cancelling {m.group(1)}?",
        lambda m: "How come you want to cancel this order?",
        lambda m: "Please tell me why the order should be cancelled.",
        lambda m: "Why are you cancelling, if you don't mind me asking?",
        lambda m: "What's behind the cancellation?",
        lambda m: "I'll need a reason for the cancellation: what is it?",
        lambda m: "For the cancelation I need to record a reason. What is it?",
    ),
    _f(
        "address",
        r"^What is the new shipping address for order (#W\d+)\?",
        lambda m: "What's the new delivery address?",
        lambda m: f"Where should we ship {m.group(1)} from now on?",
        lambda m: "Please let me know your new address.",
        lambda m: "Could you give me the full new address (street, city, state, zip)?",
        lambda m: "Where would you like the order delivered?",
        lambda m: "What address should it go to?",
        lambda m: "I'll need the new shipping address.",
        lambda m: "Where did you move to? I'll update the order.",
        lambda m: "Can you share the address the package should be sent to?",
        lambda m: "What's the new destination for this order?",
        lambda m: "Kindly provide the new mailing address.",
        lambda m: "Tell me where you'd like it shipped, please.",
    ),
    _f(
        "payment",
        r"^Which payment method should (?:I use for the price difference|the refund go to)",
        lambda m: "How would you like to pay?",
        lambda m: "Which card or account should I use?",
        lambda m: "Let me know which payment method you prefer.",
        lambda m: "Should I use your card, PayPal or a gift card?",
        lambda m: "Which method would you like for the money?",
        lambda m: "Where should the money go, or come from - which payment method?",
        lambda m: "What should I charge or refund, payment-wise?",
        lambda m: "Please choose a payment method.",
        lambda m: "Which account do you want to settle this with?",
        lambda m: "How do you want to handle the payment?",
        lambda m: "I'll need to know which payment method to use.",
        lambda m: "Could you tell me your preferred way to pay?",
    ),
    _f(
        "confirmation",
        r"^I will (.*) Do you confirm \(yes/no\)\?$",
        lambda m: f"Here's the plan: I'm going to {m.group(1)} Is that correct?",
        lambda m: f"Just to double-check: I will {m.group(1)} Shall I proceed?",
        lambda m: [f"To summarise, I will {m.group(1)}", "Shall I go ahead with that?"],
        lambda m: f"I will {m.group(1)} Please confirm and I'll get it done.",
        lambda m: f"Summary: {m.group(1)} Can I go ahead?",
        lambda m: f"I'm about to {m.group(1)} Do you authorise this?",
        lambda m: [f"This is what I'll do: {m.group(1)}", "Does everything above look right to you?"],
        lambda m: f"Next step: {m.group(1)} Would you like me to do that?",
        lambda m: f"I can {m.group(1)} Do you want me to go ahead?",
        lambda m: f"Ready when you are: I will {m.group(1)} OK to proceed?",
        lambda m: [f"Planned action: {m.group(1)}", "Let me know if I should proceed as described."],
        lambda m: f"Before I act - I will {m.group(1)} Do you authorize me to do this?",
    ),
    _f(
        "unavailable",
        r"^I'm sorry, the (.*) is not available\.$",
        lambda m: f"Unfortunately the {m.group(1)} is out of stock.",
        lambda m: f"The {m.group(1)} isn't available at the moment.",
        lambda m: f"I checked: the {m.group(1)} is sold out.",
        lambda m: f"Sadly, the {m.group(1)} is not in stock.",
        lambda m: f"The {m.group(1)} is currently unavailable.",
        lambda m: f"We no longer have the {m.group(1)} in stock.",
        lambda m: f"It looks like the {m.group(1)} can't be ordered right now.",
        lambda m: f"I'm afraid the {m.group(1)} is not available any more.",
        lambda m: f"The {m.group(1)} is no longer available, sorry.",
        lambda m: f"Bad news: we don't have the {m.group(1)} available.",
        lambda m: f"The {m.group(1)} isn't in stock, unfortunately.",
        lambda m: f"There is no stock of the {m.group(1)}.",
    ),
    _f(
        "balance",
        r"^The price difference is (\$[\d,.]+), but your gift card balance of (\$[\d,.]+) is not enough",
        lambda m: f"Your gift card only has {m.group(2)}, which doesn't cover the {m.group(1)} difference.",
        lambda m: (
            f"The gift card balance ({m.group(2)}) is insufficient for the price difference of {m.group(1)}."
        ),
        lambda m: (
            f"The difference comes to {m.group(1)}; the gift card holds {m.group(2)}, so it isn't enough."
        ),
        lambda m: f"I'm afraid the gift card ({m.group(2)}) can't cover the {m.group(1)} price difference.",
        lambda m: (
            f"The price difference is {m.group(1)} and your gift card balance is too low at {m.group(2)}."
        ),
        lambda m: f"Your gift card falls short: {m.group(2)} against a difference of {m.group(1)}.",
        lambda m: f"With {m.group(2)} on the gift card, it won't cover the {m.group(1)} difference.",
        lambda m: f"The gift card doesn't have enough ({m.group(2)}) for the {m.group(1)} difference.",
        lambda m: f"The {m.group(1)} difference exceeds your gift card balance of {m.group(2)}.",
        lambda m: (
            f"The difference of {m.group(1)} is more than the {m.group(2)} left on the gift card - not enough."
        ),
        lambda m: (
            f"Your gift card balance of {m.group(2)} is not sufficient for the difference of {m.group(1)}."
        ),
        lambda m: (
            f"Unfortunately the gift card cannot pay the {m.group(1)} difference: it only has {m.group(2)}."
        ),
    ),
    _f(
        "not_found",
        r"^I could not find order (#W\d+)\.",
        lambda m: f"There's no order {m.group(1)} in our system. Do you remember anything else about it?",
        lambda m: f"I'm unable to locate {m.group(1)}. Could you describe the order some other way?",
        lambda m: f"Order {m.group(1)} doesn't exist on our side. What else can you tell me about it?",
        lambda m: f"Hmm, {m.group(1)} didn't turn up. Is there another way to identify it?",
        lambda m: f"No order {m.group(1)} comes up. What was in it?",
        lambda m: f"The number {m.group(1)} isn't in our records. Anything else you remember?",
        lambda m: f"I can't find {m.group(1)}. Could it be a different order?",
        lambda m: f"Order {m.group(1)} was not found. Do you recall what you bought?",
        lambda m: (
            f"That order ({m.group(1)}) doesn't match anything we have. Let me know what else you remember."
        ),
        lambda m: f"I couldn't find {m.group(1)} in the system. What items were in that order?",
        lambda m: f"There's no record of {m.group(1)}. Can you tell me more about the order?",
        lambda m: f"{m.group(1)} is not a valid order number, it seems. What else do you know about it?",
    ),
)
