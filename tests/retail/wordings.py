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


# A second held-out round, written after the first held-out measurement had been taken and the classes it
# found fixed (see docs/retail.md): wordings no tuning has seen, measured once.
FRESH: dict[str, tuple[Wording, ...]] = {
    "email": (
        lambda m: "Glad to help. Which e-mail is linked to your account?",
        lambda m: "I just need the email tied to your profile and we can begin.",
        lambda m: "To verify the account, what's your login email?",
        lambda m: "Sure! Send over the email address you registered with.",
        lambda m: "Can you tell me the email associated with your account, please?",
        lambda m: "Let's get you verified: what email do you use to sign in?",
    ),
    "name_zip": (
        lambda m: "I don't see an account under that email. What's your name and ZIP?",
        lambda m: (
            "That address didn't return a match; could you give me your first name, last name and zip code?"
        ),
        lambda m: "We have nothing on file for that email. Let me know your full name and postal code.",
        lambda m: "No luck with that email. Can you tell me your name and the zip code on the account?",
        lambda m: "The email isn't registered with us. Please provide your name and ZIP code.",
        lambda m: "I came up empty with that email - could I get your full name and zip instead?",
    ),
    "order_id": (
        lambda m: "Which order is this about? The number would help.",
        lambda m: "Do you have the order number?",
        lambda m: "Please tell me the ID of the order you'd like cancelled.",
        lambda m: "Which of your purchases should I cancel?",
        lambda m: "Could you point me to the order - what's its number?",
        lambda m: "What's the reference number of that order?",
    ),
    "reason": (
        lambda m: "Could you let me know the reason?",
        lambda m: "Why would you like to cancel it?",
        lambda m: "Mind telling me why you're cancelling?",
        lambda m: "What's the reason - no longer needed, or ordered by mistake?",
        lambda m: "I have to note a cancellation reason. Could you give me one?",
        lambda m: "What prompted the cancellation?",
    ),
    "address": (
        lambda m: "What's the address you'd like it shipped to now?",
        lambda m: "Please give me the new address.",
        lambda m: "Where are you living now? I'll redirect the order.",
        lambda m: "To which address should the package go?",
        lambda m: "Could you let me know the new shipping address?",
        lambda m: "What's your new street address, city, state and zip?",
    ),
    "payment": (
        lambda m: "Which payment option would you like to use?",
        lambda m: "What card should I put this on - or would you prefer PayPal or a gift card?",
        lambda m: "How should the difference be paid or refunded?",
        lambda m: "Let me know which of your payment methods to use.",
        lambda m: "Which method do you want for the money?",
        lambda m: "Please pick how you'd like to pay.",
    ),
    "confirmation": (
        lambda m: f"Okay - I'll {m.group(1)} Is that alright?",
        lambda m: f"Plan: {m.group(1)} Shall I go ahead?",
        lambda m: [f"Here's what will happen: {m.group(1)}", "Do you want me to proceed with this?"],
        lambda m: f"I'm ready to {m.group(1)} Can you confirm?",
        lambda m: f"To be clear, I will {m.group(1)} Are you happy for me to do that?",
        lambda m: f"I will {m.group(1)} Please reply yes to authorise it.",
    ),
    "unavailable": (
        lambda m: f"Sorry - the {m.group(1)} is out of stock at the moment.",
        lambda m: f"The {m.group(1)} isn't something we can supply right now.",
        lambda m: f"Unfortunately we don't carry the {m.group(1)} any more.",
        lambda m: f"The {m.group(1)} is unavailable.",
        lambda m: f"I'm afraid the {m.group(1)} is not in stock.",
        lambda m: f"The {m.group(1)} has sold out.",
    ),
    "balance": (
        lambda m: f"The gift card has just {m.group(2)}, not enough for the {m.group(1)} difference.",
        lambda m: f"Your gift card ({m.group(2)}) can't pay for the price difference of {m.group(1)}.",
        lambda m: (
            f"The price difference of {m.group(1)} is more than your gift card balance ({m.group(2)}), so it won't cover it."
        ),
        lambda m: f"That gift card is short: {m.group(2)} available against a {m.group(1)} difference.",
        lambda m: (
            f"There's only {m.group(2)} on the gift card, and the difference is {m.group(1)}: insufficient."
        ),
        lambda m: f"The gift card balance of {m.group(2)} doesn't cover the {m.group(1)} price difference.",
    ),
    "not_found": (
        lambda m: f"I can't find any order {m.group(1)}. What else do you remember about it?",
        lambda m: f"{m.group(1)} doesn't seem to exist. Could you describe the order?",
        lambda m: f"There's no order with the number {m.group(1)}. What was in it?",
        lambda m: f"I was unable to find order {m.group(1)}. Is there anything else you recall?",
        lambda m: f"Order {m.group(1)} isn't showing up. Can you tell me what you ordered?",
        lambda m: f"We have no record of order {m.group(1)}. What items did it contain?",
    ),
}


# A third held-out round, written after the second one's classes were fixed; measured once.
FRESH_3: dict[str, tuple[Wording, ...]] = {
    "email": (
        lambda m: "Of course. Could I get the email address for the account?",
        lambda m: "What email do you have on your account with us?",
        lambda m: "Which e-mail address should I search for?",
        lambda m: "Please provide the email address you used when ordering.",
        lambda m: "I'll be happy to help once I've verified you - your email, please?",
        lambda m: "Can I ask for your account email so I can authenticate you?",
    ),
    "name_zip": (
        lambda m: "That email came back with no results. Could you share your name and zip code?",
        lambda m: "I couldn't match that email to an account. What's the name and ZIP on it?",
        lambda m: (
            "No account under that email, I'm afraid. Please tell me your first and last name and your ZIP."
        ),
        lambda m: "Nothing under that email. Would you mind giving me your name and postal code?",
        lambda m: "The email lookup failed. Let me try your name and zip code instead - what are they?",
        lambda m: "That email isn't on file. Could you provide your name along with your zip code?",
    ),
    "order_id": (
        lambda m: "Could you tell me which order it is?",
        lambda m: "What is the number of the order you want to cancel?",
        lambda m: "Can you give me the order number so I can pull it up?",
        lambda m: "Which order should I cancel? Please include the #W number.",
        lambda m: "Let me know the order ID.",
        lambda m: "I'll need the order number - what is it?",
    ),
    "reason": (
        lambda m: "Can you tell me why you want it cancelled?",
        lambda m: "Before I cancel, what's the reason?",
        lambda m: "Could you share the reason for cancelling?",
        lambda m: "Why do you want to cancel this order?",
        lambda m: "Is there a particular reason for the cancellation?",
        lambda m: "Let me know your reason for cancelling, please.",
    ),
    "address": (
        lambda m: "What's the new address for delivery?",
        lambda m: "Could you share the full new address?",
        lambda m: "Where should the order be delivered now?",
        lambda m: "Please send me the new shipping address.",
        lambda m: "What address would you like on the order?",
        lambda m: "Let me know where to ship it.",
    ),
    "payment": (
        lambda m: "Which payment method would you like me to use?",
        lambda m: "What would you like to use for payment?",
        lambda m: "Could you tell me which card or account to use?",
        lambda m: "How would you like this paid or refunded?",
        lambda m: "Please let me know the payment method.",
        lambda m: "Do you want to use your card, PayPal, or a gift card?",
    ),
    "confirmation": (
        lambda m: f"I'm going to {m.group(1)} Does that work for you?",
        lambda m: f"Just confirming: I'll {m.group(1)} OK?",
        lambda m: [f"I will {m.group(1)}", "Should I go ahead?"],
        lambda m: f"I will {m.group(1)} May I proceed?",
        lambda m: f"Here is the change: {m.group(1)} Would you like me to go ahead?",
        lambda m: f"I'll {m.group(1)} Do I have your go-ahead?",
    ),
    "unavailable": (
        lambda m: f"The {m.group(1)} is currently out of stock.",
        lambda m: f"Unfortunately, the {m.group(1)} is no longer available.",
        lambda m: f"I'm sorry, we've run out of the {m.group(1)}.",
        lambda m: f"The {m.group(1)} isn't available right now.",
        lambda m: f"I checked and the {m.group(1)} can't be ordered at the moment.",
        lambda m: f"The {m.group(1)} is unavailable, unfortunately.",
    ),
    "balance": (
        lambda m: (
            f"The price difference is {m.group(1)}, and your gift card only has {m.group(2)}, so it isn't enough."
        ),
        lambda m: f"Your gift card balance is {m.group(2)}, which is less than the {m.group(1)} difference.",
        lambda m: f"I'm sorry, the gift card's {m.group(2)} won't cover a {m.group(1)} price difference.",
        lambda m: (
            f"The {m.group(1)} difference can't be paid with the gift card: its balance is {m.group(2)}."
        ),
        lambda m: f"Your gift card has insufficient funds ({m.group(2)}) for the {m.group(1)} difference.",
        lambda m: f"The difference is {m.group(1)}; the gift card balance of {m.group(2)} doesn't cover it.",
    ),
    "not_found": (
        lambda m: f"I couldn't find an order with the number {m.group(1)}. What else can you tell me?",
        lambda m: f"Order {m.group(1)} doesn't appear in our system. Do you remember what was in it?",
        lambda m: f"There doesn't seem to be an order {m.group(1)}. Anything else you remember about it?",
        lambda m: f"{m.group(1)} returned no results. Could you describe the order?",
        lambda m: f"I'm not able to find {m.group(1)}. What did you order?",
        lambda m: f"No order {m.group(1)} exists on our end. Do you recall any item in it?",
    ),
}


# A fourth held-out round, written after the third one's classes were fixed; measured once.
FRESH_4: dict[str, tuple[Wording, ...]] = {
    "email": (
        lambda m: "Absolutely. What's the best email to find your account?",
        lambda m: "Could you confirm your email address for me?",
        lambda m: "I'll start by locating your account - can you share your email?",
        lambda m: "Hi there! Please give me the e-mail on the account.",
        lambda m: "What email address are you registered with?",
        lambda m: "For security, I need your account's email. What is it?",
    ),
    "name_zip": (
        lambda m: (
            "Hmm, I can't find that email. Can you give me your name and zip code so I can try another way?"
        ),
        lambda m: "That email isn't linked to any account. What's your first and last name, and your zip?",
        lambda m: "The email didn't work. Please let me know your full name and ZIP code.",
        lambda m: "I wasn't able to find an account with that email. Your name and zip code, please?",
        lambda m: "Looks like that email isn't in our records. What are your name and postal code?",
        lambda m: "No account found for that email. Could you provide your first name, last name and ZIP?",
    ),
    "order_id": (
        lambda m: "Sure - which order would you like cancelled?",
        lambda m: "Can you send me the order number?",
        lambda m: "What's the ID of that order?",
        lambda m: "Please let me know which order you mean, by its number.",
        lambda m: "Which order number is it?",
        lambda m: "Could you specify the order?",
    ),
    "reason": (
        lambda m: "May I know the reason for cancelling?",
        lambda m: "Could you tell me why you'd like to cancel?",
        lambda m: "What's the cancellation reason?",
        lambda m: "And the reason for cancelling is?",
        lambda m: "Why is the order being cancelled?",
        lambda m: "Please tell me the reason you want to cancel.",
    ),
    "address": (
        lambda m: "What is your new address?",
        lambda m: "Which address should I change it to?",
        lambda m: "Could you give me the address you want it delivered to?",
        lambda m: "Where should I have it sent?",
        lambda m: "Please share the updated shipping address.",
        lambda m: "What address do you want on the order now?",
    ),
    "payment": (
        lambda m: "Which payment method should I use?",
        lambda m: "How do you want to pay for this?",
        lambda m: "Which of your cards or accounts should be used?",
        lambda m: "Could you choose a payment method for this?",
        lambda m: "What payment method works for you?",
        lambda m: "Tell me which payment method you'd like.",
    ),
    "confirmation": (
        lambda m: f"To confirm, I will {m.group(1)} Is it okay to go ahead?",
        lambda m: f"I will {m.group(1)} Do you approve?",
        lambda m: f"My plan: {m.group(1)} Should I proceed?",
        lambda m: [f"Here's the summary: {m.group(1)}", "Shall I proceed?"],
        lambda m: f"I'll {m.group(1)} Are you okay with that?",
        lambda m: f"I'm about to {m.group(1)} Please confirm.",
    ),
    "unavailable": (
        lambda m: f"I'm sorry, but the {m.group(1)} is out of stock.",
        lambda m: f"The {m.group(1)} is not available for purchase right now.",
        lambda m: f"It seems the {m.group(1)} isn't available.",
        lambda m: f"Unfortunately, the {m.group(1)} is sold out at the moment.",
        lambda m: f"We currently don't have the {m.group(1)} in stock.",
        lambda m: f"The {m.group(1)} is no longer offered.",
    ),
    "balance": (
        lambda m: f"Your gift card balance ({m.group(2)}) is too low for the {m.group(1)} price difference.",
        lambda m: f"The price difference is {m.group(1)}, but there's only {m.group(2)} on your gift card.",
        lambda m: f"I'm afraid your gift card can't cover the {m.group(1)} difference; it has {m.group(2)}.",
        lambda m: (
            f"The gift card only holds {m.group(2)}, which isn't enough for the {m.group(1)} difference."
        ),
        lambda m: f"The difference of {m.group(1)} is larger than your gift card balance of {m.group(2)}.",
        lambda m: f"Your gift card has {m.group(2)} - not enough to pay the {m.group(1)} price difference.",
    ),
    "not_found": (
        lambda m: f"I can't locate order {m.group(1)}. Do you remember anything else about it?",
        lambda m: f"Order {m.group(1)} was not found in our system. What items were in it?",
        lambda m: f"There's no order {m.group(1)} on file. Could you tell me more about the order?",
        lambda m: f"I searched for {m.group(1)} but found nothing. What did the order contain?",
        lambda m: f"It looks like {m.group(1)} isn't a valid order. What else can you tell me?",
        lambda m: f"{m.group(1)} didn't match any order. Can you describe what you bought?",
    ),
}


# ---- rounds five and six (issue 27, third pass) ------------------------------------------------------------
# Written together, before the reader's failures on earlier rounds were looked at, in several authors' styles:
# terse, polite-verbose, slots named by synonyms, several slots in one question, confirmations that restate
# the oracle's proposal in another order or format (bullet lists, markdown, the order id without "#", the
# address over several lines). Round five was measured once and then used to fix the reader; round six was
# not looked at until the fixes were done and was measured once at the end.
_CANCEL = re.compile(r"cancel order (#W\d+) \(reason: (.*?)\); (\$[\d,.]+) will be refunded to the original")
_ADDRESS = re.compile(r"change the shipping address of order (#W\d+) to (.*)\.$")
_CHANGE = re.compile(
    r"(modify|request an exchange in) order (#W\d+): items (.*)\. The price difference of (\$[\d,.]+) "
    r"will be (charged to|refunded to) (\S+)\.$"
)
_RETURN = re.compile(
    r"request a return of items (.*) of order (#W\d+); the refund of (\$[\d,.]+) goes to (\S+)\.$"
)


@dataclass(frozen=True)
class Plan:
    """The oracle's proposal taken apart, so a wording can restate it in its own order and format."""

    kind: str  # cancel | address | modify | exchange | return
    order: str
    details: dict[str, str]

    def swaps(self) -> str:
        pairs = [p.split(" -> ") for p in self.details["items"].split("; ")]
        return " and ".join(f"item {old} for item {new}" for old, new in pairs)

    def address_parts(self) -> tuple[str, str, str, str, str]:
        parts = self.details["address"].split(", ")
        state, zip_code = parts[-2].split(" ")
        return ", ".join(parts[:-3]), parts[-3], state, zip_code, parts[-1]


def plan(m: re.Match[str]) -> Plan:
    text = m.group(1)
    if found := _CANCEL.search(text):
        return Plan("cancel", found[1], {"reason": found[2], "amount": found[3]})
    if found := _ADDRESS.search(text):
        return Plan("address", found[1], {"address": found[2]})
    if found := _CHANGE.search(text):
        kind = "modify" if found[1] == "modify" else "exchange"
        direction = "charged to" if found[5] == "charged to" else "refunded to"
        return Plan(
            kind,
            found[2],
            {"items": found[3], "amount": found[4], "direction": direction, "method": found[6]},
        )
    if found := _RETURN.search(text):
        return Plan("return", found[2], {"items": found[1], "amount": found[3], "method": found[4]})
    raise ValueError(f"unknown proposal: {text}")


def _terse(m: re.Match[str]) -> str:
    p, d = plan(m), plan(m).details
    if p.kind == "cancel":
        return f"Cancel {p.order}, reason {d['reason']}, refund {d['amount']} to original payment. Confirm?"
    if p.kind == "address":
        return f"Ship {p.order} to {d['address']}. Confirm?"
    if p.kind in ("modify", "exchange"):
        verb = "Modify" if p.kind == "modify" else "Exchange"
        return f"{verb} {p.order}: {d['items']}; {d['amount']} {d['direction']} {d['method']}. Confirm?"
    return f"Return {d['items']} from {p.order}, {d['amount']} refunded to {d['method']}. Confirm?"


def _reordered(m: re.Match[str]) -> str:
    p, d = plan(m), plan(m).details
    if p.kind == "cancel":
        return (
            f"I'll refund {d['amount']} to your original payment method and cancel order {p.order}, "
            f"reason: {d['reason']}. Is that OK?"
        )
    if p.kind == "address":
        return f"The new address {d['address']} will replace the shipping address on order {p.order}. Is that OK?"
    if p.kind in ("modify", "exchange"):
        verb = "swap" if p.kind == "modify" else "exchange"
        return (
            f"The {d['amount']} price difference will be {d['direction']} {d['method']} when I {verb} "
            f"{p.swaps()} in order {p.order}. Is that OK?"
        )
    return (
        f"{d['amount']} goes back to {d['method']} once I process the return of items {d['items']} from "
        f"order {p.order}. Is that OK?"
    )


def _bullets(m: re.Match[str], bold: bool = False) -> str:
    p, d = plan(m), plan(m).details
    b = "**" if bold else ""
    rows = [f"{b}Order:{b} {p.order}"]
    if p.kind == "cancel":
        rows += [f"{b}Action:{b} cancel", f"{b}Reason:{b} {d['reason']}"]
        rows.append(f"{b}Refund:{b} {d['amount']} to the original payment method")
    elif p.kind == "address":
        street, city, state, zip_code, country = p.address_parts()
        rows += [f"{b}Action:{b} change the shipping address", f"{b}New address:{b} {street}, {city}"]
        rows += [f"{b}State / ZIP:{b} {state} {zip_code}", f"{b}Country:{b} {country}"]
    elif p.kind in ("modify", "exchange"):
        action = "modify items" if p.kind == "modify" else "exchange items"
        rows += [f"{b}Action:{b} {action}", f"{b}Items:{b} {d['items']}"]
        rows.append(f"{b}Price difference:{b} {d['amount']}, {d['direction']} {d['method']}")
    else:
        rows += [f"{b}Action:{b} return", f"{b}Items:{b} {d['items']}"]
        rows.append(f"{b}Refund:{b} {d['amount']} to {d['method']}")
    return "Here are the details:\n" + "\n".join(f"- {row}" for row in rows)


def _no_hash(m: re.Match[str]) -> str:
    p = plan(m)
    return m.group(1).replace(p.order, f"order number {p.order[1:]}").replace("order order", "order") + " OK?"


def _multiline(m: re.Match[str]) -> str:
    p, d = plan(m), plan(m).details
    if p.kind == "address":
        street, city, state, zip_code, country = p.address_parts()
        return (
            f"I'll update the delivery address of {p.order} to:\n{street}\n{city}, {state} {zip_code}\n{country}\n"
            "Is this correct?"
        )
    if p.kind == "cancel":
        return f"Order {p.order} will be cancelled ({d['reason']}) and {d['amount']} refunded. Correct?"
    if p.kind in ("modify", "exchange"):
        return (
            f"For order {p.order} I'll {'change' if p.kind == 'modify' else 'exchange'} {p.swaps()}; "
            f"{d['amount']} {d['direction']} {d['method']}. Is this correct?"
        )
    return f"Return of {d['items']} (order {p.order}): {d['amount']} back to {d['method']}. Is this correct?"


def _short(m: re.Match[str]) -> str:
    """The proposal in a few words, for "OK to ...?" wordings."""
    p, d = plan(m), plan(m).details
    if p.kind == "cancel":
        return f"cancel {p.order} ({d['reason']}), refunding {d['amount']} to the original payment method"
    if p.kind == "address":
        return f"change the shipping address of {p.order} to {d['address']}"
    if p.kind in ("modify", "exchange"):
        verb = "modify" if p.kind == "modify" else "exchange"
        return f"{verb} {p.order} ({d['items']}) with {d['amount']} {d['direction']} {d['method']}"
    return f"return {d['items']} from {p.order} and refund {d['amount']} to {d['method']}"


def _bare(m: re.Match[str]) -> str:
    return m.group(1).rstrip(".")


FRESH_5: dict[str, tuple[Wording, ...]] = {
    "email": (
        lambda m: "Email address?",
        lambda m: (
            "Hello! Thanks so much for reaching out. I'd be more than happy to look into this for you. To locate "
            "your account, could you kindly provide the email address associated with it?"
        ),
        lambda m: "What's the contact email on the account?",
        lambda m: "Could you give me your email address, or your full name and zip code if you'd rather?",
        lambda m: "I need to authenticate you first: please send your account email.",
        lambda m: "What e-mail did you use to register?",
        lambda m: "Which email is your account under? That's how I'll find you.",
        lambda m: (
            "To look you up I'll need either the email on your account or your name plus ZIP code. Which can "
            "you give me?"
        ),
    ),
    "name_zip": (
        lambda m: "Not found. Name and zip?",
        lambda m: (
            "I'm so sorry, but I wasn't able to locate any account associated with that email address. Would "
            "you be so kind as to provide your full name together with the ZIP code of your address, so that I "
            "can try to find you that way?"
        ),
        lambda m: "That email returned nothing. What's your first name, last name and postcode?",
        lambda m: "No account matches. Let me try another way: your full name and zip code?",
        lambda m: "The system has no record of that email. I'll need your name and the zip code on file.",
        lambda m: "Hmm, nothing there. Could you tell me the name on the account and its zip code?",
        lambda m: "That email isn't found. Can you give me your name and your ZIP, please?",
        lambda m: (
            "Unfortunately that e-mail isn't associated with any account. Could you share your first and last "
            "names as well as your zip?"
        ),
    ),
    "order_id": (
        lambda m: "Order number?",
        lambda m: "Which order?",
        lambda m: (
            "I'd be happy to take care of that cancellation for you. Could you please let me know the order "
            "number (it should begin with #W) so I can look it up?"
        ),
        lambda m: "What's the order ID you'd like me to cancel?",
        lambda m: "Could you confirm the order number for me?",
        lambda m: "Which of your orders is it? If you have the number, that's easiest.",
        lambda m: "Do you know the number of the order?",
        lambda m: "To proceed I need the order's ID - could you provide it?",
    ),
    "reason": (
        lambda m: "Reason?",
        lambda m: "Why cancel?",
        lambda m: (
            "Thank you for that. Before I can proceed with the cancellation, our policy requires me to record "
            "a reason. Could you tell me why you'd like to cancel it?"
        ),
        lambda m: "Is the order no longer needed, or was it placed by mistake?",
        lambda m: f"What's your reason for wanting to cancel order {m.group(1)}?",
        lambda m: "May I ask what the reason is?",
        lambda m: "Could you let me know why you no longer want this order?",
        lambda m: "What's the cancellation for - no longer needed or a mistake?",
    ),
    "address": (
        lambda m: "New address?",
        lambda m: "Where should it ship to?",
        lambda m: (
            "Thanks for letting me know about your move! I can certainly update the shipping address on that "
            "order. Could you please provide the full new address, including street, city, state, ZIP code "
            "and country?"
        ),
        lambda m: "What's the street, city, state and zip of the new address?",
        lambda m: "Which address are you moving the delivery to?",
        lambda m: "Could you tell me where you live now?",
        lambda m: f"What's the new address I should put on order {m.group(1)}?",
        lambda m: "Please let me have your new shipping details.",
    ),
    "payment": (
        lambda m: "Payment method?",
        lambda m: "Card, PayPal, or gift card?",
        lambda m: (
            "Certainly. Just one more detail before I go ahead: which of the payment methods on your account "
            "would you like me to use for this?"
        ),
        lambda m: "Which payment method should I use - the original one, or a different one?",
        lambda m: "How would you like to settle this?",
        lambda m: "Which account should I bill or refund?",
        lambda m: "What payment source should I use?",
        lambda m: "Which form of payment do you want to use?",
    ),
    "confirmation": (
        _terse,
        lambda m: (
            "Thank you for your patience. Before I make any changes, I'd like to make sure everything is "
            f"right. Here is what I'm going to do: {m.group(1)} Could you please confirm that you'd like me "
            "to go ahead?"
        ),
        _reordered,
        lambda m: [_reordered(m).removesuffix(" Is that OK?"), "Do I have your permission to go ahead?"],
        lambda m: f"Can you confirm you'd like me to {_bare(m)}?",
        _no_hash,
        lambda m: _bullets(m) + "\nShall I proceed?",
        lambda m: f"If you say yes, I'll {m.group(1)} Go ahead?",
    ),
    "unavailable": (
        lambda m: f"The {m.group(1)} - out of stock.",
        lambda m: (
            "I've checked the product catalogue carefully, and I'm really sorry to say that the "
            f"{m.group(1)} is currently not available for purchase."
        ),
        lambda m: f"The {m.group(1)} is not available anymore.",
        lambda m: f"No {m.group(1)} in stock right now, I'm afraid.",
        lambda m: f"That variant (the {m.group(1)}) is unavailable at this time.",
        lambda m: f"The {m.group(1)} you asked for is out of stock, unfortunately.",
        lambda m: f"I can't offer the {m.group(1)}; it's not currently in stock.",
        lambda m: f"The {m.group(1)} is currently out of stock and can't be selected.",
    ),
    "balance": (
        lambda m: f"Gift card: {m.group(2)}. Difference: {m.group(1)}. Not enough.",
        lambda m: (
            f"I've looked into this carefully. The price difference for this change comes to {m.group(1)}, "
            f"and unfortunately the balance remaining on your gift card is only {m.group(2)}, so I'm afraid "
            "it won't be able to cover the full amount."
        ),
        lambda m: (
            f"Your gift card has {m.group(2)} left but the difference is {m.group(1)}, so it can't cover it."
        ),
        lambda m: f"The gift card won't work: it has {m.group(2)} and you'd need {m.group(1)}.",
        lambda m: f"Insufficient gift card balance: {m.group(2)} available, {m.group(1)} required.",
        lambda m: f"The {m.group(1)} difference is more than what's on your gift card ({m.group(2)}).",
        lambda m: (
            f"Only {m.group(2)} remains on the gift card, which is less than the {m.group(1)} price difference."
        ),
        lambda m: (
            f"I can't charge the {m.group(1)} difference to the gift card - its balance is just {m.group(2)}."
        ),
    ),
    "not_found": (
        lambda m: f"{m.group(1)}: not found. What was in it?",
        lambda m: (
            f"I'm very sorry, but I searched our system for order {m.group(1)} and couldn't find it. Could you "
            "please tell me anything else you remember about the order, such as an item that was in it?"
        ),
        lambda m: f"No order {m.group(1)} exists. Which product did you buy in that order?",
        lambda m: f"Order {m.group(1)} came back as not found. Do you recall anything that was in it?",
        lambda m: (
            f"That order number, {m.group(1)}, doesn't match any of our orders. Let me know what you ordered "
            "and I'll find it."
        ),
        lambda m: f"I'm not seeing {m.group(1)} anywhere. What did the order include?",
        lambda m: f"{m.group(1)} couldn't be found - maybe the number's off. What items were in the order?",
        lambda m: f"The system says {m.group(1)} does not exist. Could you describe what's in the order?",
    ),
}


FRESH_6: dict[str, tuple[Wording, ...]] = {
    "email": (
        lambda m: "Can I get your email?",
        lambda m: (
            "Good afternoon, and thank you for contacting us. I'll gladly help you with this request. So that "
            "I can pull up the correct account, would you mind sharing the email address you have registered "
            "with us?"
        ),
        lambda m: "Please tell me the email address on your profile.",
        lambda m: "What email should I look you up by?",
        lambda m: "First, your account's e-mail address - what is it?",
        lambda m: (
            "I'd like to verify your account. Could you provide your email, or alternatively your name and ZIP code?"
        ),
        lambda m: "Email on the account, please.",
        lambda m: "Which email address is associated with your orders?",
    ),
    "name_zip": (
        lambda m: "No match. Full name and ZIP?",
        lambda m: (
            "I'm afraid I couldn't find any account registered under that email address. No worries, though - "
            "if you could give me your first and last name along with your ZIP code, I'll look you up that way."
        ),
        lambda m: "That email gives me nothing. What's the name and zip code on your account?",
        lambda m: "I can't find that e-mail. Could I have your name and ZIP code?",
        lambda m: "No account with that address, sorry. Your first name, surname and postal code, please.",
        lambda m: "Our records don't show that email. Could you tell me your full name and your zip?",
        lambda m: "That didn't bring anything up. Let me know your name and ZIP code and I'll search again.",
        lambda m: "The email lookup came back empty. What name and zip code should I search for?",
    ),
    "order_id": (
        lambda m: "Which order number?",
        lambda m: "What's the #W number of the order?",
        lambda m: (
            "Of course. So that I cancel the right one, could you let me know the order number you'd like "
            "cancelled?"
        ),
        lambda m: "Can you tell me the order ID?",
        lambda m: "Which order do you want me to cancel?",
        lambda m: "Please provide the order number.",
        lambda m: "What order is it - do you have its ID?",
        lambda m: "I'll need to know which order. What's the number?",
    ),
    "reason": (
        lambda m: "And why are you cancelling?",
        lambda m: (
            "Could you please let me know the reason you'd like to cancel this order? I need it for our records."
        ),
        lambda m: "Why do you want it cancelled?",
        lambda m: "What's the reason behind cancelling?",
        lambda m: "Was this ordered by mistake, or is it simply no longer needed?",
        lambda m: "Reason for cancelling?",
        lambda m: "Can you give me a reason for the cancellation?",
        lambda m: f"Why would you like {m.group(1)} cancelled?",
    ),
    "address": (
        lambda m: "What's the new address?",
        lambda m: "Where would you like it shipped instead?",
        lambda m: (
            "I'd be happy to update that for you. Could you please give me the complete new address - street, "
            "city, state, ZIP code and country?"
        ),
        lambda m: "What address should I update the order to?",
        lambda m: f"Where should order {m.group(1)} go now?",
        lambda m: "Can you provide your new shipping address?",
        lambda m: "Let me know the full new address, please.",
        lambda m: "Which address should the order be delivered to now?",
    ),
    "payment": (
        lambda m: "Which payment method?",
        lambda m: "How would you like to pay or be refunded?",
        lambda m: (
            "Certainly. Could you let me know which payment method on your account you'd like me to use for this?"
        ),
        lambda m: "Which card or PayPal account should I use?",
        lambda m: "What should I use for payment?",
        lambda m: "Which of your payment methods do you prefer?",
        lambda m: "Would you like to use a card, PayPal or a gift card for this?",
        lambda m: "What payment method should this go through?",
    ),
    "confirmation": (
        lambda m: f"OK to {_short(m)}?",
        lambda m: (
            "Great, thank you. I've reviewed the order and here's exactly what I'll do: "
            f"{m.group(1)} Please let me know if you'd like me to proceed (yes/no)."
        ),
        _multiline,
        lambda m: _bullets(m, bold=True) + "\n\nWould you like me to proceed?",
        lambda m: [f"Proposed change: {_short(m)}.", "Would you like me to make this change?"],
        lambda m: f"Shall I {_bare(m)}?",
        lambda m: f"I'd like to {m.group(1)} Is that all right with you?",
        lambda m: f"Confirming the details: {_short(m)}. Yes or no?",
    ),
    "unavailable": (
        lambda m: f"The {m.group(1)} is out of stock.",
        lambda m: f"Sorry, the {m.group(1)} is not available right now.",
        lambda m: (
            f"I looked it up, and unfortunately the {m.group(1)} is currently out of stock, so I can't switch "
            "to it."
        ),
        lambda m: f"We don't have the {m.group(1)} at the moment.",
        lambda m: f"The {m.group(1)} isn't currently available.",
        lambda m: f"That option - the {m.group(1)} - is sold out.",
        lambda m: f"I'm afraid there's no {m.group(1)} available.",
        lambda m: f"The {m.group(1)} cannot be purchased at this time.",
    ),
    "balance": (
        lambda m: (
            f"Your gift card only has {m.group(2)}; the difference is {m.group(1)}, so it can't cover it."
        ),
        lambda m: f"The gift card's balance of {m.group(2)} isn't enough for the {m.group(1)} difference.",
        lambda m: (
            f"I'm sorry, but the price difference of {m.group(1)} exceeds the {m.group(2)} left on your gift "
            "card, so I can't use it for this."
        ),
        lambda m: f"The difference ({m.group(1)}) is higher than your gift card balance ({m.group(2)}).",
        lambda m: f"Not enough on the gift card: {m.group(2)} versus {m.group(1)} needed.",
        lambda m: f"Your gift card can only cover {m.group(2)} of the {m.group(1)} difference.",
        lambda m: (
            f"The gift card has {m.group(2)}, which won't be enough to pay the {m.group(1)} price difference."
        ),
        lambda m: f"With a difference of {m.group(1)}, the {m.group(2)} on your gift card falls short.",
    ),
    "not_found": (
        lambda m: f"I couldn't find {m.group(1)}. What was in the order?",
        lambda m: f"Order {m.group(1)} doesn't exist in our system. Can you tell me anything else about it?",
        lambda m: (
            f"I'm sorry, I searched for order {m.group(1)} but there's no such order. Could you describe it for "
            "me - what did you buy?"
        ),
        lambda m: f"There's no order numbered {m.group(1)}. Do you remember an item from it?",
        lambda m: f"Nothing comes up for {m.group(1)}. What else do you remember?",
        lambda m: f"{m.group(1)} isn't a valid order number. Which items did you order?",
        lambda m: f"I can't seem to locate order {m.group(1)}. Could you tell me what it contained?",
        lambda m: f"No results for {m.group(1)}. Let me know what was in the order and I'll search that way.",
    ),
}


# ---- round seven (fresh): written after rounds five and six had been measured and their classes fixed; never
# used for fixing. Round six, written with round five, became a fixing round once it had been measured.
def _numbered(m: re.Match[str]) -> str:
    rows = _bullets(m).split("\n")[1:]
    return "\n".join(f"{i}. {row[2:]}" for i, row in enumerate(rows, 1)) + "\nPlease confirm."


def _amount_first(m: re.Match[str]) -> str:
    p, d = plan(m), plan(m).details
    if p.kind == "cancel":
        return (
            f"{d['amount']} will be refunded to your original payment method once I cancel {p.order} "
            f"({d['reason']}). Should I go ahead?"
        )
    if p.kind == "address":
        street, city, state, zip_code, country = p.address_parts()
        return (
            f"ZIP {zip_code}, {city}, {state}, {country} - {street}: that's where order {p.order} will ship "
            "from now on. Should I go ahead?"
        )
    if p.kind in ("modify", "exchange"):
        return (
            f"{d['amount']} will be {d['direction']} {d['method']} for the {p.kind} of {p.swaps()} in order "
            f"{p.order}. Should I go ahead?"
        )
    return (
        f"{d['amount']} will be refunded to {d['method']} for returning items {d['items']} from order "
        f"{p.order}. Should I go ahead?"
    )


FRESH_7: dict[str, tuple[Wording, ...]] = {
    "email": (
        lambda m: "Your email?",
        lambda m: (
            "Hi! I'm sorry to hear about the trouble. I'll be glad to sort this out. Could you first tell me "
            "which email address your account is registered under, so I can verify it's you?"
        ),
        lambda m: "Could you provide the e-mail linked to your customer account?",
        lambda m: "What's your account e-mail? Alternatively, your name and ZIP code work too.",
        lambda m: "May I have the email you use for your orders?",
        lambda m: "Let's start with verification: the email address, please.",
        lambda m: "What email did you sign up with?",
        lambda m: "I'll need the email address on your account to continue - what is it?",
    ),
    "name_zip": (
        lambda m: "Nothing under that email. Name + ZIP?",
        lambda m: (
            "Thank you for that. Unfortunately, I wasn't able to find an account with that email address. To "
            "try another way, could you please share your first name, last name, and the ZIP code on your "
            "account?"
        ),
        lambda m: "That e-mail didn't match. What's your full name and postal code?",
        lambda m: (
            "I can't locate an account with that email. Could you tell me your name and zip code instead?"
        ),
        lambda m: (
            "No user found with that email. Please give me your first and last name plus your ZIP code."
        ),
        lambda m: "That email doesn't seem to be registered. May I have your full name and zip code?",
        lambda m: "Hmm, no luck. Let's try your name and ZIP code - what are they?",
        lambda m: (
            "The email you gave isn't in our system. Could I get your name and the ZIP code of your address?"
        ),
    ),
    "order_id": (
        lambda m: "Order ID?",
        lambda m: (
            "Sure thing. Could you please tell me the order number of the order you'd like to cancel? It begins "
            "with #W."
        ),
        lambda m: "What's the number on the order?",
        lambda m: "Which order should be cancelled? Please share its ID.",
        lambda m: "Can you let me know the order number?",
        lambda m: "Do you happen to have the order ID?",
        lambda m: "Which order is this regarding?",
        lambda m: "I'll need the order ID to look into it - could you send it?",
    ),
    "reason": (
        lambda m: "Why?",
        lambda m: (
            "Understood. Our system asks for a cancellation reason - could you tell me whether it's no longer "
            "needed or was ordered by mistake?"
        ),
        lambda m: "What's the reason you'd like to cancel?",
        lambda m: "May I ask the reason for the cancellation?",
        lambda m: "Could you tell me why you're cancelling this order?",
        lambda m: "Why do you no longer want it?",
        lambda m: "What is your reason for cancelling?",
        lambda m: f"Before I cancel {m.group(1)}: what's the reason?",
    ),
    "address": (
        lambda m: "New shipping address?",
        lambda m: (
            "Of course! I'd be glad to update it. Please provide your new address in full - street, apartment "
            "or suite if any, city, state, ZIP code and country."
        ),
        lambda m: "What's your new street address?",
        lambda m: "Where should the package be delivered now?",
        lambda m: f"Which address should {m.group(1)} ship to?",
        lambda m: "Could you tell me the new address you'd like to use?",
        lambda m: "What is the updated address?",
        lambda m: "Where have you moved to?",
    ),
    "payment": (
        lambda m: "Which method?",
        lambda m: (
            "Thanks! Lastly, could you let me know which of your saved payment methods you'd like me to use for "
            "this?"
        ),
        lambda m: "What payment method do you want to use?",
        lambda m: "Which card or account would you like to use?",
        lambda m: "How do you want the difference handled - which payment method?",
        lambda m: "Which payment method would you prefer?",
        lambda m: "Should I use your credit card, PayPal, or a gift card?",
        lambda m: "What would you like to pay with?",
    ),
    "confirmation": (
        lambda m: f"{_short(m)} - confirm?",
        lambda m: (
            "Thank you for confirming those details. To make sure we're on the same page, here is the action "
            f"I'm about to take: {m.group(1)} Would you like me to go ahead with this?"
        ),
        _numbered,
        lambda m: [f"Here's what I'd do: {_short(m)}.", "Okay to go ahead?"],
        lambda m: f"Do you want me to {_bare(m)}?",
        lambda m: f"Please confirm: {_short(m)}.",
        _amount_first,
        lambda m: f"So I'll {m.group(1)} Sound good?",
    ),
    "unavailable": (
        lambda m: f"{m.group(1)}: unavailable.",
        lambda m: (
            "I'm sorry to let you know that, having checked the product details, the "
            f"{m.group(1)} is currently out of stock, so I'm unable to make that change."
        ),
        lambda m: f"The {m.group(1)} isn't in stock right now.",
        lambda m: f"We're out of the {m.group(1)}.",
        lambda m: f"Unfortunately, the {m.group(1)} is listed as unavailable.",
        lambda m: f"The {m.group(1)} is not available at the moment.",
        lambda m: f"It turns out the {m.group(1)} is sold out.",
        lambda m: f"We can't get the {m.group(1)} at the moment.",
    ),
    "balance": (
        lambda m: f"Gift card balance {m.group(2)}, difference {m.group(1)} - not enough.",
        lambda m: (
            f"I've checked your gift card, and I'm sorry to say its balance of {m.group(2)} isn't sufficient "
            f"to cover the price difference of {m.group(1)}."
        ),
        lambda m: f"Your gift card doesn't have enough funds: {m.group(2)} against {m.group(1)}.",
        lambda m: f"The gift card can't cover the {m.group(1)} difference since its balance is {m.group(2)}.",
        lambda m: f"The price difference ({m.group(1)}) is more than your gift card balance of {m.group(2)}.",
        lambda m: f"Your gift card's {m.group(2)} won't be enough for the {m.group(1)} difference.",
        lambda m: f"The gift card only has {m.group(2)}, and the difference is {m.group(1)}.",
        lambda m: f"There isn't enough on your gift card ({m.group(2)}) to pay the {m.group(1)} difference.",
    ),
    "not_found": (
        lambda m: f"{m.group(1)} - no such order. What was in it?",
        lambda m: (
            f"I'm sorry, but I couldn't locate any order with the number {m.group(1)}. Could you tell me a bit "
            "more about it, for example one of the items you ordered?"
        ),
        lambda m: f"Order {m.group(1)} isn't in our system. What else do you remember?",
        lambda m: f"I'm not finding {m.group(1)}. Do you remember what you bought?",
        lambda m: f"There's no order {m.group(1)}. Which item was in it?",
        lambda m: f"That order number doesn't exist ({m.group(1)}). Can you describe the order?",
        lambda m: f"{m.group(1)} returned nothing. What did you order?",
        lambda m: f"Unable to find order {m.group(1)}. Let me know anything else you remember about it.",
    ),
}


# ---- round eight (fresh): written after round seven had been measured once and its classes fixed; never used
# for fixing. Chat-style (lower case, "pls", "w/"), UK call-centre, markdown summaries.
FRESH_8: dict[str, tuple[Wording, ...]] = {
    "email": (
        lambda m: "pls share your email",
        lambda m: (
            "Thank you for contacting customer support! I'm here to help you with this. For security purposes, "
            "I first need to verify your identity. Could you please provide the email address associated with "
            "your account?"
        ),
        lambda m: "Kindly share the e-mail address registered to your account.",
        lambda m: "Which email address did you create your account with?",
        lambda m: "Can you confirm the email on your account?",
        lambda m: "To authenticate you, I'll require your email address.",
        lambda m: "Hello, what's the email for your account, please?",
        lambda m: "Could you provide either your email address or your full name and ZIP code?",
    ),
    "name_zip": (
        lambda m: "no account w/ that email. name & zip?",
        lambda m: (
            "I do apologise, but I'm unable to find an account registered to that email address. Might I ask "
            "for your full name and postcode instead, so that I can search by those details?"
        ),
        lambda m: (
            "That email isn't registered. Could you give me the first and last name on the account, plus the "
            "zip code?"
        ),
        lambda m: "I couldn't find you by email. What's your name and ZIP code?",
        lambda m: "There is no account for that e-mail address. Please tell me your full name and your zip.",
        lambda m: "Sorry, no hit on that email. Can I have your name and postal code?",
        lambda m: "The email doesn't match our records. Your full name and ZIP, please?",
        lambda m: "That didn't work, I'm afraid. Could you share the name and zip code on your account?",
    ),
    "order_id": (
        lambda m: "order #?",
        lambda m: (
            "Certainly, I can help you cancel an order. Could you please provide the order ID (it looks like "
            "#W followed by seven digits)?"
        ),
        lambda m: "Could you share the ID of the order?",
        lambda m: "Which order would you like me to cancel? The order number, please.",
        lambda m: "What's the order number you want cancelled?",
        lambda m: "Do you have the order reference handy?",
        lambda m: "Which of your orders needs cancelling?",
        lambda m: "Please send the order number.",
    ),
    "reason": (
        lambda m: "reason for cancelling?",
        lambda m: (
            "Thanks for that. Could you please let me know the reason for the cancellation - is the item no "
            "longer needed, or was the order placed by mistake?"
        ),
        lambda m: "Why are you looking to cancel?",
        lambda m: "What's prompting the cancellation?",
        lambda m: "Can I ask why you want to cancel?",
        lambda m: "Please tell me the reason for cancelling.",
        lambda m: "Is there a reason you'd like to cancel it?",
        lambda m: "And what's the reason for cancelling the order?",
    ),
    "address": (
        lambda m: "new address pls",
        lambda m: (
            "Congratulations on the move! I can update the shipping address for that order. Please provide the "
            "complete new address, including street address, city, state, ZIP code and country."
        ),
        lambda m: "What address should we send it to?",
        lambda m: "Could you let me know the address you'd like the order shipped to?",
        lambda m: "What's the delivery address now?",
        lambda m: "Can you tell me your new address?",
        lambda m: "Where do you want it delivered?",
        lambda m: f"What should the shipping address on {m.group(1)} be?",
    ),
    "payment": (
        lambda m: "payment method pls?",
        lambda m: (
            "Thank you! One last thing: which payment method on your account would you like to use for this?"
        ),
        lambda m: "Which card would you like to use?",
        lambda m: "What payment method should I apply?",
        lambda m: "How would you like to pay for the difference?",
        lambda m: "Which of your payment options should I use?",
        lambda m: "Could you tell me which payment method to use?",
        lambda m: "Would you prefer your card, PayPal or gift card for this?",
    ),
    "confirmation": (
        lambda m: f"confirm: {_short(m)}?",
        lambda m: (
            "Thank you for your patience! Here's a summary of the changes:\n\n"
            + _bullets(m, bold=True)
            + "\n\nPlease reply **yes** to confirm or **no** to stop here."
        ),
        lambda m: f"Just so we're clear, I'm going to {_bare(m)}. Okay?",
        lambda m: [_bullets(m), "Is everything correct?"],
        lambda m: f"Would you like me to {_bare(m)}?",
        lambda m: "Let me confirm: " + _reordered(m).replace(" Is that OK?", " Right?"),
        lambda m: f"I'll {m.group(1)} Can I proceed?",
        lambda m: f"Please reply yes to {_short(m)}.",
    ),
    "unavailable": (
        lambda m: f"{m.group(1)} - sorry, out of stock",
        lambda m: (
            f"I've checked the catalogue and regret to inform you that the {m.group(1)} is currently "
            "unavailable, so I can't make that change."
        ),
        lambda m: f"The {m.group(1)} is not in stock at the moment.",
        lambda m: f"The {m.group(1)} is no longer available.",
        lambda m: f"Sorry, that one's unavailable: the {m.group(1)}.",
        lambda m: f"We don't currently stock the {m.group(1)}.",
        lambda m: f"The {m.group(1)} appears to be out of stock.",
        lambda m: f"Sadly the {m.group(1)} can't be ordered at the moment.",
    ),
    "balance": (
        lambda m: f"gift card only has {m.group(2)}, diff is {m.group(1)} - not enough",
        lambda m: (
            f"I'm afraid your gift card balance of {m.group(2)} is insufficient to cover the price difference "
            f"of {m.group(1)}, so I won't be able to use it."
        ),
        lambda m: (
            f"The gift card has a balance of {m.group(2)}, which doesn't cover the {m.group(1)} difference."
        ),
        lambda m: f"The difference ({m.group(1)}) exceeds the gift card's balance ({m.group(2)}).",
        lambda m: (
            f"Your gift card won't cover it: the difference is {m.group(1)} and the balance is {m.group(2)}."
        ),
        lambda m: f"The {m.group(2)} on your gift card is less than the {m.group(1)} price difference.",
        lambda m: f"Unfortunately the gift card's {m.group(2)} isn't enough to pay {m.group(1)}.",
        lambda m: f"There's not enough money on the gift card: {m.group(2)} for a {m.group(1)} difference.",
    ),
    "not_found": (
        lambda m: f"can't find {m.group(1)}. what was in it?",
        lambda m: (
            f"I'm sorry for the inconvenience, but there's no record of order {m.group(1)} in our system. Could "
            "you please tell me what items were in that order so I can find it another way?"
        ),
        lambda m: f"I couldn't find order {m.group(1)}. Do you recall what you ordered?",
        lambda m: f"Order {m.group(1)} does not exist. What items did you buy?",
        lambda m: f"{m.group(1)} isn't showing up on my end. What else can you tell me about the order?",
        lambda m: f"There's no order under {m.group(1)}. What was in it?",
        lambda m: f"I wasn't able to find {m.group(1)}. Could you describe the order?",
        lambda m: f"No order matches {m.group(1)}. Anything else you remember?",
    ),
}


# ---- round nine (fresh): written after round eight had been measured once and its classes fixed; never used
# for fixing. Ten wordings per family (one miss costs 0.10, not 0.125): formal, non-native, small talk first,
# slots by rarer synonyms, several slots in one question.
def _colon_table(m: re.Match[str]) -> str:
    rows = _bullets(m).split("\n")[1:]
    return "Please review:\n" + "\n".join(row[2:] for row in rows) + "\nCan you confirm this is right?"


FRESH_9: dict[str, tuple[Wording, ...]] = {
    "email": (
        lambda m: "email pls",
        lambda m: (
            "Good day. In order to proceed with your request, I am required to authenticate your account. "
            "Would you kindly state the email address under which the account is held?"
        ),
        lambda m: "Please, you can tell me your email of the account?",
        lambda m: "Sure, I can look into that! What's your e-mail address?",
        lambda m: "Which email do you log in with?",
        lambda m: "Could you tell me the email, or if you don't remember it, your name and ZIP code?",
        lambda m: "I'd need the email address tied to your account first.",
        lambda m: "What's the email we have for you on file?",
        lambda m: "Can you send me your account email so I can find your orders?",
        lambda m: "To begin, please confirm your email address.",
    ),
    "name_zip": (
        lambda m: "email not found - name and zip pls",
        lambda m: (
            "Regrettably, no account could be located under the email address provided. Would you kindly supply "
            "your full name and the postal code of your address so that I may search by those instead?"
        ),
        lambda m: "This email is not in system. Please, you can give your name and zip code?",
        lambda m: (
            "Thanks! Hmm, that email doesn't bring anything up. What's your first and last name, and your ZIP?"
        ),
        lambda m: "No account under that e-mail. Which name and zip code is the account registered with?",
        lambda m: "I couldn't find that email. Could you tell me your full name and zip code, please?",
        lambda m: "That email isn't recognized. I'll need your name and ZIP code to look you up.",
        lambda m: "No results for that email. Could you give me your name along with the postal code?",
        lambda m: "I'm not finding that email. What are your first name, last name and zip code?",
        lambda m: "That email doesn't exist in our records; let me know your name and ZIP code instead.",
    ),
    "order_id": (
        lambda m: "order id pls",
        lambda m: (
            "I will be pleased to assist with the cancellation. Would you kindly provide the identification "
            "number of the order in question?"
        ),
        lambda m: "Please, which order number you want to cancel?",
        lambda m: "Sure, happy to help with that! What's the order number?",
        lambda m: "Can you tell me which order it is, by number?",
        lambda m: "Which order do you mean? Its number would be great.",
        lambda m: "I'll need the order number first.",
        lambda m: "Could you give me the #W number of that order?",
        lambda m: "What's the ID of the order you want cancelled?",
        lambda m: "Which purchase are we talking about - do you have the order number?",
    ),
    "reason": (
        lambda m: "reason pls",
        lambda m: (
            "Before the cancellation can be processed, I am required to record the reason for it. Would you "
            "kindly indicate the reason?"
        ),
        lambda m: "Please, why you want to cancel the order?",
        lambda m: "Sure, I can do that! Can I ask what the reason is?",
        lambda m: "What's the reason for this cancellation?",
        lambda m: "Why would you like to cancel - not needed any more, or a mistake?",
        lambda m: "Could you let me know the reason for cancelling?",
        lambda m: "And why do you want to cancel it?",
        lambda m: "I'll need a reason for cancelling - what is it?",
        lambda m: f"What's the reason you want to cancel {m.group(1)}?",
    ),
    "address": (
        lambda m: "new address?",
        lambda m: (
            "I would be glad to arrange that. Would you kindly provide the full new address to which the order "
            "should be shipped?"
        ),
        lambda m: "Please, what is the new address for shipping?",
        lambda m: "Sure, congrats on the new place! Where should we ship the order now?",
        lambda m: "What's your new address, with city, state and ZIP?",
        lambda m: "Where would you like the order sent?",
        lambda m: "Could you give me the address you moved to?",
        lambda m: "What's the new delivery address for this order?",
        lambda m: f"Which address should I put on {m.group(1)}?",
        lambda m: "Let me know your new address and I'll update the order.",
    ),
    "payment": (
        lambda m: "payment method?",
        lambda m: (
            "Would you kindly indicate which of the payment methods held on your account should be used for "
            "this transaction?"
        ),
        lambda m: "Please, which payment you want to use?",
        lambda m: "Got it! Which payment method would you like to use?",
        lambda m: "Which card or account should this go through?",
        lambda m: "How do you want to pay - card, PayPal or gift card?",
        lambda m: "Could you tell me your preferred payment method?",
        lambda m: "What should I use for the payment?",
        lambda m: "Which of your payment methods should I use?",
        lambda m: "Let me know which payment method you'd like.",
    ),
    "confirmation": (
        lambda m: f"{_short(m)}. ok?",
        lambda m: (
            "Before I proceed, I would like to set out the action for your approval: "
            f"{m.group(1)} Would you kindly confirm that I may proceed?"
        ),
        lambda m: f"Please, I will {_bare(m)}. Is it ok for you?",
        lambda m: f"Alright! So: {_short(m)}. Sound right?",
        _colon_table,
        lambda m: [f"The plan: {_short(m)}.", "Want me to go ahead?"],
        lambda m: f"Can I {_bare(m)}?",
        lambda m: f"I'd {_short(m)}. Shall I?",
        _amount_first,
        lambda m: f"Just to confirm - {_short(m)}. Correct?",
    ),
    "unavailable": (
        lambda m: f"{m.group(1)} out of stock sorry",
        lambda m: (
            f"I regret to inform you that the {m.group(1)} is not presently available, and therefore the "
            "requested change cannot be made."
        ),
        lambda m: f"Sorry, the {m.group(1)} is not available now.",
        lambda m: f"Ah, bad luck - the {m.group(1)} is out of stock.",
        lambda m: f"The {m.group(1)} is currently sold out.",
        lambda m: f"We no longer carry the {m.group(1)}.",
        lambda m: f"The {m.group(1)} isn't available to order at this time.",
        lambda m: f"I checked, and the {m.group(1)} is unavailable.",
        lambda m: f"Unfortunately there's no stock left of the {m.group(1)}.",
        lambda m: f"The {m.group(1)} is out of stock right now, I'm sorry.",
    ),
    "balance": (
        lambda m: f"gift card {m.group(2)} not enough for {m.group(1)} diff",
        lambda m: (
            f"I regret that the balance of your gift card, {m.group(2)}, is insufficient to settle the price "
            f"difference of {m.group(1)}."
        ),
        lambda m: (
            f"Sorry, your gift card have only {m.group(2)}, it is not enough for {m.group(1)} difference."
        ),
        lambda m: (
            f"Hmm, the gift card balance is {m.group(2)} - that won't cover the {m.group(1)} difference."
        ),
        lambda m: f"The price difference is {m.group(1)}, which exceeds your gift card's {m.group(2)}.",
        lambda m: f"Your gift card can't pay the {m.group(1)} difference; it only has {m.group(2)}.",
        lambda m: f"The gift card doesn't have enough: {m.group(2)} for a {m.group(1)} difference.",
        lambda m: f"Your {m.group(2)} gift card balance is not sufficient for the {m.group(1)} difference.",
        lambda m: f"The difference of {m.group(1)} is more than the gift card's balance of {m.group(2)}.",
        lambda m: f"The gift card falls short: it has {m.group(2)} and the difference is {m.group(1)}.",
    ),
    "not_found": (
        lambda m: f"{m.group(1)} not found, what was in the order?",
        lambda m: (
            f"I regret that no order with the number {m.group(1)} could be located in our system. Would you "
            "kindly describe the order, for instance an item it contained?"
        ),
        lambda m: f"Sorry, order {m.group(1)} is not existing in system. What items you ordered?",
        lambda m: f"Hmm, {m.group(1)} doesn't come up. What did you buy in that order?",
        lambda m: f"I can't find any order numbered {m.group(1)}. What else do you remember?",
        lambda m: f"There's no order {m.group(1)} in our records. Could you describe it?",
        lambda m: f"Order {m.group(1)} couldn't be found. What was in it?",
        lambda m: f"{m.group(1)} doesn't match any order. Do you remember any of the items?",
        lambda m: f"I was unable to find {m.group(1)}. Can you tell me more about that order?",
        lambda m: f"The order {m.group(1)} doesn't exist on our side. What did it contain?",
    ),
}


# ---- round ten (fresh, issue 52): written before the reader was touched for issue 52, the way varied human
# agents word things in plain words. Payment asks which decision is needed (where the money from a price
# difference comes from, where a refund should land) without naming a "payment method"; confirmations restate
# the plan in everyday terms and ask for the go-ahead in the many ways people do. Measured once before the fix.
def _money_question(m: re.Match[str], difference: str, refund: str) -> str:
    """The price-difference wording or the refund-destination wording, by the oracle's question."""
    return refund if "refund" in m.group(0) else difference


def _everyday(m: re.Match[str]) -> str:
    """The proposal as a person says it: the action first, the money last, ids as they are."""
    p, d = plan(m), plan(m).details
    if p.kind == "cancel":
        why = "you no longer need it" if "no longer" in d["reason"] else "it was ordered by mistake"
        return (
            f"I'll cancel order {p.order} since {why}, and the {d['amount']} goes back to the card or account "
            "you originally paid with"
        )
    if p.kind == "address":
        return f"I'll update order {p.order} so it ships to {d['address']} instead"
    if p.kind in ("modify", "exchange"):
        verb = "swap out" if p.kind == "modify" else "exchange"
        money = "you'll pay" if d["direction"] == "charged to" else "you'll get back"
        return f"I'll {verb} {p.swaps()} on order {p.order}; {money} {d['amount']} via {d['method']}"
    return (
        f"I'll set up the return of {d['items']} from order {p.order} and {d['amount']} goes to {d['method']}"
    )


FRESH_10: dict[str, tuple[Wording, ...]] = {
    "email": (
        lambda m: "Sure thing. What email do you have with us?",
        lambda m: "Hi there! Can I grab your email so I can pull up the account?",
        lambda m: "I'll just need to find you in the system first - what's your email?",
        lambda m: "Okay, let's start with the email you used when you set up the account.",
        lambda m: "Mind sending me your email address?",
        lambda m: "Happy to sort that out. Which email should I search for?",
        lambda m: "Before I can touch any orders I need to find your account. Email?",
        lambda m: "What email address are you using with us these days?",
        lambda m: "Could I get the email attached to your account?",
        lambda m: "No worries. What's the best email to find your account under?",
    ),
    "name_zip": (
        lambda m: "That email isn't bringing anything up. Can I try your name and zip code?",
        lambda m: "Hmm, no luck with that one. What's your first and last name, and your zip?",
        lambda m: "I can't see an account for that email. Could you give me your full name and ZIP instead?",
        lambda m: "Nothing under that email, sorry. Let's try your name and postal code.",
        lambda m: "That email doesn't seem to be on an account. What name and zip code would it be under?",
        lambda m: "No account with that one. Can you send your name plus the zip code?",
        lambda m: "I'm coming up empty on that email. Your full name and zip, please?",
        lambda m: "Doesn't look like that email is registered. Could I have your name and ZIP code?",
        lambda m: "That didn't find anything. What's your name and the zip code on your address?",
        lambda m: "Nope, nothing for that email. Give me your name and zip and I'll search that way.",
    ),
    "order_id": (
        lambda m: "Sure - which order are we cancelling? Do you have the number?",
        lambda m: "Got it. Can I grab the order number?",
        lambda m: "What's the number on the order you want to cancel?",
        lambda m: "Which one is it? The order number starts with #W.",
        lambda m: "Could you send me the order number?",
        lambda m: "Okay, what order number should I be looking at?",
        lambda m: "Do you happen to have the order ID on hand?",
        lambda m: "Which order did you want cancelled? The number is on your confirmation email.",
        lambda m: "Can you tell me the order number for that?",
        lambda m: "Which of your orders is it? I'll need its number.",
    ),
    "reason": (
        lambda m: "Okay. And why are you cancelling, if you don't mind?",
        lambda m: "Can I ask what the reason is?",
        lambda m: "Just so I can note it down - why do you want to cancel?",
        lambda m: "Is it that you don't need it anymore, or was it ordered by mistake?",
        lambda m: "What's the reason for cancelling?",
        lambda m: "Sure. Could you tell me why you'd like it cancelled?",
        lambda m: "I have to pick a reason in the system. Which one fits?",
        lambda m: "Any particular reason you want to cancel?",
        lambda m: "Why do you want to cancel it?",
        lambda m: "And the reason for the cancellation?",
    ),
    "address": (
        lambda m: "No problem. What's the new address?",
        lambda m: "Where should it go instead?",
        lambda m: "Okay, where would you like it delivered now?",
        lambda m: "What address should I change it to?",
        lambda m: "Sure, what's the address you want it shipped to?",
        lambda m: "Can you give me the full new address, zip code included?",
        lambda m: "Where are you living now? I'll put that on the order.",
        lambda m: "Send me the new address and I'll update it.",
        lambda m: "What should the delivery address be?",
        lambda m: "And where do you want the package to go?",
    ),
    "payment": (
        lambda m: _money_question(
            m,
            "The new one costs a bit more. How would you like to cover the extra?",
            "Where would you like your money back to?",
        ),
        lambda m: _money_question(
            m,
            "There's a price difference on this swap - what would you like to put it on?",
            "Do you want the refund on the card you paid with, or on a gift card?",
        ),
        lambda m: _money_question(
            m,
            "What should I do about the price difference?",
            "Where should the money go?",
        ),
        lambda m: _money_question(
            m,
            "The prices aren't the same, so there's a difference to settle up. What do you want to use?",
            "How would you like to get your money back?",
        ),
        lambda m: _money_question(
            m,
            "What would you like me to use for the difference?",
            "Where do you want the money sent?",
        ),
        lambda m: _money_question(
            m,
            "Which of your cards or accounts should the difference go on?",
            "Should that go back to the original payment, or onto a gift card?",
        ),
        lambda m: _money_question(
            m,
            "How do you want to handle the difference in price?",
            "Where would you like to receive the money?",
        ),
        lambda m: _money_question(
            m,
            "The price won't be exactly the same. Where should I take the difference from, or put it back to?",
            "What should I send the refund to?",
        ),
        lambda m: _money_question(
            m,
            "Any preference for how the difference is paid?",
            "Want the money back on your original card, or as gift card credit?",
        ),
        lambda m: _money_question(
            m,
            "What do you want to use to pay the difference?",
            "Where do you want the refund to end up?",
        ),
    ),
    "confirmation": (
        lambda m: f"Okay, so {_everyday(m)}. Are you good with that?",
        lambda m: f"{_everyday(m)}. Sound okay?",
        lambda m: f"Here's what I'll do: {_everyday(m)}. Should I put that through?",
        lambda m: f"{_everyday(m)}. Just let me know if you want me to go for it.",
        lambda m: [f"Alright, {_everyday(m)}.", "Is that what you want?"],
        lambda m: f"{_everyday(m)}. Good to go?",
        lambda m: f"So {_everyday(m)}. Can I get a yes from you before I submit it?",
        lambda m: f"To recap: {_everyday(m)}. I just need your OK.",
        lambda m: f"{_everyday(m)}. Are we all set to do this?",
        lambda m: [f"Got it. {_everyday(m)}.", "Ready for me to do it?"],
    ),
    "unavailable": (
        lambda m: f"Ah, the {m.group(1)} is out of stock right now, sorry.",
        lambda m: f"Bad news - the {m.group(1)} isn't available.",
        lambda m: f"I looked, and we don't have the {m.group(1)} in stock.",
        lambda m: f"The {m.group(1)} is sold out at the moment.",
        lambda m: f"Unfortunately the {m.group(1)} can't be ordered right now.",
        lambda m: f"Looks like the {m.group(1)} is unavailable.",
        lambda m: f"Sorry, we're out of the {m.group(1)}.",
        lambda m: f"The {m.group(1)} isn't in stock anymore.",
        lambda m: f"I'm afraid the {m.group(1)} isn't available to swap to.",
        lambda m: f"We've run out of the {m.group(1)}, I'm sorry.",
    ),
    "balance": (
        lambda m: f"The difference is {m.group(1)} but your gift card only has {m.group(2)} on it.",
        lambda m: f"Your gift card has {m.group(2)}, which isn't enough for the {m.group(1)} difference.",
        lambda m: f"I can't put the {m.group(1)} on the gift card - there's only {m.group(2)} left on it.",
        lambda m: f"The gift card won't cover it: {m.group(1)} difference, {m.group(2)} balance.",
        lambda m: f"Sorry, the {m.group(1)} difference is more than the {m.group(2)} on your gift card.",
        lambda m: f"There's only {m.group(2)} on the gift card and the difference comes to {m.group(1)}.",
        lambda m: f"The gift card is short - it has {m.group(2)} and we need {m.group(1)}.",
        lambda m: f"Your gift card balance ({m.group(2)}) is too low for the {m.group(1)} difference.",
        lambda m: f"The {m.group(1)} difference can't go on the gift card; it just has {m.group(2)}.",
        lambda m: f"Unfortunately {m.group(2)} on the gift card doesn't cover the {m.group(1)} difference.",
    ),
    "not_found": (
        lambda m: f"Hmm, {m.group(1)} isn't coming up for me. What was in the order?",
        lambda m: f"I can't find an order {m.group(1)}. Do you remember what you bought?",
        lambda m: f"There's no {m.group(1)} on your account. What else can you tell me about it?",
        lambda m: f"Order {m.group(1)} doesn't exist on our end. Any idea what items were in it?",
        lambda m: f"That number, {m.group(1)}, didn't find anything. What did you order?",
        lambda m: f"I'm not finding {m.group(1)}. Could you describe the order?",
        lambda m: f"Nothing comes up for {m.group(1)}. What was in it?",
        lambda m: f"Looks like {m.group(1)} isn't a real order number. What do you remember about it?",
        lambda m: f"No order {m.group(1)} here, sorry. What did it have in it?",
        lambda m: f"I couldn't locate {m.group(1)}. Can you tell me what you bought?",
    ),
}


# ---- round eleven (fresh, issue 52): written after round ten's classes were fixed; measured once, never used for
# fixing. Other voices: brisk chat support, a patient phone agent, a non-native speaker, a store clerk; payment
# asked as the choice about the money in several shapes, confirmations asked as people ask for a go-ahead.
def _plain(m: re.Match[str]) -> str:
    """The proposal as a store clerk says it: the order first, the money in its own sentence."""
    p, d = plan(m), plan(m).details
    if p.kind == "cancel":
        why = "you don't need it any more" if "no longer" in d["reason"] else "it was a mistake"
        return (
            f"Order {p.order} gets cancelled because {why}. You'd get {d['amount']} back where you paid from."
        )
    if p.kind == "address":
        return f"Order {p.order} would then go to {d['address']}."
    if p.kind in ("modify", "exchange"):
        side = "we'd charge" if d["direction"] == "charged to" else "we'd send back"
        swap = "changed" if p.kind == "modify" else "exchanged"
        return f"On order {p.order}, {p.swaps()} get {swap}. For the difference {side} {d['amount']} on {d['method']}."
    return f"From order {p.order} we take back items {d['items']}. {d['amount']} would go to {d['method']}."


FRESH_11: dict[str, tuple[Wording, ...]] = {
    "email": (
        lambda m: "hey! whats ur email?",
        lambda m: (
            "Of course, I can take care of that for you. Could you please read me the email on the account?"
        ),
        lambda m: "Please, for find your account I need the email.",
        lambda m: "Alright, what email is the account under?",
        lambda m: "Can you type out your email address for me?",
        lambda m: "Quick security step first: which email did you register?",
        lambda m: "First I need to look you up. What's your email, please?",
        lambda m: "I'd be happy to. May I get your email address?",
        lambda m: "Sure. Email address on the account?",
        lambda m: "To find your orders I'll need the email you use with us.",
    ),
    "name_zip": (
        lambda m: "hmm that email isnt found. name + zip?",
        lambda m: (
            "I'm sorry, I've searched and that email address doesn't bring up an account. Could you please tell "
            "me your first and last name and your zip code?"
        ),
        lambda m: "This email I cannot find. Please give me your name and zip code.",
        lambda m: "No account with that email, I'm afraid. What's your full name and zip?",
        lambda m: "That one isn't in the system. Can I get your name and ZIP code?",
        lambda m: "I don't have anything under that email. Your first name, last name and postcode?",
        lambda m: "Hm, not finding it. Could you give me your name and your zip code instead?",
        lambda m: "That email doesn't match. What name and zip code should I search?",
        lambda m: "Sorry, no match. Please send your full name and zip code.",
        lambda m: "Nothing comes up for that email. Let me try your name and zip - what are they?",
    ),
    "order_id": (
        lambda m: "which order #?",
        lambda m: "Of course. Could you please read me the order number you'd like cancelled?",
        lambda m: "Please, what is the number of the order?",
        lambda m: "Sure, which order is it?",
        lambda m: "Can you give me the order number?",
        lambda m: "What's the order ID?",
        lambda m: "Which order do you want to cancel - do you have its number?",
        lambda m: "I'll need the number of the order you mean.",
        lambda m: "Okay. What order number are we talking about?",
        lambda m: "Could you tell me which order? The number is enough.",
    ),
    "reason": (
        lambda m: "why u cancelling?",
        lambda m: "I can certainly help with that. May I ask what the reason for cancelling is?",
        lambda m: "Please, for what reason you cancel?",
        lambda m: "Okay - why do you want to cancel?",
        lambda m: "What's the reason?",
        lambda m: "Could you tell me why you're cancelling the order?",
        lambda m: "Is it because you don't need it anymore, or did you order it by mistake?",
        lambda m: "What's made you want to cancel?",
        lambda m: "And why would you like it cancelled?",
        lambda m: "I need to put down a reason. Why are you cancelling?",
    ),
    "address": (
        lambda m: "new addr?",
        lambda m: "Of course. Could you please read me the full new address, with the zip code?",
        lambda m: "Please, what is your new address?",
        lambda m: "Sure - where should it ship to now?",
        lambda m: "What's the new address?",
        lambda m: "Where would you like the order to go?",
        lambda m: "Could you give me the address you want it delivered to?",
        lambda m: "What address do you want on the order?",
        lambda m: "Where do you live now? I'll put that on the order.",
        lambda m: "Which address should I send it to?",
    ),
    "payment": (
        lambda m: _money_question(m, "how do u want to pay the diff?", "where do u want the refund?"),
        lambda m: _money_question(
            m,
            "There will be a small difference in price. How would you like to take care of that?",
            "And where would you like us to send your money back?",
        ),
        lambda m: _money_question(
            m,
            "Please, the price is different. With what you want to pay the difference?",
            "Please, to where we return the money?",
        ),
        lambda m: _money_question(
            m,
            "The new one doesn't cost the same. What should I put the difference on?",
            "Where should your money go back to?",
        ),
        lambda m: _money_question(
            m,
            "What would you like to use to cover the price difference?",
            "Would you like the money returned to your original payment, or to a gift card?",
        ),
        lambda m: _money_question(
            m,
            "Which card or account should pay the difference?",
            "Where would you like to get the refund?",
        ),
        lambda m: _money_question(
            m,
            "How do you want to settle the price difference?",
            "How do you want your money back?",
        ),
        lambda m: _money_question(
            m,
            "The difference needs to go somewhere. What would you like me to use?",
            "The refund needs to go somewhere. Where would you like it?",
        ),
        lambda m: _money_question(
            m,
            "What do you want to do about the difference in price?",
            "What would you like done with the refund?",
        ),
        lambda m: _money_question(
            m,
            "Got it. And for the difference, what would you like to use?",
            "Got it. And the money - where should it go?",
        ),
    ),
    "confirmation": (
        lambda m: f"{_plain(m)} ok w/ you?",
        lambda m: f"{_plain(m)} Would you like me to go ahead and do that for you?",
        lambda m: f"Please check: {_plain(m)} It is fine for you?",
        lambda m: f"{_plain(m)} Sound right?",
        lambda m: [_plain(m), "Can I go ahead?"],
        lambda m: f"{_plain(m)} Is that alright with you?",
        lambda m: f"{_plain(m)} Are you okay with me doing that?",
        lambda m: f"{_plain(m)} Do I have your permission to do it?",
        lambda m: [f"So: {_plain(m)}", "Everything good?"],
        lambda m: f"{_plain(m)} Just give me a yes and I'll do it.",
    ),
    "unavailable": (
        lambda m: f"{m.group(1)} not in stock sorry",
        lambda m: f"I'm very sorry, but I've checked and the {m.group(1)} is currently out of stock.",
        lambda m: f"Sorry, the {m.group(1)} we don't have now.",
        lambda m: f"Ah, the {m.group(1)} is sold out.",
        lambda m: f"The {m.group(1)} isn't available.",
        lambda m: f"Unfortunately we're out of stock on the {m.group(1)}.",
        lambda m: f"I'm afraid the {m.group(1)} is not available right now.",
        lambda m: f"We don't have the {m.group(1)} in stock at the moment.",
        lambda m: f"The {m.group(1)} can't be ordered - it's unavailable.",
        lambda m: f"No luck, the {m.group(1)} is out of stock.",
    ),
    "balance": (
        lambda m: f"gift card has {m.group(2)}, diff is {m.group(1)} - not enough",
        lambda m: (
            f"I'm sorry, but your gift card only has {m.group(2)} left, and the difference is {m.group(1)}, so "
            "it won't cover it."
        ),
        lambda m: f"Sorry, on the gift card is only {m.group(2)}, it is not enough for {m.group(1)}.",
        lambda m: f"The gift card's balance is {m.group(2)}, short of the {m.group(1)} difference.",
        lambda m: f"Your gift card won't cover the {m.group(1)} - it only has {m.group(2)}.",
        lambda m: f"The {m.group(1)} difference is more than your gift card's {m.group(2)}.",
        lambda m: f"There isn't enough on the gift card: {m.group(2)}, but the difference is {m.group(1)}.",
        lambda m: f"The gift card balance of {m.group(2)} doesn't cover the {m.group(1)} difference.",
        lambda m: f"I can't use the gift card - it has {m.group(2)} and the difference is {m.group(1)}.",
        lambda m: f"Your gift card is too low ({m.group(2)}) for the {m.group(1)} difference.",
    ),
    "not_found": (
        lambda m: f"{m.group(1)} not found, what was in it?",
        lambda m: (
            f"I'm so sorry, but I've searched and can't find an order {m.group(1)}. Could you tell me what you "
            "ordered?"
        ),
        lambda m: f"Sorry, order {m.group(1)} I cannot find. What you ordered?",
        lambda m: f"Hmm, {m.group(1)} doesn't come up. What was in the order?",
        lambda m: f"I can't find {m.group(1)}. Do you remember any items?",
        lambda m: f"There's no order {m.group(1)}. What else do you remember?",
        lambda m: f"Order {m.group(1)} isn't in the system. Can you describe it?",
        lambda m: f"I'm not seeing {m.group(1)} anywhere. What did you buy?",
        lambda m: f"{m.group(1)} doesn't exist in our records. What was in it?",
        lambda m: f"No {m.group(1)} on file. Could you tell me what the order had?",
    ),
}


# ---- round twelve (fresh, issue 52): written after round eleven, which fell short on confirmation and became a
# fixing round; measured once, never used for fixing. Voices: a bank-style formal agent, a hurried agent, a
# friendly agent who explains, a support bot with markdown; proposals with the money first or in a list.
def _recap(m: re.Match[str]) -> str:
    """The proposal as a short recap list: what, which order, the money."""
    p, d = plan(m), plan(m).details
    if p.kind == "cancel":
        rows = [
            f"cancel {p.order}",
            f"reason: {d['reason']}",
            f"refund: {d['amount']} to your original payment",
        ]
    elif p.kind == "address":
        rows = [f"update the shipping address of {p.order}", f"new address: {d['address']}"]
    elif p.kind in ("modify", "exchange"):
        verb = "swap" if p.kind == "modify" else "exchange"
        money = "charge" if d["direction"] == "charged to" else "refund"
        rows = [f"{verb} on {p.order}: {p.swaps()}", f"{money} of {d['amount']} via {d['method']}"]
    else:
        rows = [f"return from {p.order}: items {d['items']}", f"refund of {d['amount']} to {d['method']}"]
    return "\n".join(f"* {row}" for row in rows)


FRESH_12: dict[str, tuple[Wording, ...]] = {
    "email": (
        lambda m: "Certainly. May I kindly have the email address registered to your account?",
        lambda m: "ok - email?",
        lambda m: "Happy to help you with that! What's the email address you shop with?",
        lambda m: "**Step 1:** please send me the email on your account.",
        lambda m: "I'll look you up by email. What is it?",
        lambda m: "Which email is your account linked to?",
        lambda m: "Could you provide your email so I can pull up your orders?",
        lambda m: "Before we continue, I need the email address on file.",
        lambda m: "Sure, can you share your account email first?",
        lambda m: "What's your email address, please?",
    ),
    "name_zip": (
        lambda m: (
            "I regret that no account was found for that email. May I have your full name and postal code?"
        ),
        lambda m: "no luck w/ that one - name and zip pls",
        lambda m: "Hmm, that email didn't work, but no problem! What's your full name and zip code?",
        lambda m: "**Not found.** Please send your first name, last name and ZIP code.",
        lambda m: (
            "That email doesn't show an account. Let me try your name and zip code instead - what are they?"
        ),
        lambda m: "I can't find that email. Can you give me your name and zip?",
        lambda m: "No account matches that email. What's the name and zip code on it?",
        lambda m: "The email didn't come up. Please tell me your full name and postal code.",
        lambda m: "Could you give me your first and last name plus zip code? That email isn't on file.",
        lambda m: "That didn't match anything. Your name and ZIP, please?",
    ),
    "order_id": (
        lambda m: "Certainly. May I have the number of the order you wish to cancel?",
        lambda m: "order number?",
        lambda m: "Sure thing! Which order should I cancel? The number starts with #W.",
        lambda m: "**Order number**, please?",
        lambda m: "Which order is it? I need the number.",
        lambda m: "Could you share the order ID?",
        lambda m: "What's the number of that order?",
        lambda m: "Please tell me which order you'd like to cancel.",
        lambda m: "Do you know the order number?",
        lambda m: "Can you send the ID of the order?",
    ),
    "reason": (
        lambda m: "Certainly. May I ask the reason for the cancellation?",
        lambda m: "reason?",
        lambda m: "Sure! Just so I can log it, why are you cancelling?",
        lambda m: "**Reason for cancelling:** no longer needed, or ordered by mistake?",
        lambda m: "Why do you want to cancel it?",
        lambda m: "What's the reason for cancelling this one?",
        lambda m: "Could you tell me why you no longer want the order?",
        lambda m: "I'll need to note why. What's the reason?",
        lambda m: "Is there a particular reason for the cancellation?",
        lambda m: "Can you tell me the reason?",
    ),
    "address": (
        lambda m: "Certainly. May I have the complete new shipping address?",
        lambda m: "new address?",
        lambda m: "Congrats on the move! Where should the order be delivered now?",
        lambda m: "**New shipping address** (street, city, state, ZIP), please.",
        lambda m: "What's the address you want it shipped to?",
        lambda m: "Where would you like it sent?",
        lambda m: "Could you give me the new delivery address?",
        lambda m: "What address should the order go to now?",
        lambda m: "Please send me the new address.",
        lambda m: "Where are we shipping it now?",
    ),
    "payment": (
        lambda m: _money_question(
            m,
            "Certainly. How would you prefer to pay the price difference?",
            "Certainly. To which payment method would you like the refund issued?",
        ),
        lambda m: _money_question(m, "diff - how do u pay?", "refund - where to?"),
        lambda m: _money_question(
            m,
            "Okay! The new item's price is a little different. How would you like to handle that?",
            "Okay! You'll be getting money back for this. Where should it go?",
        ),
        lambda m: _money_question(
            m,
            "**Price difference:** which payment method should we use?",
            "**Refund:** original payment method or gift card?",
        ),
        lambda m: _money_question(
            m,
            "What would you like me to charge or refund the difference to?",
            "Where would you like the refund to be sent?",
        ),
        lambda m: _money_question(
            m,
            "Which of your payment options would you like for the difference?",
            "Should the money go back to your original payment, or to a gift card?",
        ),
        lambda m: _money_question(
            m,
            "What do you want to pay the difference with?",
            "What do you want the money refunded to?",
        ),
        lambda m: _money_question(
            m,
            "There's a price difference. Let me know what you'd like to use for it.",
            "There's money coming back to you. Let me know where you'd like it.",
        ),
        lambda m: _money_question(
            m,
            "How should I take care of the difference?",
            "How should I send the money back?",
        ),
        lambda m: _money_question(
            m,
            "And the difference in price - what should it go on?",
            "And the refund - where would you like it?",
        ),
    ),
    "confirmation": (
        lambda m: f"I shall now {_short(m)}. May I have your consent to proceed?",
        lambda m: f"{_short(m)} - ok?",
        lambda m: f"Great, here's the plan: I'll {_short(m)}. Does that all sound good to you?",
        lambda m: f"**Summary**\n{_recap(m)}\n\nShall I go ahead?",
        lambda m: [f"Here's what will happen:\n{_recap(m)}", "Are you happy for me to do this?"],
        lambda m: f"I'm going to {_short(m)}. Is that okay with you?",
        lambda m: f"So I'll {_short(m)}. Want me to do that?",
        lambda m: f"Let me {_short(m)}, if that's fine with you?",
        lambda m: f"{_recap(m)}\nEverything look right?",
        lambda m: f"I'd like to {_short(m)}. Do I have your okay?",
    ),
    "unavailable": (
        lambda m: f"I regret to inform you that the {m.group(1)} is currently unavailable.",
        lambda m: f"{m.group(1)}: out of stock",
        lambda m: f"Oh no, the {m.group(1)} is sold out right now, sorry about that!",
        lambda m: f"**Unavailable:** the {m.group(1)}.",
        lambda m: f"The {m.group(1)} isn't in stock.",
        lambda m: f"I'm afraid the {m.group(1)} can't be ordered at the moment.",
        lambda m: f"We're out of the {m.group(1)}.",
        lambda m: f"The {m.group(1)} is not available right now.",
        lambda m: f"Sorry, no stock left of the {m.group(1)}.",
        lambda m: f"Unfortunately, the {m.group(1)} is no longer available.",
    ),
    "balance": (
        lambda m: (
            f"I regret that your gift card balance of {m.group(2)} is insufficient for the price difference of "
            f"{m.group(1)}."
        ),
        lambda m: f"gift card {m.group(2)} < diff {m.group(1)}, not enough",
        lambda m: (
            f"Oh, your gift card only has {m.group(2)} and the difference is {m.group(1)}, so that won't work."
        ),
        lambda m: f"**Gift card:** {m.group(2)} - not enough for the {m.group(1)} difference.",
        lambda m: f"The gift card can't cover the {m.group(1)} difference - it has {m.group(2)}.",
        lambda m: f"Your gift card balance ({m.group(2)}) is lower than the {m.group(1)} difference.",
        lambda m: f"The {m.group(1)} difference exceeds the {m.group(2)} on your gift card.",
        lambda m: f"There's just {m.group(2)} on your gift card, not enough for {m.group(1)}.",
        lambda m: f"Your gift card doesn't have enough - {m.group(2)} against {m.group(1)}.",
        lambda m: f"The gift card won't cover it: it holds {m.group(2)} and the difference is {m.group(1)}.",
    ),
    "not_found": (
        lambda m: f"I regret that order {m.group(1)} could not be located. Could you describe its contents?",
        lambda m: f"{m.group(1)} - not found. items?",
        lambda m: f"Hmm, I couldn't find {m.group(1)}, but don't worry! What was in that order?",
        lambda m: f"**Not found:** {m.group(1)}. What did the order contain?",
        lambda m: f"There's no order {m.group(1)} on your account. What did you buy?",
        lambda m: f"I can't locate {m.group(1)}. Do you remember what was in it?",
        lambda m: f"Order {m.group(1)} doesn't exist. What else can you tell me about it?",
        lambda m: f"No match for {m.group(1)}. Could you describe the order?",
        lambda m: f"I'm not able to find {m.group(1)}. What items were in it?",
        lambda m: f"{m.group(1)} didn't come up. What was in the order?",
    ),
}
