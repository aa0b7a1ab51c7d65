"""How the scripted retail user reads an agent message: what it asks, what it proposes, what it reports.

Decided from the message's structure, not from trigger words, and deterministic (no LLM):

* a message is cut into sentences and a sentence into clauses (at ``,;:`` and "but", "or", "and"); only
  *requests* can ask: questions (also by inversion, "Shall I ...", when the "?" ends a later sentence),
  imperatives ("tell me ...", "pls share ..."), and statements that ask ("let me know ...", "I'll need either
  ...", "you can send me ...", "... is required"); a statement that mentions an email asks nothing;
* a request asks for a slot (:data:`SLOTS`) when it names the slot by any of its synonyms, as whole words
  (no trigger inside another word: "reasonable" names no reason, "zipper" no zip code), and the name is not
  negated in its clause ("no need for your email, just your name and zip code" asks for the name and zip);
  alternatives ("your email or your name and zip code") ask for each, and a request naming none that points
  back ("... Which can you give me?") asks for those the sentence before named;
* a confirmation request (:data:`CONFIRM`, not inside a wh-question: "which card should I use?" asks for a
  card) is a proposal; :func:`affirmed` says whether a proposal states an action or a detail without
  negating it ("I will not cancel order ..." proposes no cancellation); the user reads a proposal that names
  no order ("shall I go ahead?") together with the message before it;
* an obstacle (:data:`OBSTACLES`: not found, not available, balance too low) is reported by any sentence,
  with positive or negative phrasings ("isn't available", "no <variant> in stock", "doesn't cover", "can only
  cover $5", "I'm not seeing #W...", "returned nothing").

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
    r"\?|^\W*(?:shall|should|may|can|could|would|will|do|does|did) (?:i|we|you)\b"
    # an imperative, maybe after a softener ("please", "just", "so", "now")
    r"|^\W*(?:(?:please|pls|plz|just|simply|now|so|then|ok(?:ay)?|and)\s+)*(?:tell|give|send|share|provide|confirm|type|enter|list|say|"
    r"specify|name|write|spell|verify|choose|pick|select|describe|explain|reply|respond|answer)\b"
    r"|\b(?:please|pls|plz|kindly)\b(?! (?:note|be aware|bear|hold|wait|allow|stand by|rest assured))"
    r"|\b(?:could|can|would|will) you\b|\bmay i (?:have|ask|get|know|see)\b"
    r"|\b(?:i|we)(?:'ll| will|'d| would)?(?: just| only| first| also| still| now)? (?:need|require) (?:your|you to|the|a|an|either|both|one of|some|to (?:know|have|get|see|hear))\b"
    r"|\byou (?:can|could|may) (?:just )?(?:give|send|share|provide|tell|let|type|write)\b"
    r"|\b(?:let me know|tell me|inform me|fill me in|walk me through)\b|\blet(?:'s| us) (?:start|begin) with\b"
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
        "order": r"\border (?:id|ids|number|numbers|code|reference|ref)s?\b|\border (?:#|no\.?|nr\.?)(?!\w)|\b(?:which|what) (?:order|one|purchase)s?\b"
        r"|\bwhich of (?:your|the|those|these) (?:orders|purchases)\b|\border (?:is it|is this|are you referring|do you mean)\b"
        r"|\b(?:the|your) order'?s? (?:id|number|reference)\b|\bidentify the order\b|\bwhich (?:of them|one of)\b"
        r"|\b(?:number|id|reference|code) (?:of|for|on|from|attached to|associated with|linked to) (?:the|your|that|this) (?:order|purchase)\b"
        r"|\b(?:its|their) (?:order )?(?:number|id|reference)\b"
        r"|\b(?:specify|identify|clarify|indicate|name|point (?:me )?to) (?:the|which|your|that) (?:order|purchase)\b",
        "reason": r"\breasons?\b|\bwhy\b|\bwhat made you\b|\bwhat(?:'s| is) (?:prompting|behind|wrong|the matter)\b"
        r"|\bmotivat\w*|\bwhat (?:led|brought) you\b|\bhow come\b|\bcauses?\b"
        r"|\bno longer (?:need|want)\w*|\bby (?:mistake|accident)\b|\bmistaken(?:ly)?\b"  # the reasons offered
        r"|\bwhat\b[^?.!]{0,20}\b(?:prompt|caus|led|brought|made|motivat|trigger)\w*",
        "address": r"\b(?:new |shipping |delivery |postal |street |mailing )?(?:address(?:es)?|addr)\b"
        r"|\b(?:ship|send|deliver|mail)(?:ed|ing)? (?:it |them |the order |your order |the package |the items )?to\b"
        r"|\bwhere\b[^?.!]{0,40}\b(?:ship|sen[dt]|deliver|go|arriv|mov|liv|relocat|head|mail|forward)\w*"
        r"|\bmoved\b|\bnew (?:location|place|home|residence|destination)\b|\bdestination\b|\bwhere to\b"
        r"|\b(?:shipping|delivery|mailing|postal|forwarding) (?:details|info|information|location|place)\b",
        "payment": r"\bpay(?:s|ing|ment|ments)?\b|\bpaid\b|\bcards?\b|\bpaypal\b|\bsettle\b|\bcharg(?:e|es|ed|ing)\b"
        r"|\bbill(?:ed|ing)?\b|\brefund(?:s|ed|ing)?\b|\breimburs\w*|\b(?:which|what) (?:method|account)\b"
        r"|\bcover(?:ed|ing)? (?:the )?(?:difference|cost|amount)\b|\bfund(?:s|ed|ing)?\b|\bcredited\b"
        # the money itself: a request about where it comes from or goes to asks which method
        r"|\bmoney\b|\bdifference\b|\bthe extra\b|\bextra (?:cost|charge|amount|money)\b",
    }.items()
}
# Words that make an "address" an email address, not a street address.
EMAIL_CONTEXT = re.compile(
    r"\be-?mail|\blog ?-?in|\bsign(?:ed)? (?:up|in)|\bregistered|\bon file", re.IGNORECASE
)
CONFIRM = re.compile(
    r"\bconfirm\w*|\bproceed\w*|\bgo ahead\b|\bgo-ahead\b"
    # "may I know/ask/have ..." asks for information, not for a yes
    r"|\b(?:shall|should|may|can) (?:i|we)\b(?! (?:know|ask|have|get|see|check|find|verify|learn|hear)\b)"
    # "may I request your email?" asks; "shall I request an exchange / a return?" proposes
    r"(?! request\b(?! (?:an?|the) (?:exchange|return|refund|cancell?ation)))"
    r"|\bok(?:ay)? (?:to|with|if)\b|\bis (?:this|that|everything|all of this|all this|it) (?:ok|okay|correct|right|alright|all right|fine|accurate|good)\b"
    r"|\b(?:does|do|did) (?:this|that|these|those|everything|it|all|all of this)(?: (?:above|below|here|i (?:said|described|listed)))? (?:look|sound|seem)\b"
    r"|\b(?:look|looks|sound|sounds|seem|seems) (?:right|good|correct|ok|okay|fine|alright|all right)\b"
    r"|\bdo you (?:agree|approve|accept|want me|consent)\b|\b(?:would|do) you like me to\b|\bwant me to\b"
    r"|\bsound good\b|\byes ?/ ?no\b|\byes or no\b|\bare you sure\b|\bauthori[sz]\w*|\bapprov\w*"
    r"|\bgreen light\b|\bhappy (?:for me )?to\b|\bright\?|\bcorrect\?|\bok(?:ay)?\?|\bagreed\?|\bdeal\?"
    r"|\b(?:everything|all|this|that|these)(?: all)? (?:ok|okay|correct|right|good|fine|accurate)\?"
    r"|\bgive (?:me )?the (?:ok|okay|go)\b|\bsay (?:yes|the word)\b"
    r"|\b(?:say|reply|answer|respond|type|write|send)(?: with)? [\"'*“]*yes\b"
    r"|\b(?:does|do|would|will|can) (?:that|this|it|these|those|everything) work\b|\bwork for you\b",
    re.IGNORECASE,
)
MORE = re.compile(
    r"\banything else\b|\bsomething else\b|\bany other\b|\bis that all\b|\bwhat else\b|\bfurther (?:help|assistance)\b",
    re.IGNORECASE,
)
_NT = r"(?:n[o'’]?t|[’']t|not)"
OBSTACLES: dict[str, re.Pattern[str]] = {
    "not_found": re.compile(
        r"\bnot (?:be )?(?:found|locate|find|exist|match|in (?:our|the) (?:system|records|database))"
        rf"|\b(?:could|can|was|were|did|does|do|is|are){_NT} (?:be )?(?:find|found|locate|located|match|matched|look up|retrieve|exist|show up|turn up|appear|come up|in our|in the (?:system|records|database))"
        r"|\b(?:couldn'?t|can'?t|cannot|unable to|failed to|didn'?t) (?:find|locate|match|look up|retrieve|see)"
        r"|\bno (?:account|user|order|match|record|result|trace|such order)s?\b|\bnothing (?:under|with|for|comes up|turned up|matches)"
        r"|\bnot (?:recogni[sz]ed|on (?:file|record))\b|\b(?:unknown|invalid|doesn'?t exist|does not exist)\b"
        r"|\b(?:doesn[’']?t|does not|don[’']?t|do not) (?:seem|appear) to (?:exist|be (?:there|in|on|valid|real|ours))"
        r"|\b(?:isn[’']?t|is not|aren[’']?t|not) (?:showing|coming|turning|popping) up\b"
        r"|\bfound nothing\b|\bnothing (?:was |is )?found\b|\bturned up nothing\b|\bno results?\b"
        # a search that "returned nothing", "came back empty", "gave zero results"
        r"|\b(?:return(?:s|ed)?|give[sn]?|gave|brings?|brought|yield(?:s|ed)?|show(?:s|ed)?|pull(?:s|ed)?"
        r"|c[oa]mes?)(?: back| up)?(?: with)? (?:nothing|no (?:results?|matches|hits|records?)|zero results)\b"
        r"|\bc[oa]me(?:s)? (?:back|up) empty\b"
        r"|(?:\bnot|n[’']t|\bno way to|\bunable to|\bcannot)\b[^.?!]{0,24}\b(?:find(?:ing)?|locat(?:e|ing)|exist(?:ing)?"
        r"|match(?:ing)?|retriev(?:e|ing)|see(?:ing)?|spot(?:ting)?|pull(?:ing)? (?:it |that )?up|be (?:an?|any) order)\b"
        r"|\bno sign of\b|\bno (?:such )?#?[a-z]*\d{5,}"  # "there's no #W1234567 on your account"
        r"|\b(?:not|isn[’']?t|wasn[’']?t) (?:a |an )?(?:valid|real|correct|known|existing|recogni[sz]ed)\b",
        re.IGNORECASE,
    ),
    "unavailable": re.compile(
        r"\bunavailable\b|\bout[ -]of[ -]stock\b|\b(?:we'?re|we are|we'?ve run|we have run|we ran|all) (?:all |currently |completely |now |just )?out of\b|\b(?:sold|run|ran|running|runs) out\b|\bsold[ -]out\b|\bno longer (?:available|offered|sold|in stock|carried|stocked)"
        r"|\bnot (?:currently |presently )?(?:available|in stock|offered|sold|possible to get|stocked|orderable)"
        r"|\b(?:isn|aren|wasn|weren)[’']?t (?:currently |presently )?(?:available|in stock|offered|sold|stocked|orderable)"
        r"|\b(?:can|could)(?:[’']t|n[’']t|not| not) (?:be )?(?:ordered|selected|chosen|supplied|offered|shipped|had|purchased|bought|obtained|sourced"
        r"|provided|fulfilled|added|switched to|got|gotten)"
        r"|\bno (?:stock|availability|inventory)\b|\bnone (?:left|in stock)\b"
        # the variant's options ("color: red, size: L") may sit between "no" and "in stock"; no verb may
        r"|\bno\s(?!(?:problem|worries|worry|issue|doubt|question|need|matter|change)s?\b)"
        r"(?:(?!\b(?:is|are|was|were|will|and|but|so|because|if)\b)(?:[^.?!]|\.(?=\w))){1,80}?"  # "1.5L" is no stop
        r"\b(?:left )?(?:in stock|available)\b",
        re.IGNORECASE,
    ),
    "balance": re.compile(
        r"\bnot (?:enough|sufficient|cover|large enough|high enough|big enough)|\binsufficient\b"
        rf"|\b(?:does|do|will|would|can|could){_NT} (?:fully )?(?:cover|have enough|suffice|pay for)"
        r"|\b(?:doesn'?t|won'?t|can'?t|cannot|isn'?t) (?:fully )?(?:cover|have enough|enough|suffice|sufficient)"
        r"|\btoo (?:low|small|little)\b|\bexceeds?\b|\bshort (?:of|by)\b|\b(?:is|are|falls?|fell|comes? up|runs?) short\b"
        r"|\bonly (?:has|holds|contains|have)\b|\bonly (?:\$|usd ?)?\d|\b(?:larger|greater|more|higher|bigger) than\b"
        r"|\bless than\b|\bnot (?:enough )?funds\b|\blacks?\b"
        r"|(?:\bnot|n[’']t|\bcannot|\bunable to)\b[^.?!]{0,24}\b(?:cover|pay|paid|fund|afford|enough|suffic)\w*",
        re.IGNORECASE,
    ),
}
# In a sentence about the gift card, its balance too low said as a card that cannot be used ("the gift card
# won't work", "I can't charge it to the gift card") or as a small balance ("its balance is just $5.00").
BALANCE_TOPIC = re.compile(r"\bgift ?cards?\b|\bbalance\b", re.IGNORECASE)
BALANCE_SENTENCE = re.compile(
    r"(?:\bnot|n[’']t|\bcannot|\bunable to|\bno way to)\b[^.?!]{0,24}\b(?:charg|us(?:e|ed|ing)\b|appl(?:y|ied)\b"
    r"|put\b|bill|draw|tak(?:e|en)\b|work|go through|process|be enough|suffice"
    r"|do\b(?=\s*(?:[:;,.!-]|for\b|here\b|$)))"
    r"|\b(?:only|just|merely)\s+(?:cover|pay|fund|go toward|take care of)\w*"
    r"|\b(?:only|just|merely|a mere|no more than)\s+(?:has |holds |contains |have |carries |got |left |remaining )?(?:\$|usd ?)?\d",
    re.IGNORECASE,
)
# "We don't have / no longer carry the X in stock": a negated having, in a sentence about stock or options.
NOT_CARRIED = re.compile(
    r"(?:\bno longer|\bcannot|\bnot|n[’']t)\b[^.?!]{0,30}\b(?:have|carry|stock|offer|sell|supply|provide|get|buy|purchase)\b",
    re.IGNORECASE,
)
STOCK_TOPIC = re.compile(
    r"\bin stock\b|\bavailab\w*|\bstock\b|\bany ?more\b|\bvariant|\bversion|\boption|\bcolou?r|\bsize\b"
    r"|\bmodel\b|\bstyle\b|\bright now\b|\bat the moment\b|\bcurrently\b|\bat (?:this|present)\b|\bfor now\b",
    re.IGNORECASE,
)
# "available" / "in stock" after a negation in its clause ("we do not have that colour available").
AVAILABLE = re.compile(r"\bavailable\b|\bin stock\b|\bstocked\b|\bon offer\b", re.IGNORECASE)


PRONOUN = re.compile(
    r"\b(?:it|that|this|they|them|those|these|one|either|both|whichever)\b|^\W*which\b(?!\s+(?:of\s+)?(?:your|the|my)\b)",
    re.IGNORECASE,
)
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


# Where money goes is a payment decision, not a shipping one ("where should the money go?").
MONEY_TOPIC = re.compile(
    r"\bmoney\b|\brefund\w*|\bdifference\b|\bpa(?:y|id)\w*|\bcharg\w*|\bcredit", re.IGNORECASE
)
STREET_ADDRESS = re.compile(r"\baddress|\bship\w*|\bdeliver\w*|\bmov(?:e|ed|ing)\b|\bliv\w*", re.IGNORECASE)
# A bare "which one(s)" points back at the choices just named, not at an order.
BARE_WHICH = re.compile(r"\bwhich (?:one|ones)\b", re.IGNORECASE)
# An open question for a decision that names no topic ("What do you want to use?", "Which would you prefer?"):
# it asks about the topic the sentence before named.
DECISION = re.compile(
    r"^\W*(?:so |and |then )?(?:what|which|how)\b[^?.!]*\b(?:use|want|prefer|like|choose|pick|go with|do)\b",
    re.IGNORECASE,
)


def _slots_named(sentence: str) -> set[str]:
    named: set[str] = set()
    for clause in clauses(sentence):
        for name, pattern in SLOTS.items():
            if name == "address" and EMAIL_CONTEXT.search(clause):
                continue  # "the address you signed up with" is an email
            if name == "address" and MONEY_TOPIC.search(clause) and not STREET_ADDRESS.search(clause):
                continue  # "where should the money go?" asks where the money goes
            if _named(pattern, clause):
                named.add(name)
    return named


def asked_slots(message: str) -> set[str]:
    """The slots the message's requests ask for; a request that names none but points back ("I need a
    reason. What is it?") asks for those the sentence before it named."""
    asked: set[str] = set()
    before: set[str] = set()
    for sentence in sentences(message):
        named = _slots_named(sentence)
        if named == {"order"} and before and "order" not in before and BARE_WHICH.search(sentence):
            named = set()  # "I have to pick a reason. Which one fits?" asks for the reason
        if is_request(sentence):
            points_back = PRONOUN.search(sentence) or (
                DECISION.search(sentence) and not MORE.search(sentence)
            )
            asked |= named or (before if points_back else set())
        before = named
    if "email" in asked:
        asked.discard("identity")
    return asked


# "yes or no" / "yes/no" asks for a yes across the clause cut at "or"
YES_NO = re.compile(r"\byes\s*(?:or|/)\s*no\b", re.IGNORECASE)
WH_QUESTION = re.compile(r"^\W*(?:what|which|where|when|how|who|whom|whose|why)\b", re.IGNORECASE)


def _asks_yes(sentence: str) -> bool:
    """A request for a yes: a confirmation phrase in a clause that is not a wh-question ("which card should I
    use?" asks for a card)."""
    if not is_request(sentence):
        return False
    return YES_NO.search(sentence) is not None or any(
        CONFIRM.search(c) and not WH_QUESTION.search(c) for c in clauses(sentence)
    )


def confirmation_request(message: str) -> bool:
    """Some request of the message asks for a yes."""
    return any(_asks_yes(s) for s in sentences(message))


# What a yes/no question must point at to be about the proposal: it ("that", "this", "everything"), the agent
# doing it ("for me to", "I do"), or the user's assent itself ("a yes", "your OK", "the go-ahead").
ABOUT_PROPOSAL = re.compile(
    r"\b(?:that|this|it|these|those|everything|all (?:of )?(?:that|this|the above))\b|\bfor me to\b|\bme to\b"
    r"|\b(?:i|we) (?:do|go|submit|process|make|put|place|start|finali[sz]e)\b",
    re.IGNORECASE,
)
ASSENT = re.compile(
    r"\b(?:a|an|your|the) (?:yes|ok|okay|go-?ahead|green light|approval|consent|permission|sign-?off|blessing)\b",
    re.IGNORECASE,
)
# Yes/no questions that ask about the user, not for a decision ("Do you have any questions about that?").
ABOUT_USER = re.compile(
    r"^\W*(?:do|did|does|have|has) you (?:have|remember|recall|know|see|need|still|get|receive|use)\b"
    r"|\bany (?:questions|concerns|other|more)\b",
    re.IGNORECASE,
)
FRAGMENT_WORDS = 4  # "Good to go?", "Sound okay?", "All set?": a short yes/no question about what was said


def assent_request(message: str) -> bool:
    """A request for the user's assent that is not a fixed phrase: a yes/no question about what was just said
    ("Are you good with that?", "Ready for me to do it?", "Good to go?") or a request for the yes itself ("I
    just need your OK"). It names no slot and is no wh-question ("Do you have the order number?" asks for a
    number); whether there is a proposal to assent to is the caller's to decide."""
    for sentence in sentences(message):
        if (
            not is_request(sentence)
            or _slots_named(sentence)
            or MORE.search(sentence)
            or ABOUT_USER.search(sentence)
        ):
            continue
        if ASSENT.search(sentence):
            return True
        question = sentence.rstrip().endswith("?") and not WH_QUESTION.search(sentence)
        if not question or YES_NO.search(sentence) is None and re.search(r"\bor\b", sentence, re.IGNORECASE):
            continue  # "... or ...?" offers alternatives
        # a polar question, or an elliptical one ("Ready for me to do it?" for "Are you ready ...")
        if ABOUT_PROPOSAL.search(sentence) or len(re.findall(r"[A-Za-z']+", sentence)) <= FRAGMENT_WORDS:
            return True
    return False


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
    if obstacle == "balance":
        return any(BALANCE_TOPIC.search(s) and BALANCE_SENTENCE.search(s) for s in sentences(message))
    if obstacle != "unavailable":
        return False
    carried = any(NOT_CARRIED.search(s) and STOCK_TOPIC.search(s) for s in sentences(message))
    return carried or negates(AVAILABLE, message)
