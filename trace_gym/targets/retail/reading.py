"""How the scripted retail user reads an agent message: what it asks, what it proposes, what it reports.

Decided from the message's structure, not from trigger words, and deterministic (no LLM):

* a message is cut into sentences and a sentence into clauses (at ``,;:`` and "but", "or", "and"); only
  *requests* can ask: questions, imperatives ("tell me ...", "please share ..."), and statements that ask
  ("let me know ...", "I'll need ...", "... is required"); a statement that mentions an email asks nothing;
* a request asks for a slot (:data:`SLOTS`) when it names the slot by any of its synonyms, as whole words
  (no trigger inside another word: "reasonable" names no reason, "zipper" no zip code), and the name is not
  negated in its clause ("no need for your email, just your name and zip code" asks for the name and zip);
  alternatives ("your email or your name and zip code") ask for each;
* a confirmation request (:data:`CONFIRM`) is a proposal; :func:`affirmed` says whether a proposal states an
  action or a detail without negating it ("I will not cancel order ..." proposes no cancellation), and a
  proposal that only points back ("shall I go ahead with that?") is read together with the message before;
* an obstacle (:data:`OBSTACLES`: not found, not available, balance too low) is reported by any sentence,
  with positive or negative phrasings ("isn't available", "not in stock", "doesn't cover").

Every pattern is a linear-time regular expression over text of bounded length (the user reads at most
``MAX_MESSAGE_CHARS``). US and UK spellings are both accepted (authorise/authorize, cancelled/canceled).
"""

from __future__ import annotations

import re

MAX_MESSAGE_CHARS = 3000
SENTENCE_END = re.compile(r"(?<=[.?!])\s+|\n+")
CLAUSE_END = re.compile(r"[,;:]|\s(?:but|or|and|just|only|instead|rather)\s|\s[-–—]\s", re.IGNORECASE)
NEGATOR = re.compile(
    r"\b(?:not|no|never|without|don'?t|do not|doesn'?t|won'?t|cannot|can'?t|isn'?t|aren'?t|wouldn'?t|"
    r"shouldn'?t|needn'?t|nor|neither)\b|n[’']t\b",
    re.IGNORECASE,
)
# What makes a sentence a request (it asks the reader to say or do something).
REQUEST = re.compile(
    r"\?|^\W*(?:please\s+)?(?:tell|give|send|share|provide|confirm|type|enter|list|say|"
    r"specify|name|write|spell|verify|choose|pick|select|describe|explain|reply|respond)\b"
    r"|\b(?:please|kindly)\b(?! (?:note|be aware|bear|hold|wait|allow|stand by|rest assured))"
    r"|\b(?:could|can|would|will) you\b|\bmay i (?:have|ask|get|know|see)\b"
    r"|\b(?:i|we)(?:'ll| will|'d| would)? (?:need|require) (?:your|you to|the|a|an|to (?:know|have|get|see|hear))\b"
    r"|\b(?:let me know|tell me|inform me|fill me in|walk me through)\b"
    r"|\b(?:is|are) (?:needed|required|necessary)\b|\bif you (?:could|can|would|don'?t mind)\b",
    re.IGNORECASE,
)
# Slots the user can be asked for, each with its synonyms (whole words; regular expressions).
SLOTS: dict[str, re.Pattern[str]] = {
    name: re.compile(pattern, re.IGNORECASE)
    for name, pattern in {
        "email": r"\be-?mails?\b|\bmail address\b|\blog ?-?ins?\b|\blog (?:in|on)\b|\bsign(?:ed)? (?:up|in)\b"
        r"|\busernames?\b|\baddress (?:on file|you (?:use|used|registered)|registered)\b|\bregistered address\b",
        "name_zip": r"\b(?:full |first |last |sur)?names?\b|\bzip(?: ?codes?)?\b|\bpostal(?: codes?)?\b"
        r"|\bpost ?codes?\b|\bpostcodes?\b",
        "identity": r"\b(?:identify|identification|verify|verification|authenticat\w*|confirm (?:your|who))\b"
        r"|\b(?:locate|look up|find|pull up|access|bring up) (?:you|your (?:account|profile|details|records?))\b"
        r"|\blook (?:you|it) up\b|\bwho (?:you are|i'?m (?:speaking|talking|chatting)|am i (?:speaking|talking|chatting)|is this)\b"
        r"|\baccount (?:details|information|info)\b|\b(?:your|the) account\b",
        "order": r"\border (?:id|ids|number|numbers|no\.?|#|code|reference|ref)s?\b|\b(?:which|what) (?:order|one|purchase)s?\b"
        r"|\bwhich of (?:your|the|those|these) (?:orders|purchases)\b|\border (?:is it|is this|are you referring|do you mean)\b"
        r"|\b(?:the|your) order'?s? (?:id|number|reference)\b|\bidentify the order\b|\bwhich (?:of them|one of)\b",
        "reason": r"\breasons?\b|\bwhy\b|\bwhat made you\b|\bwhat(?:'s| is) (?:prompting|behind|wrong|the matter)\b"
        r"|\bmotivat\w*|\bwhat (?:led|brought) you\b|\bhow come\b|\bcauses?\b"
        r"|\bno longer (?:need|want)\w*|\bby (?:mistake|accident)\b|\bmistaken(?:ly)?\b",  # the reasons offered
        "address": r"\b(?:new |shipping |delivery |postal |street |mailing )?address(?:es)?\b"
        r"|\b(?:ship|send|deliver|mail)(?:ed|ing)? (?:it |them |the order |your order |the package |the items )?to\b"
        r"|\bwhere (?:should|would|do|shall|can|will|to) [^?.!]{0,40}\b(?:ship|send|deliver|go|arrive)\w*"
        r"|\bmoved\b|\bnew (?:location|place|home|residence|destination)\b|\bdestination\b|\bwhere to\b",
        "payment": r"\bpay(?:s|ing|ment|ments)?\b|\bpaid\b|\bcards?\b|\bpaypal\b|\bsettle\b|\bcharg(?:e|es|ed|ing)\b"
        r"|\bbill(?:ed|ing)?\b|\brefund(?:s|ed|ing)?\b|\breimburs\w*|\b(?:which|what) (?:method|account)\b"
        r"|\bcover(?:ed|ing)? (?:the )?(?:difference|cost|amount)\b|\bfund(?:s|ed|ing)?\b|\bcredited\b",
    }.items()
}
# Words that make an "address" an email address, not a street address.
EMAIL_CONTEXT = re.compile(
    r"\be-?mail|\blog ?-?in|\bsign(?:ed)? (?:up|in)|\bregistered|\bon file", re.IGNORECASE
)
CONFIRM = re.compile(
    r"\bconfirm\w*|\bproceed\w*|\bgo ahead\b|\bgo-ahead\b|\b(?:shall|should|may|can) (?:i|we)\b"
    r"|\bok(?:ay)? (?:to|with|if)\b|\bis (?:this|that|everything|all of this|all this|it) (?:ok|okay|correct|right|alright|all right|fine|accurate|good)\b"
    r"|\b(?:does|do|did) (?:this|that|these|those|everything|it|all|all of this)(?: (?:above|below|here|i (?:said|described|listed)))? (?:look|sound|seem)\b"
    r"|\b(?:look|looks|sound|sounds|seem|seems) (?:right|good|correct|ok|okay|fine|alright|all right)\b"
    r"|\bdo you (?:agree|approve|accept|want me|consent)\b|\b(?:would|do) you like me to\b|\bwant me to\b"
    r"|\bsound good\b|\byes ?/ ?no\b|\byes or no\b|\bare you sure\b|\bauthori[sz]\w*|\bapprov\w*"
    r"|\bgreen light\b|\bhappy (?:for me )?to\b|\bright\?|\bcorrect\?|\bok(?:ay)?\?|\bagreed\?|\bdeal\?"
    r"|\b(?:everything|all|this|that|these)(?: all)? (?:ok|okay|correct|right|good|fine|accurate)\?"
    r"|\bgive (?:me )?the (?:ok|okay|go)\b|\bsay (?:yes|the word)\b",
    re.IGNORECASE,
)
# A proposal that points back at details said before instead of repeating them.
BACK_REFERENCE = re.compile(
    r"\b(?:that|this|these|those|it|them|above|the above|as (?:described|stated|outlined|listed|summari[sz]ed|mentioned)"
    r"|what i (?:described|said|listed|outlined|mentioned)|the (?:plan|changes?|steps?|action|request))\b",
    re.IGNORECASE,
)
MORE = re.compile(
    r"\banything else\b|\bsomething else\b|\bany other\b|\bis that all\b|\bwhat else\b|\bfurther (?:help|assistance)\b",
    re.IGNORECASE,
)
_NT = r"(?:n[o'’]?t|[’']t|not)"
OBSTACLES: dict[str, re.Pattern[str]] = {
    "not_found": re.compile(
        r"\bnot (?:be )?(?:found|locate|find|exist|match|in our (?:system|records))"
        rf"|\b(?:could|can|was|were|did|does|do|is|are){_NT} (?:be )?(?:find|found|locate|located|match|matched|look up|retrieve|exist|show up|turn up|appear|come up|in our)"
        r"|\b(?:couldn'?t|can'?t|cannot|unable to|failed to|didn'?t) (?:find|locate|match|look up|retrieve|see)"
        r"|\bno (?:account|user|order|match|record|result|trace|such order)s?\b|\bnothing (?:under|with|for|comes up|turned up|matches)"
        r"|\bnot (?:recogni[sz]ed|on (?:file|record))\b|\b(?:unknown|invalid|doesn'?t exist|does not exist)\b",
        re.IGNORECASE,
    ),
    "unavailable": re.compile(
        r"\bunavailable\b|\bout[ -]of[ -]stock\b|\bsold[ -]out\b|\bno longer (?:available|offered|sold|in stock|carried|stocked)"
        r"|\bnot (?:currently |presently )?(?:available|in stock|offered|sold|possible to get|stocked|orderable)"
        r"|\b(?:isn|aren|wasn|weren)[’']?t (?:currently |presently )?(?:available|in stock|offered|sold|stocked|orderable)"
        r"|\b(?:can|could)(?:[’']t|n[’']t|not| not) (?:be )?(?:ordered|selected|chosen|supplied|offered|shipped|had)"
        r"|\bno (?:stock|availability|inventory)\b|\bnone (?:left|in stock)\b|\bnot have (?:it|that|this) in stock",
        re.IGNORECASE,
    ),
    "balance": re.compile(
        r"\bnot (?:enough|sufficient|cover|large enough|high enough|big enough)|\binsufficient\b"
        rf"|\b(?:does|do|will|would|can|could){_NT} (?:fully )?(?:cover|have enough|suffice|pay for)"
        r"|\b(?:doesn'?t|won'?t|can'?t|cannot|isn'?t) (?:fully )?(?:cover|have enough|enough|suffice|sufficient)"
        r"|\btoo (?:low|small|little)\b|\bexceeds?\b|\bshort (?:of|by)\b|\bfalls? short\b|\bonly (?:has|holds|contains|have)\b"
        r"|\bless than\b|\bnot (?:enough )?funds\b|\blacks?\b",
        re.IGNORECASE,
    ),
}
# "available" / "in stock" after a negation in its clause ("we do not have that colour available").
AVAILABLE = re.compile(r"\bavailable\b|\bin stock\b|\bstocked\b|\bon offer\b", re.IGNORECASE)


# Figures offered as alternatives ("9240 or 9239", "$5/$6", "either ... or"): a proposal must name one value.
ALTERNATIVES = re.compile(r"\d[\d,.]*\s*(?:or|/)\s*(?:\$|usd ?)?\d|\beither\b", re.IGNORECASE)


def sentences(text: str) -> list[str]:
    return [s for s in SENTENCE_END.split(text) if s.strip()]


def clauses(sentence: str) -> list[str]:
    return [c for c in CLAUSE_END.split(sentence) if c and c.strip()]


def is_request(sentence: str) -> bool:
    return REQUEST.search(sentence) is not None


def request_text(message: str) -> str:
    """The sentences of ``message`` that ask for something (questions and requests), joined by newlines."""
    return "\n".join(s for s in sentences(message) if is_request(s))


NEGATION_WINDOW = 24  # characters before a word in its clause where a negation applies to it


def _negated_at(clause: str, start: int) -> bool:
    return NEGATOR.search(clause[max(0, start - NEGATION_WINDOW) : start]) is not None


def _named(pattern: re.Pattern[str], clause: str) -> bool:
    """The clause names the slot, and not right after a negation ("no need for your email")."""
    return any(not _negated_at(clause, match.start()) for match in pattern.finditer(clause))


def asked_slots(message: str) -> set[str]:
    """The slots the message's requests ask for."""
    asked: set[str] = set()
    for sentence in sentences(message):
        if not is_request(sentence):
            continue
        for clause in clauses(sentence):
            for name, pattern in SLOTS.items():
                if name == "address" and EMAIL_CONTEXT.search(clause):
                    continue  # "the address you signed up with" is an email
                if _named(pattern, clause):
                    asked.add(name)
    if "email" in asked:
        asked.discard("identity")
    return asked


def confirmation_request(message: str) -> bool:
    """Some request of the message asks for a yes."""
    return any(CONFIRM.search(s) for s in sentences(message) if is_request(s))


def points_back(message: str) -> bool:
    """A confirmation request that refers to details said before ("shall I go ahead with that?")."""
    return any(BACK_REFERENCE.search(s) for s in sentences(message) if is_request(s) and CONFIRM.search(s))


def affirmed(pattern: str | re.Pattern[str], text: str) -> bool:
    """``text`` states ``pattern`` in some clause without negating it there ("I will not cancel" does not)."""
    compiled = re.compile(pattern, re.IGNORECASE) if isinstance(pattern, str) else pattern
    for sentence in sentences(text):
        for clause in clauses(sentence):
            for match in compiled.finditer(clause):
                if not _negated_at(clause, match.start()):
                    return True
    return False


def negates(pattern: str | re.Pattern[str], text: str) -> bool:
    """``text`` negates ``pattern`` in some clause ("I won't cancel", "not to 12 Oak St")."""
    compiled = re.compile(pattern, re.IGNORECASE) if isinstance(pattern, str) else pattern
    for sentence in sentences(text):
        for clause in clauses(sentence):
            for match in compiled.finditer(clause):
                if _negated_at(clause, match.start()):
                    return True
    return False


def reports(message: str, obstacle: str) -> bool:
    """The message reports the obstacle (positive and negative phrasings)."""
    if OBSTACLES[obstacle].search(message):
        return True
    return obstacle == "unavailable" and negates(AVAILABLE, message)
