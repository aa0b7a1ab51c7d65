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
