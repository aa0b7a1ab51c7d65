"""The reader's classes found by paraphrase rounds five to eight (tests/retail/wordings.py), each with
wordings of its own (none from a paraphrase round) and the strict side of the same rule: fast, unlike the
slow-marked test_wordings.py."""

from __future__ import annotations

import pytest

from trace_gym.targets.retail.reading import (
    asked_slots,
    assent_request,
    confirmation_request,
    is_request,
    reports,
)


# ---- requests phrased as a need or an offer, and a "which" pointing back at the choices -----------------------
@pytest.mark.parametrize(
    ("text", "slots"),
    [
        ("I'll need either your e-mail or your name and postcode.", {"email", "name_zip"}),
        ("I would need both your full name and your zip code.", {"name_zip"}),
        ("You can just send me the email on the account.", {"email"}),
        ("You could give me your name and zip code instead.", {"name_zip"}),
        (
            "Your email works, and so do your name and zip code. Which is easier for you?",
            {"email", "name_zip"},
        ),
        ("An email address or a name with a zip code would do. Whichever you prefer?", {"email", "name_zip"}),
    ],
)
def test_needs_offers_and_which_back_references_ask(text: str, slots: set[str]):
    assert asked_slots(text) >= slots, text


@pytest.mark.parametrize(
    "text",
    [
        "I need to check your email first.",  # the agent's own need: asks nothing
        "You can see your email in the app.",
        "Your email is on file.",
        "Which of your orders had the lamp, I wonder.",
    ],
)
def test_statements_about_needs_and_offers_of_nothing_ask_no_identity(text: str):
    assert not asked_slots(text) & {"email", "name_zip"}, text


# ---- a slot named by "<slot adjective> details / info" ---------------------------------------------------------
@pytest.mark.parametrize(
    "text",
    [
        "Please send me the new delivery info.",
        "What are your mailing details now?",
        "Could you share the forwarding details?",
    ],
)
def test_address_named_by_its_details(text: str):
    assert "address" in asked_slots(text), text


def test_address_details_in_a_statement_ask_nothing():
    assert asked_slots("Shipping details will follow by email.") == set()


# ---- obstacles: the variant between "no" and "in stock", a gift card that cannot be used, negated seeing ------
@pytest.mark.parametrize(
    "text",
    [
        "No Desk Lamp with brightness: high, color: white left in stock.",
        "Sorry, no 2.5L kettle available this week.",
    ],
)
def test_no_variant_in_stock_reports_unavailable(text: str):
    assert reports(text, "unavailable"), text


@pytest.mark.parametrize(
    "text",
    [
        "No problem, the lamp is in stock.",
        "No changes are needed; the 1.5L kettle is available.",
        "No worries - the blue one is available.",
    ],
)
def test_no_as_interjection_or_with_a_verb_reports_nothing(text: str):
    assert not reports(text, "unavailable"), text


@pytest.mark.parametrize(
    "text",
    [
        "The gift card won't do for this one: it holds $5.00.",
        "I'm unable to put the $20.00 difference on your gift card.",
        "Your gift card's balance is merely $3.10.",
    ],
)
def test_a_gift_card_that_cannot_be_used_reports_the_balance(text: str):
    assert reports(text, "balance"), text


@pytest.mark.parametrize(
    "text",
    [
        "I can't charge anything until you confirm.",  # not about the gift card
        "The gift card will work: its balance is $50.00.",
        "Your gift card can be used for the difference.",
    ],
)
def test_a_usable_gift_card_or_another_refusal_reports_no_balance(text: str):
    assert not reports(text, "balance"), text


@pytest.mark.parametrize(
    "text",
    [
        "We're not seeing any order #W1234567.",
        "I don't see #W1234567 in the system.",
        "There's no sign of that order.",
        "Our team isn't finding #W1234567.",
    ],
)
def test_negated_seeing_reports_not_found(text: str):
    assert reports(text, "not_found"), text


def test_seeing_an_order_reports_no_not_found():
    assert not reports("I can see order #W1234567 in the system.", "not_found")


# ---- classes found by round six (measured once, then fixed; round seven is the fresh one) ----------------------
@pytest.mark.parametrize(
    "text",
    [
        "Should we swap item 1111111111 -> 2222222222 in order #W1234567. The $4.00 goes to your PayPal?",
        "Summary: cancel #W1234567 (no longer needed), $9.00 back to your card. Yes/no?",
        "Recap - return item 1111111111 of #W1234567, $9.00 to gift_card_1234567. Yes or no?",
        "Can we request a return of item 1111111111 from #W1234567, refunding $9.00 to your card?",
        "Shall I request the exchange of item 1111111111 in #W1234567?",
    ],
)
def test_yes_no_questions_by_inversion_or_yes_or_no_are_proposals(text: str):
    assert confirmation_request(text), text


@pytest.mark.parametrize(
    "text",
    [
        "May I request your email?",
        "Which card should I use for the difference?",
        "Thanks. I will look into order #W1234567 now.",
    ],
)
def test_requests_for_information_are_no_proposals(text: str):
    assert not confirmation_request(text), text


def test_may_i_request_still_asks_for_the_slot():
    assert asked_slots("May I request your email?") == {"email"}


@pytest.mark.parametrize(
    "text",
    [
        "The green variant can't be bought at the moment.",
        "That size cannot be sourced at present.",
        "You can't purchase the 2L kettle right now.",
    ],
)
def test_negated_acquisition_reports_unavailable(text: str):
    assert reports(text, "unavailable"), text


def test_a_purchase_that_can_be_made_reports_nothing():
    assert not reports("The 2L kettle can be bought right now.", "unavailable")


@pytest.mark.parametrize(
    "text",
    [
        "Your gift card can only cover $5.00 of it.",
        "The gift card will just pay for $3.00 of the difference.",
    ],
)
def test_a_gift_card_that_covers_only_part_reports_the_balance(text: str):
    assert reports(text, "balance"), text


# ---- classes found by round seven (measured once as the fresh round, then fixed; round eight is fresh) ---------
@pytest.mark.parametrize(
    "text", ["What's the ID attached to the order?", "Could you read me the number on your order?"]
)
def test_the_order_number_by_any_preposition(text: str):
    assert "order" in asked_slots(text), text


@pytest.mark.parametrize(
    "text",
    [
        "The lookup for #W1234567 came back empty.",
        "Searching #W1234567 gave zero results.",
        "#W1234567 brought up nothing.",
    ],
)
def test_a_search_that_returned_nothing_reports_not_found(text: str):
    assert reports(text, "not_found"), text


def test_a_search_that_returned_the_order_reports_nothing():
    assert not reports("The search returned your order #W1234567.", "not_found")


@pytest.mark.parametrize("text", ["We've run out of the 2L kettle.", "We're currently out of that colour."])
def test_being_out_of_the_variant_reports_unavailable(text: str):
    assert reports(text, "unavailable"), text


def test_out_of_in_other_senses_reports_nothing():
    assert not reports("Your order will be sent out of the warehouse tomorrow.", "unavailable")


# ---- classes found by round eight (measured once as the fresh round, then fixed; round nine is fresh) ----------
@pytest.mark.parametrize(
    ("text", "slot"),
    [("zip code pls", "name_zip"), ("plz send the email on ur account", "email"), ("order no.?", "order")],
)
def test_chat_abbreviations_ask(text: str, slot: str):
    assert slot in asked_slots(text), text


def test_pls_note_asks_nothing():
    assert asked_slots("pls note your email is on file") == set()


@pytest.mark.parametrize(
    "text",
    [
        "Reply yes to cancel #W1234567 and refund $9.00 to your card.",
        "Answer with **yes** if I should return item 1111111111 of #W1234567.",
    ],
)
def test_reply_yes_asks_for_a_yes(text: str):
    assert confirmation_request(text), text


def test_a_yes_reported_is_no_request():
    assert not confirmation_request("You said yes to cancelling #W1234567 earlier.")


# ---- issue 52: the decision asked for, not the phrase (found by paraphrase round ten) ------------------------
@pytest.mark.parametrize(
    "text",
    [
        "The replacement is pricier. How do you want to cover the extra?",
        "What should happen with the money?",
        "Where should the money go?",  # where money goes is no street address
        "The two versions don't cost the same, so there's a difference. What would you like to use?",
        "There's a difference of a few dollars - what do you want to put it on?",
    ],
)
def test_a_question_about_the_money_asks_for_the_payment_method(text: str):
    assert "payment" in asked_slots(text), text
    assert "address" not in asked_slots(text), text


@pytest.mark.parametrize(
    "text",
    [
        "Your money will be back within a week. Anything else?",  # a question, but not about the money
        "The difference has been refunded. Is there anything else I can do?",
        "The difference is small.",  # a statement asks nothing
        "Where should we ship the package now?",  # still an address
    ],
)
def test_money_mentioned_around_another_question_asks_no_payment(text: str):
    assert "payment" not in asked_slots(text), text


def test_a_bare_which_one_points_back_at_the_slot_named_before():
    assert asked_slots("The form needs a reason for cancelling. Which one applies?") == {"reason"}
    assert "order" in asked_slots("You have three orders. Which one is it?")  # orders named: the order


def test_lets_start_with_asks_and_there_is_no_order_reports_not_found():
    assert "email" in asked_slots("Let's begin with the e-mail on your profile.")
    assert reports("Sorry, there is no #W1234567 in your history.", "not_found")
    assert not reports("There's no rush at all.", "not_found")


@pytest.mark.parametrize(
    "text",
    [
        "Are you happy with that?",
        "Is this what you had in mind?",
        "All set?",
        "Fine by you?",
        "OK for me to submit it?",
        "Can I have a yes before I do it?",
        "I'll just need your go-ahead.",
        "Would it be alright if I put this through now?",
    ],
)
def test_a_yes_no_question_about_the_proposal_asks_for_assent(text: str):
    assert assent_request(text), text


@pytest.mark.parametrize(
    "text",
    [
        "Is there anything else?",
        "Do you have any questions about that?",
        "Do you remember what was in it?",
        "Could you give me the order number for it?",  # names a slot: asks for the number
        "Which card should I use for it?",  # a wh-question asks for a choice
        "Should I refund it to the card or to a gift card?",  # alternatives ask for a choice
        "That is all done now.",  # no request
    ],
)
def test_questions_that_ask_for_something_else_ask_no_assent(text: str):
    assert not assent_request(text), text


# ---- round eleven, which became a fixing round: softened imperatives, "addr", "not in the system" ------------
def test_softened_imperatives_abbreviations_and_the_system_are_read():
    assert assent_request("Simply give me a yes and it's done.")
    assert is_request("So tell me the reason.") and not is_request("So that is the reason.")
    assert asked_slots("what's the new addr?") == {"address"}
    assert reports("Order #W1234567 isn't in the database.", "not_found")
    assert reports("That order is not in the system.", "not_found")
    assert not reports("Order #W1234567 is in the system.", "not_found")
