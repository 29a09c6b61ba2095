"""What an agent's reply does, read from its text: the one place the pipeline reads an agent's wording.

`classify_reply(text)` returns a subset of REPLY_LABELS:
- `asks_confirmation`: asks the user to approve an action the agent is about to take ("Want me to cancel it?");
- `claims_success`: says a requested action has been carried out ("Your order has been canceled.", "Refund issued");
- `refuses`: declines or gives up on the request ("I can't change a Basic fare", "I've escalated it to a supervisor");
- `asks_for_information`: asks for a fact, a choice or a clarification ("Which order?", "Please send the postcode").

The reply is cut into clauses (sentences, semicolons, dashes, line breaks, "but"/"though"); each clause is read for
its mood (a question or a request addressed to the user, a statement, a plan) and what it is about (an action the
agent would take, a detail the agent needs, a completed action, an impossibility). It is measured on a labelled
corpus of other models' replies (sim_pipeline_tests/protocol/replies.jsonl; `make bench` reports precision and
recall per label), never on the embedded agent's own phrasing.

`claims_handoff(text)` says whether a reply tells the user the request was handed to a person or a team ("I've
escalated it to a supervisor", "I'm transferring you to billing", "a specialist will contact you"): a claim only a
hand-off tool's result makes true (protocol/careful.py fails it otherwise). It is read apart from the labels, since
such a reply is also a refusal of the request itself.

A run with a real agent may have a model read its replies instead (the registry's `reply_classifier`,
models/reply_reader.py): inside `read_by(table)`, a reply the table holds takes the model's labels (and
`SAYS_CANNOT`, `CLAIMS_HANDOFF` from it), every other reply is read by the rules below.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from functools import lru_cache

ASKS_CONFIRMATION = "asks_confirmation"
CLAIMS_SUCCESS = "claims_success"
REFUSES = "refuses"
ASKS_FOR_INFORMATION = "asks_for_information"
REPLY_LABELS: tuple[str, ...] = (ASKS_CONFIRMATION, CLAIMS_SUCCESS, REFUSES, ASKS_FOR_INFORMATION)
SAYS_CANNOT = "says_cannot"  # a model reader's answer to `says_cannot` (never among classify_reply's labels)
CLAIMS_HANDOFF = "claims_handoff"  # a model reader's answer to `claims_handoff` (never among classify_reply's labels)
_READ_BY: ContextVar[Mapping[str, frozenset[str]] | None] = ContextVar("reply_labels", default=None)


@contextmanager
def read_by(table: Mapping[str, frozenset[str]]) -> Iterator[None]:
    """Within the block, the replies in `table` take its labels (a model read them); the rules read the rest."""
    token = _READ_BY.set(table)
    try:
        yield
    finally:
        _READ_BY.reset(token)


def _model_labels(text: str) -> frozenset[str] | None:
    table = _READ_BY.get()
    return table.get(text) if table is not None else None


def _re(pattern: str) -> re.Pattern[str]:
    # Case-sensitive on purpose: clauses are lower-cased once (classify_reply), which is about twice as fast as
    # IGNORECASE over these alternations.
    return re.compile(pattern)


# Verbs of the actions support agents take for users, as past participles / past tense.
_DONE_VERBS = (
    r"(?:cancell?ed|canceled|refunded|issued|reissued|processed|updated|changed|modified|amended|created|opened|filed|"
    r"submitted|added|granted|assigned|removed|deleted|revoked|disabled|enabled|activated|deactivated|reactivated|"
    r"reset|unlocked|locked|frozen|unfrozen|blocked|unblocked|restarted|rebooted|redeployed|deployed|rolled back|"
    r"rotated|sent|emailed|resent|re-sent|scheduled|rescheduled|rebooked|booked|moved|switched|corrected|fixed|"
    r"resolved|closed|applied|credited|reversed|released|transferred|paid|approved|installed|uninstalled|"
    r"provisioned|configured|rerouted|redirected|returned|replaced|renewed|extended|upgraded|downgraded|restored|"
    r"recovered|merged|placed|confirmed|completed|finished|done|sorted|taken care of|set up|turned off|turned on|"
    r"switched off|switched on|raised|logged|registered|enrolled|waived|adjusted|increased|"
    r"reduced|lifted|cleared|flushed|purged|archived|renamed|saved|mapped|shared|invited|generated|initiated|"
    r"started|stopped|paused|resumed|killed|terminated|suspended|reinstated|refreshed|synced|published|pushed|"
    r"scaled|patched|ordered|upgraded|migrated|rotated|bumped|recorded|"
    r"enabled|executed|marked|rolled|bumped|resized|taken|split|unsubscribed|subscribed|cancled|canceld|"
    r"posted|loaded|topped up|issued|allocated|attached|linked|unlinked|verified|whitelisted|allowlisted|"
    r"geschlossen|storniert|aktualisiert|erledigt|gesendet|annulé|annulée|envoyé|hecho|cancelado|enviado|fatto|"
    r"inviato|annullato)"
)
_DONE_VERBS = r"(?:re-?|un)?" + _DONE_VERBS
_DONE_PAST = _re(
    r"\b(?:i|we)(?:\s*(?:'ve|’ve|have|had))?\s+(?:just\s+|now\s+|already\s+|successfully\s+|gone ahead and\s+|"
    r"went ahead and\s+|managed to\s+\w+\s+|been able to\s+\w+\s+)?" + _DONE_VERBS.replace("(?:", "(?:", 1) + r"\b")
_FIRST_PERSON_PAST = _re(  # "I made an exception and removed it": any past tense the agent says it did
    r"\b(?:i|we)(?:'ve|’ve| have)?\s+(?:just\s+|also\s+|now\s+)?(?!(?:looked|checked|searched|tried|noticed|reviewed|"
    r"attempted|verified|asked|contacted|escalated|forwarded|passed|handed|referred|notified|flagged|reached|needed|"
    r"wanted|hoped|assumed|guessed|suspected|believed|wondered|used|received|understood|confirmed|seen|heard|"
    r"expected|planned|scheduled|drafted|prepared|staged|queued|requested|submitted)\b)(?:[a-z]{3,}ed|made|gave|put|"
    r"set|took|sent|did|ran|built|wrote|paid|split|cut|shut|froze|undid|redid)\b")
_GOT_DONE = _re(r"\bgot\s+(?:re-?|un)?(?:[a-z]{3,}ed|sent|paid|split|set)\b")
_MANAGED = _re(r"\b(?:i|we)\s+(?:managed|was able|were able)\s+to\b")
_PASSIVE_DONE = _re(
    r"(?:\b(?:has|have|had)|['’]s|['’]ve)\s+(?:now\s+|just\s+|successfully\s+|also\s+)?been\s+(?:\w+\s+){0,2}"
    + _DONE_VERBS + r"\b"
    r"|\b(?:is|are|was|were|'s|’s)\s+(?:now\s+|successfully\s+|officially\s+|all\s+)?" + _DONE_VERBS + r"\b"
    r"|\b(?:went|gone)\s+through\b|\bis now\b|\bare now\b")
_NP_WORD = r"(?!(?:there|are|is|was|were|will|no|not|any|some|two|three|several|to|how|who|if|when|i|we|you)\b)[\w#@./$€£,'’-]+"
_TERSE_DONE = _re(
    # "Refund issued", "Card frozen", "Restarted nginx": a noun phrase (or nothing) and the completed verb...
    r"^(?:" + _NP_WORD + r"\s+){0,3}?(?!scheduled (?:maintenance|downtime|outage))" + _DONE_VERBS
    + r"\b(?!\s+(?:links?|codes?|emails?|requests?|tokens?)\s+(?:are|is|will|can|expire))(?!\s*(?:to|by|on|at)\s*:)"
    # ... or a longer noun phrase closed by it: "Deployment of v3.14.2 to production completed."
    + r"|^(?:(?!(?:there|are|is|was|were|will|no|not|if|when|i|we|you)\b)[\w#@./$€£,'’-]+\s+){1,8}" + _DONE_VERBS
    + r"(?:\s+(?:successfully|as (?:you )?(?:asked|requested)))?\s*[.!]*$")
_DONE_WORDS = _re(
    r"^(?:all\s+)?(?:done|set|sorted|complete|completed|finished)\b|^\s*success(?:fully)?\s*[:!—-]|\ball (?:done|set)\b|\bgot it done\b|"
    r"\b(?:is|are|was|all)\s+(?:complete|completed|done|finished|in place|live|active again|back up)\b|"
    r"\bcomplete\s*[✅✔]|\bgood news\b.*\b(?:went through|is done|done)\b|\bup and running\b|\bback up and running\b|"
    r"\b(?:listo|erledigt|fatto|c'est fait|je l'ai fait|j'ai \w+|ich habe .* (?:aktualisiert|storniert|gesendet))|"
    r"\bpartial success\b|\bho (?:gaya|gayi|gaye)\b|\bkar (?:diya|di|diye)\b|\b(?:is|was) \w+ success?ful\b")
_NOT_CLAIM = _re(r"\blisto para\b|^\s*(?:i'm |we're |i am |all |everything'?s? )?ready to\b|\bper (?:the|our|your) (?:account |"
                 r"order |booking )?(?:history|records?|"
                 r"system|logs?)\b|\baccording to\b|\b(?:blocked|locked|frozen|restricted|prevented) by\b")
_NOT_DONE = _re(
    r"\b(?:not|n't|never|no longer|unable|can't|cannot|couldn't|wasn't|weren't|hasn't|haven't|isn't|aren't|won't|"
    r"failed|pending|in progress|being|still|yet|will|'ll|’ll|going to|gonna|about to|once|until|when|if|whether|"
    r"would|could|should|might|may|can|let me|want me|shall|ready to|plan|try|trying|attempt|already|before|after|"
    r"expected|usually|typically|normally|said|told you|mentioned|claimed|thought|means|meaning|currently|status|"
    r"located|scanned|spotted|then|nothing|nobody|no one|none|neither|nor)\b"
    # "no refund was issued", "no changes have been made": a negated subject (not "No problem, it was cancelled")
    r"|\bno\s+(?!problem|worries|worry)(?:[\w-]+\s+){0,2}(?:was|were|has|have|had|got|is|are)\b")
_HISTORY = _re(r"\bat (?:checkout|purchase|booking)\b|\bback in (?:january|february|march|april|may|june|july|august|september|"
               r"october|november|december|\d{4})\b|\b(?:on|since)\s+(?:\d|jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec|"
               r"monday|tuesday|wednesday|"
               r"thursday|friday|saturday|sunday)|\b(?:yesterday|last (?:week|month|year|monday|tuesday|wednesday|thursday|friday|"
               r"saturday|sunday)|\d+\s+(?:days?|weeks?|"
               r"months?|minutes?|hours?) ago)\b")
_STATE = _re(r"\b(?:currently|status|until|pending|awaiting|in progress|error|failed|failure|this week|next week|"
             r"for now|until further notice)\b")
_FAILED_AFTER = _re(r"\b(?:but|however)\b.*\b(?:failed|error|didn't go through|did not go through|bounced|"
                    r"was rejected|timed out)\b")
_AS_ASKED = _re(r"\bas (?:you )?(?:asked|requested)\b|\bper your (?:request|instructions)\b")
_EMOJI = re.compile(r"\s*[\u2600-\u27BF\U0001F300-\U0001FAFF]+\ufe0f?\s*")
_QUOTED = re.compile(r"\"[^\"]*\"|“[^”]*”")
_LOOKUP = _re(r"\b(?:i|we)(?:'ve|’ve| have)?\s+(?:looked|found|checked|searched|pulled|read|reviewed|located|"
              r"verified|confirmed that|seen|noticed|tried|attempted|forwarded|escalated|passed|handed|referred|"
              r"asked|contacted|notified|flagged|reached out)\b")

_CANT = _re(
    r"\b(?:can't|cannot|can not|cant|couldn't(?! (?:find|locate|verify|match|see|reach|connect|be (?:saved|found|"
    r"verified|processed)))|unable to|not able to|isn't able|am not able|won't be able|no longer (?:eligible|possible|"
    r"available|valid|supported)|max(?:imum)?\b.*\bi can (?:authori[sz]e|approve|refund|issue|offer)|"
    r"(?:is|are) (?:not|never) (?:granted|shared|given|allowed|done|processed|possible|supported|offered|available)|"
    r"(?:isn't|aren't|is not|are not|not) (?:covered|eligible|refundable|returnable|included|transferable)|"
    r"we (?:don't|do not|never) (?:process|do|allow|offer|support|share|give|grant)|"
    r"you(?:'ll| will|'d| would)? (?:need|have) to (?:contact|call|visit|email|reach|ask|speak|go to|open|file|submit)|"
    r"nothing (?:more |left |else |further )?(?:for me |i can |we can )?(?:to \w+|i can do)|nothing further|"
    r"nothing (?:i|we) can (?!help with\b)\w+|"
    r"(?:escalated|forwarded|passed|handed|handing|passing|referred|sent (?:it|this|them)? ?up)\b.*\bto (?:a|an|the|"
    r"our|your) (?:[\w-]+\s+){0,3}(?:supervisor|manager|team|specialist|colleague|agent|department|desk|dba|engineer|"
    r"human|pharmacist|librarian|doctor|nurse|clinician|representative|rep|expert|advis[eo]r|staff member)s?|"
    r"(?:passed|handed|forwarded|sent) (?:it|this|that|your (?:request|case|ticket|question)) (?:on|along|over|up) to\b|"
    r"no can do|(?:wouldn't|would not|won't|will not|didn't|did not) let (?:me|us)\b|"
    r"not (?:authori[sz]ed|permitted|allowed|possible|eligible|something i can|something we can|within my)|"
    r"(?:isn't|aren't|is not|are not|wasn't|not) (?:possible|allowed|permitted|eligible|available (?:to|for))|"
    r"non-?(?:refundable|transferable|changeable|returnable|cancell?able)|(?:doesn't|does not|don't|do not) "
    r"(?:permit|allow|support)\b|(?:is|are) (?:blocked|prevented|restricted) by|"
    r"not the right (?:one|person|team|place)|passing you (?:over )?to|transferr?(?:ing)? you (?:over )?to|"
    r"(?:not|aren't|isn't) something (?:i|we|i'm|i am|we're|we are) (?:can|able|allowed)|"
    r"beyond (?:my|what i)|outside (?:of )?(?:my|what i|the scope)|don't have (?:the )?(?:ability|access|permission|"
    r"authority|rights)|do not have (?:the )?(?:ability|access|permission|authority)|no (?:way|longer possible)|"
    r"not in a position|nothing (?:more|left|else) (?:for me |i can |we can )?(?:to do|to cancel|to refund|i can do)|"
    r"doesn't allow|does not allow|don't allow|won't allow|not allowed|denied|declined|refuse|must decline|"
    r"have to decline|try (?:again )?later|contact us again|stopping here|giving up|(?:i'm|i am) afraid (?:i|we|that|this|"
    r"it)?\s*(?:can't|cannot|won't|isn't|is not|not|no|am not)|only help with|only assist with|can only help|"
    r"just the \w+ bot|"
    r"can only assist|no puedo|kann ich (?:\w+ )*nicht|leider|non posso|je ne peux|impossible|"
    r"need(?:s)? (?:a |an |to be )?(?:supervisor|manager|human|specialist|approval)|requires? (?:a |an )?"
    r"(?:supervisor|manager|signed|approval)|must be done|has to be (?:done|ordered|filed))\b")
# A failed attempt ("I wasn't able to", "it didn't go through"): a refusal unless the agent says it is retrying.
_FAILED_ATTEMPT = _re(r"\b(?:(?:wasn't|was not|weren't|were not) able to|(?:did not|didn't|does not|doesn't) go through)\b")
_RETRYING = _re(r"\bretry(?:ing)?\b(?! later)|\btrying (?:it )?(?:again|once more)\b|\b(?:let me|i'll|i will) (?:try|give it) "
                r"(?:it )?(?:again|once more|another (?:go|try))\b(?! later)")
_ALREADY = _re(r"\balready\s+(?:been\s+)?(?:\w+ed|departed|shipped|closed|settled|used|expired|passed|done|gone|sent|"
               r"paid|taken)\b|\b(?:has|have|had|is|are|was|were|'s|’s)\s+(?:\w+\s+)?already\b|\bclosed\b.*\bago\b")
_PRECONDITION = _re(r"\bwithout (?:verifying|verification|confirming|knowing|your|their|his|her|a valid|the (?:order|account|"
                   r"booking|ticket|reference) (?:number|id)|an? (?:[\w-]+ ){0,2}(?:number|id|email|address|code|name))|"
                   r"\buntil (?:you|i)\b|^\s*(?:normally|usually|typically)\b|\b(?:can't|cannot|can not) be undone\b")
# A hand-off the agent says it made (or is making): to a person or a team, in the past, the perfect, the progressive
# or a firm "I'll"; the receiver is named for verbs that also move money or things ("transferred the funds").
_PEOPLE = (r"(?:colleague|supervisor|manager|specialist|team|department|dept|agent|human|person|someone|somebody|"
           r"representative|rep|staff|desk|tier|engineer|expert|support|billing|escalations?|on-call|senior|lead|"
           r"coworker|co-worker|concierge|reception|pharmacist|doctor|nurse|adjuster|officer|administrator|admin|"
           r"approver|reviewer|underwriter|technician|dispatcher|them|him|her)s?")
_YOU_TO = r"\s+you\b.*\b(?:to|over|with|through)\b"  # "transferring you to billing", not "forward you the link"
_TO_PEOPLE = rf".*\b(?:to|with|along|over|on|for)\b.*\b{_PEOPLE}\b"
_HANDED_PAST = r"(?:forwarded|passed|handed|transferred|referred|routed|connected|assigned|flagged|raised|sent)"
_HANDING = r"(?:forwarding|passing|handing|transferring|referring|routing|connecting|assigning|flagging|raising|sending)"
_WE = r"\b(?:i|we)(?:'ve|’ve| have| had)?\s+(?:just\s+|now\s+|already\s+|also\s+|(?:gone|went) ahead and\s+)?"
_WE_NOW = r"\b(?:i'm|i’m|i am|we're|we’re|we are)\s+(?:now\s+|just\s+)?"
_WE_WILL = r"\b(?:i'll|i’ll|i will|we'll|we’ll|we will|let me)\s+(?:now\s+|go ahead and\s+|immediately\s+)?"
_BEEN = r"\b(?:has|have|had|is|are|was|were|'s|’s)\s+(?:now\s+|just\s+|already\s+)?(?:been|being)\s+"
_TERSE = r"^\W*(?:(?:ok|okay|nope|so|right|alright|done)[,!.]?\s+)?"
_HANDED = _re(
    rf"{_WE}escalated\b|{_WE_NOW}escalating\b|{_WE_WILL}escalate\b|{_BEEN}escalated\b|{_TERSE}escalat(?:ed|ing)\b|"
    rf"{_WE}{_HANDED_PAST}\b{_TO_PEOPLE}|{_WE_NOW}{_HANDING}\b(?:{_YOU_TO}|{_TO_PEOPLE})|"
    rf"{_WE_WILL}(?:forward|pass|hand|transfer|refer|route|connect|assign|flag|raise)\b(?:{_YOU_TO}|{_TO_PEOPLE})|"
    rf"{_BEEN}{_HANDED_PAST}\b{_TO_PEOPLE}|{_TERSE}{_HANDED_PAST}\b{_TO_PEOPLE}|"
    r"\b(?:you're|you’re|you are)\s+(?:now\s+)?being\s+(?:transferred|connected|passed|handed|routed)\b|"
    rf"\b(?:a|an|our|the|one of our)\s+(?:[\w-]+\s+){{0,2}}{_PEOPLE}\s+(?:[\w-]+\s+){{0,3}}will\s+(?:now\s+)?"
    r"(?:contact|call|reach out to|get back to|follow up with|email|be in touch with|take (?:it|this) from here)\b")
# Passing on the user's feedback is no hand-off of the request.
_FEEDBACK = _re(r"\b(?:feedback|comments?|suggestions?|compliments?|kind words)\b")
# The user is the one to reach someone ("please contact our billing team, who will get back to you").
_USER_REACHES = _re(r"\b(?:please|you (?:can|could|may|might|should|will need to|'ll need to|need to)|feel free to|just)\s+"
                    r"(?:\w+\s+)?(?:contact|call|email|reach out|reach|visit|message|ask)\b|\bcontact us\b")
_FIND_FAIL = _re(r"\b(?:couldn't|could not|can't|cannot|unable to|wasn't able to|didn't|did not)\s+(?:find|locate|"
                 r"see|match|verify)\b")
_GIVE_UP = _re(r"\b(?:so|and)\s+(?:i'm|i am|we're|we are|i)\s+(?:unable|not able|can't|cannot)|"
               r"\bcan't (?:go|help) (?:any )?further|\bunable to (?:help|go|proceed) further|\bplease contact\b")
_CONDITIONAL = _re(r"^\s*(?:if|when|once|unless|in case)\b")
# "I can't confirm whether it worked": uncertainty about the outcome, not a statement that it failed.
_UNSURE = _re(r"\b(?:can't|cannot|can not|couldn't|could not|unable to|not able to|not sure)\s+(?:\w+\s+)?(?:confirm|tell|"
              r"say|see|verify|know|be sure|be certain)\b.*\b(?:whether|if)\b|\bnot sure (?:whether|if)\b")

_ASK_ACTION = _re(
    r"\b(?:(?:would|do|did)\s+you\s+(?:like|want)\s+(?:me|us)\s+to|(?:want|like)\s+me\s+to|should\s+i|shall\s+i|"
    r"shall\s+we|should\s+we|(?:can|may|could)\s+i\s+(?!(?:get|have|ask|grab|help|assist|see|know|"
    r"check with)\b)\w+|ok(?:ay)?\s+(?:to|for me to|if i)|is\s+it\s+ok(?:ay)?\s+(?:to|if)|"
    r"(?:go ahead|proceed)(?:\s+with\s+\w+)?\s*\?|good to go|confirm\s*\?|^\s*permission to|"
    r"(?:please\s+)?(?:confirm|approve|reply\s+yes|say yes|say the word|give me the go-ahead|give the go-ahead)\b.*"
    r"\b(?:i'll|i will|and i|so i can|to proceed|before i)|^\s*approve this|"

    r"(?:let me know|lmk|tell me)\s+(?:if|whether|when)\s+(?:i should|you(?:'d| would)? (?:like|want)"
    r"(?!\s+(?:more|any|further|other)\b)|"
    r"(?:that's|that is|this is|it's) (?:ok|okay|fine|alright)|to (?:go ahead|proceed))|"
    r"(?:let me know|lmk|just say)\s+(?:and|&)\s+i(?:'ll| will)|(?:if (?:you|u)(?:'d| would)? like|if (?:you|u) want)(?!\s+(?:more|"
    r"any|further)\s+(?:details|info|information|help))(?:\s+\w+)*\s*"
    r"(?:[—-]|,)?\s*(?:just\s+)?(?:let me know|lmk|say so|tell me)|"
    r"would (?:that|this) (?:help|work|be ok|be okay|be alright)|does (?:that|this) (?:look right|work|sound good)|"
    r"(?:sound|sounds) good\s*\?|^\s*(?:ok|okay|alright|good)\s*\?|[,—-]\s*(?:ok|okay|alright|yes)\s*\?\s*$|"
    r"(?:want|need|like)\s+(?:one|it|that|them)\s*\?|can\s+i\s+(?:go ahead|start)|"
    r"(?:would you rather|(?:or )?would you prefer)\s+(?:that\s+)?(?:i|we)\b|before i (?:change|do|proceed|submit|send|make)|"
    r"if so,? i(?:'ll| will)|(?:confirm|approve)\s+and\s+i(?:'ll| will)|"
    r"(?:can you|could you|please)\s+confirm\s+(?:that\s+)?you(?:'d| would)?\s+(?:like|want)\b|"
    r"(?:can you|could you|please)\s+confirm\s+(?:that\s+)?(?:that's|that is|this is|it's)\s+what\s+you\s+(?:want|mean|"
    r"asked for)\b|"
    # "Would you like to start a return instead?": another action offered in place of the one refused
    r"\b(?:would you like|do you want|want) (?:me )?to \w+ (?:a|an|the) [\w\s-]{1,30}\binstead\s*\?|"
    r"\b(?:i|we)\s+can\b.*\bif\s+(?:you|u)(?:'d| would)?\s+(?:like|want)\b|are\s+you\s+(?:ok|okay|fine|happy)\s+with|"
    r"would\s+you\s+like\s+(?:one|it|that|them|a copy)\b|"
    r"if (?:you|u)(?:'d| would)? (?:like|want),?\s+(?:i|we)\s+(?:can|could)\b|"
    r"(?:would|will) it be (?:ok|okay|alright|all right|fine) if i|is it (?:ok|okay|alright|all right|fine) if i|"
    r"is now a good time|\b(?:needs?|just need|waiting (?:for|on))\s+(?:your|a)\s+(?:(?:explicit|express|written|final|"
    r"quick)\s+)?(?:go-?ahead|ok|okay|approval|"
    r"thumbs up|confirmation|sign-?off|green light)\b|do i have your (?:approval|permission|ok|okay|go-?ahead)|"
    r"as soon as you (?:confirm|say (?:yes|so|the word|go)|approve|give)|good to (?:go|proceed)\b|"
    r"\(?\b(?:y/n|yes/no|ja/nein|oui/non|s[ií]/no)\b\)?|\btype\s+[\"'“]?confirm|\breply\s+(?:1|yes|y)\b|"
    r"\b(?:accept|go|proceed|continue|approve|confirm)\s*\?\s*(?:\(.*\))?\s*$|"
    # other languages: "Soll ich das machen?", "Voulez-vous que j'annule ?", "¿Quieres que lo cambie?"
    r"\b(?:soll ich|sollen wir|darf ich|voulez-vous que|souhaitez-vous que|tu veux que|je peux \w+ \?|"
    r"quieres que|quiere que|desea que|confirmas\s*\?|d'accord\s*\?|te parece bien|le parece bien|"
    r"vuoi che|posso procedere|va bene\s*\?|ok\s*\?|okay\s*\?|soll ich\s*\?|zal ik|wil je dat ik)|"
    r"\bdo i go ahead\b|\bwould it help if i\b|\binterested\s*\??\s*$|\bgive me (?:a|the) (?:emoji|thumbs[ -]up|go|ok|"
    r"nod|green light|go-?ahead)|\b(?:just )?say (?:the word|yes|ok|okay|so|go|\"go\"|'go')|\breply\s+[\"'“]?(?:yes|ok|go|y|"
    r"confirm)\b|\bif (?:that's|that is|this is|it's|it is|that sounds|this sounds) (?:useful|helpful|ok|okay|fine|"
    r"alright|good|what you want)|\bor (?:do you want to|would you (?:like|rather) to)?\s*(?:review|wait|check|hold off|"
    r"think)|\bbefore i\b.*\b(?:correct|right)\s*\??\s*$|"
    r"\b(?:ok|okay|alright|fine|good)\s+(?:with\s+(?:you|that|this)|for you)\s*\??\s*$|\bgo (?:with|for) (?:that|it|this)\s*\?|"
    r"\bça (?:vous|te) va\b|\bprocedo\b|\bte transfiero\b|\bkar (?:doon|du|dun|dein|den)\b|\bbol dijiye\b|"
    r"\bbata dijiye agar\b|\bska jag\b|\bvill du att jag\b|\bquer que eu\b|\bczy mam\b|\bister misiniz\b|"
    r"\byou want (?:i|me) \w+|\b(?:give me a |a )?quick (?:yes|ok)\b|\bis your (?:go-?ahead|ok|okay|approval|yes|"
    r"confirmation)\b|\bpress \d\b|\b(?:happy|glad) to\b.*\bif (?:you|u)(?:'d| would)? (?:like|want)\b|"
    r"\bif [^,]{1,40} works for you,? i(?:'ll| will)\b)")
_OFFER = _re(r"\b(?:i can|i could|i'd|i would|i'm ready to|ready to|happy to|glad to|everything'?s (?:staged|ready|set|"
             r"lined up)|all set to|about to|what i'd do|proposed|the plan)\b")
_GO_AHEAD = _re(r"(?:\bjust )?(?:let me know|lmk)\s*[.!]?\s*$|\bplease confirm\s*[.!]?\s*$|\blet me know if you (?:want|'d like|"
                r"would like) (?:that|it|"
                r"this|me to)\b|\b(?:just )?say (?:yes|the word|go|so)\b|\bif that'?s (?:ok|okay|useful|helpful|what you want)")
_IMPERATIVE_ASK = _re(  # "Clear the Redis cache too? (y/n)": an action proposed as a bare question
    r"^\s*(?:cancel|add|clear|order|restart|rebook|refund|remove|send|book|upgrade|reset|unlock|close|delete|apply|"
    r"move|change|switch|schedule|submit|issue|open|create|file|escalate|freeze|unfreeze|reboot|deploy|roll back|"
    r"merge|extend|renew|block|unblock|swap|transfer|pay|ship|return|exchange|install|grant|revoke)\b[^?]*\?")
_OR_OTHER = _re(r",?\s+or\s+(?:to\s+)?(?:a |an |the )?(?:different|another|other)\b")  # "...on file, or a different one?"
_BUTTON = _re(r"\b(?:hit|click|press|tap|select)\s+(?:the\s+)?[\"“'‘]?(?:approve|confirm|yes|ok|accept|proceed)\b")
_WANT_ME = _re(r"\b(?:want|like)\s+(?:me|us)\s+to\b|\bshould\s+i\b|\bshall\s+i\b")
_WH = _re(r"^\s*(?:\W*\s*)?(?:(?:btw|by the way|also|oh|and|so|ok|okay|one more thing|quick q)[,:]?\s+)?(?:what|which|who|whom|"
          r"whose|when|where|why|how|what's|whats|which's|who's|where's|"
          r"how's|how many|how much)\b"
          # inside a clause: "..., what's your desk location", "If so, which card should it go to" (not a relative
          # clause such as "..., which can't be changed")
          r"|(?:(?:\bif (?:so|yes),?\s*|\balso,?\s+)which\b)|(?:,\s*|\band\s+|\balso,?\s+|\bif (?:so|yes),?\s*)(?:what|what's|"
          r"whats|where|when|how|which\s+(?:\w+\s+){1,3}"
          r"(?:should|do|did|would|is|are|was|were|can)|which\s+(?:one|of))\b")
_INVERTED = _re(r"^\s*(?:\W*\s*)?(?:(?:and|also|so|ok|okay|btw)[,:]?\s+)?(?:can|could|would|will|do|does|did|is|are|was|were|have|"
                r"has|may|might|should|"
                r"shall|care to|mind)\b(?!['’]t| not)")
# Without a question mark, only question word order with a subject counts ("did you buy it online"), not "Have a nice day".
_INVERTED_SUBJECT = _re(r"^\s*(?:\W*\s*)?(?:(?:and|also|so|ok|okay|btw)[,:]?\s+)?(?:can|could|would|will|do|does|did|is|are|"
                        r"was|were|have|has|may|might|should|shall)\s+(?:you|u|i|we|it|there|this|that|your|the|they)\b"
                        r"|^\s*(?:care to|mind)\b")
_REQUEST = _re(
    r"\b(?:please|pls|plz|kindly)\s+confirm\s+(?:your|the|that your|which|what|if|whether)\b|"
    r"\b(?:please|pls|plz|kindly)\s+(?:send|share|provide|give|tell|re-?check|double-?check|verify|"
    r"enter|reply with|let me know|type|upload|attach|paste|spell|include|specify|clarify|describe|forward)\b|"
    r"^\s*(?!give (?:me|us) (?:a|one) (?:moment|second|sec|minute|min)\b)(?:send|share|provide|give|tell|re-?check|double-?check|"
    r"verify|enter|upload|attach|paste|spell|specify|"
    r"clarify|describe)\s+(?:me|us|your|the|ur|a|an|over)\b|"
    r"\b(?:i(?:'ll| will)?|we(?:'ll| will)?)\s+(?:just\s+|still\s+|also\s+)?(?:need|require)\s+(?:your|the|a|an|to know|"
    r"to see|some|more)\b|"
    r"\bcould you (?:please )?(?:send|share|provide|give|tell|confirm|re-?check|double-?check|rephrase)\b|"
    r"\b(?:let me know|lmk|tell me)\s+(?:the|your|which|what|when|where|who|how)\b|"
    r"\bplease (?:say|enter|type|key in)\b|\bkya hai\b|\bkau?n ?sa\b|\bkonsa\b|\bme confirmas\b|\bme (?:das|dices|pasas)\b|"
    r"\bbata(?:yein|iye|o)\b|"
    r"^\s*[\w-]+(?:\s+[\w-]+)?\s+or\s+[\w-]+(?:\s+[\w-]+)?\s*\??\s*$|\bkannst du mir\b|\bpourriez-vous\b|\bpodría\b|\benv[ií]ame\b|"
    r"\bm[aá]ndame\b|\bdime\b|\bkun je\b|\bkunt u\b|"
    r"\b(?:maybe|please) try (?:another|a different|again with)\b|\btry (?:another|a different) (?:\w+ )?(?:address|email|"
    r"number|card|name)\b|\b(?:just )?to make sure\b.*\b(?:correct|right)\s*\??\s*$|\bd[ií]game\b|\bbitte (?:schick|sende|gib|nenne|teile)|"
    r"¿\s*(?:cu[aá]l|qu[eé]|d[oó]nde|cu[aá]ndo|c[oó]mo|qui[eé]n)|\bquel(?:le)? est\b|\bwie lautet\b|\bwelche[rsn]?\b.*\?|"
    r"\b(?:once|as soon as|when)\s+i\s+(?:have|get|receive)\s+(?:your|the)\b|"
    r"\b(?:i(?:'ll| will)?|we(?:'ll| will)?)\s+need(?:\s+(?:the following|a few things|some details|a few details))?\s*:|"
    r"\bneed (?:one|a|two) (?:more|last|few)? ?(?:thing|detail|piece)s?\b|"
    r"\bis (?:this|that) (?:the )?(?:correct|right)\b|\bdo you mean\b|\b(?:just )?to clarify\b|"
    # "I'm unable to look orders up without an order number": the detail it needs, asked for
    r"\b(?:can't|cannot|unable to|not able to)\b.*\bwithout (?:an?|the|your) (?:[\w-]+ ){0,2}(?:number|id|email|"
    r"address|code|name)\b|"
    # "And the reason for the return?": a bare noun phrase asked about
    r"^\s*(?:and|also|plus)\s+(?:the|your)\s+[\w\s'-]{1,40}\?\s*$|"
    r"\b(?:could|can|would) you (?:please )?(?:send|share|provide|give|tell|confirm|re-?check|double-?check|rephrase|"
    r"paste|upload|attach|describe|spell|check|verify|forward|clarify|specify)\b")
_WH_STATEMENT = _re(r"^\s*(?:(?:so|and|ok|okay)[,:]?\s+)?(?:what|how|when|where)\s+(?:i|we|you)\s+(?:can|could|will|'ll|did|found|"
                    r"see|need to do)\b"
                    r"(?!.*\?)")
_WH_OPENS = _re(r"^\s*(?:\W*\s*)?(?:(?:btw|by the way|also|oh|and|so|ok|okay|one more thing|quick q)[,:]?\s+)?"
                r"(?:what|which|who|whom|whose|when|where|why|how)\b")
_WH_ORDER = _re(r"\b(?:what|which|who|whom|whose|when|where|why|how)(?:'s|'re|s\b)|^\W*which\b|"
                r"(?:what|which|who|whom|whose|when|where|why|how)\b(?:\s+(?!(?:i|you|we|they|he|she|it|u)\b)[\w'-]+){0,3}?"
                r"\s+(?:do|does|did|is|are|was|were|can|could|would|should|will|have|has|u)\b|"
                r"^\W*(?:how (?:many|much|long|often|soon))\b")
_INFO_NOUN = _re(r"^\s*(?:[\w#.'-]+\s+){0,2}(?:number|#|id|name|email|address|date|code|username|reference|ticket|order|"
                 r"account|iban|postcode|zip)\s*\??\s*$")
_GENERIC_OFFER = _re(
    r"\b(?:anything else|something else|is there anything|any other (?:questions|issues)|anything more|further (?:questions|help|"
    r"assistance)|if you need (?:anything|more|further)|if there's anything|how (?:can|may) i (?:help|assist)|"
    r"what can i (?:help|do for)|hope (?:this|that) helps|feel free|need anything)\b")
_CLARIFY_WANT = _re(r"\bdo you have (?:another|a different|any other|an?)\b|\bwhat (?:exactly )?(?:would|do) you (?:like|want|"
                    r"need)|\bwhat (?:you|do you) need\b|"
                    r"\brephrase\b|\bwhich (?:one|size|option|store|card|laptop|server|account|order|booking)\b")
# "Is that correct?" after the agent restated what it will do: the approval question itself, not a request for a fact.
_BARE_CHECK = _re(r"^(?:is (?:that|this|it) (?:all )?(?:correct|right|ok|okay)|correct|right|does (?:that|this) sound "
                  r"(?:right|good))\s*\??$")
_CONFIRM_ACTION = _re(r"\bbefore i\b.*\bplease confirm\b|\bplease confirm\s*:|\bok to go\b")
_FACT_CONFIRM = _re(r"\bconfirm (?:your|the|that your|which|what) (?:\w+ )?(?:email|address|number|name|date|phone|id|"
                   r"details|account|identity|postcode|zip|birthday|dob|spelling)\b|\bconfirm (?:which|what)\b")


def _sentences(text: str) -> list[str]:
    """Sentences (and lines): a later failure in the same sentence undoes a claim ("I submitted it, but it failed")."""
    text = _QUOTED.sub(lambda m: m.group(0) if len(m.group(0).split()) == 1 else '"…"', text)  # not the agent's words
    text = _EMOJI.sub(lambda m: ". " if m.group(0).endswith(" ") and m.end() < len(text) and text[m.end()].isupper()
                      else " emoji ", text)
    text = re.sub(r"[*_`#>]+", " ", text)  # markdown emphasis, code and headers carry no mood
    return [p for p in re.split(r"(?<=[.!?])\s+|\n+", text) if p.strip()]


def _clauses(text: str) -> list[str]:
    """Sentences and clause-like parts: what each one does is read on its own."""
    parts = re.split(r"(?<=[.!?])\s+|(?<=\?)|[;\n]+|\s+[—–]\s+|\s+-\s+|,\s+(?:but|though)\s+|\.\s*$|"
                     r":\s+(?=(?:what|which|who|when|where|how)\b)|,\s+and\s+(?=(?:are|do|would|should|shall|can|is|will)\s)",
                     text)
    return [p.strip(" \t-•*,") for p in parts if p and p.strip(" \t-•*,.")]


def _is_question(clause: str) -> bool:
    """A clause that asks the user something: a question mark, or question word order without one."""
    if clause.rstrip().endswith("?"):
        return True
    if _WH_STATEMENT.search(clause) or (_WH_OPENS.match(clause) and not _WH_ORDER.search(clause)):
        return False  # "What I can do is ...", "Why you were charged twice": a wh-word opening a statement
    return bool(_WH.search(clause) or _INVERTED_SUBJECT.search(clause))


def _asks_confirmation(clause: str, question: bool) -> bool:
    if _GENERIC_OFFER.search(clause):
        return False  # "Is there anything else you'd like me to look at?": an offer of help, no action to approve
    if _CLARIFY_WANT.search(clause) or (question and (_WH.search(clause) or _INFO_NOUN.search(clause))):
        return False  # "What would you like me to do?", "Which one should I cancel?", "Order #?": a detail is asked for
    if _CONFIRM_ACTION.search(clause):
        return True
    if _ASK_ACTION.search(clause):
        return not _FACT_CONFIRM.search(clause) or bool(_WANT_ME.search(clause))
    if _IMPERATIVE_ASK.search(clause):
        return not re.search(r"\bor\b", clause, re.IGNORECASE)  # "cancel it, or change the items?" is a choice
    return False


def _asks_information(clause: str, question: bool, *, explicit: bool = False) -> bool:
    """Whether a clause asks for a detail; `explicit` counts only a request or a wh-question (not a yes/no one)."""
    if _GENERIC_OFFER.search(clause):
        return False
    if _REQUEST.search(clause) or _CLARIFY_WANT.search(clause):
        return True
    if question and _WH.search(clause):
        return True
    if question and _INFO_NOUN.search(clause):
        return True
    if explicit or not question or _WANT_ME.search(clause):
        return False
    if _INVERTED.search(clause) or re.search(r"\b(?:is there|do you (?:have|remember|know|recall)|are you|did you|can you "
                                             r"(?:tell|send|share|give)|could you|were you|was it|is it the)\b",
                                             clause, re.IGNORECASE):
        return True  # "Are your dates flexible at all?": a yes/no question about the user's situation
    return bool(re.search(r"\bor\b", clause, re.IGNORECASE))  # a choice between options


def _claims_success(clause: str) -> bool:
    if _LOOKUP.search(clause) and not _DONE_PAST.search(clause):
        return False
    managed = _MANAGED.search(clause)
    if managed:
        return not _CONDITIONAL.search(clause) and not _NOT_DONE.search(clause[: managed.start()])
    found = bool(_DONE_PAST.search(clause) or _MANAGED.search(clause) or _DONE_WORDS.search(clause)
                 or _PASSIVE_DONE.search(clause) or _TERSE_DONE.search(clause) or _FIRST_PERSON_PAST.search(clause)
                 or _GOT_DONE.search(clause))
    if not found:
        return False
    if _NOT_CLAIM.search(clause) or _CONDITIONAL.search(clause) or _HISTORY.search(clause) or (
            _STATE.search(clause) and not _AS_ASKED.search(clause)):
        return False
    head = clause
    hit = (_DONE_PAST.search(clause) or _PASSIVE_DONE.search(clause) or _TERSE_DONE.search(clause)
           or _FIRST_PERSON_PAST.search(clause) or _GOT_DONE.search(clause))
    if hit is not None:
        head = clause[: hit.end()]  # what comes after the completed verb does not undo it ("... so you won't be charged")
    if hit is not None and hit.re is _TERSE_DONE and re.search(
            r"\b(?:a|an|the|this|that|your|my|its|their|our)\s+\S+$", clause[: hit.end()], re.IGNORECASE):
        return False  # "it's a disabled account": the participle is an adjective
    return not _NOT_DONE.search(head)


def _refuses(clause: str, *, already: bool = True, retrying: bool = False) -> bool:
    if _CONDITIONAL.search(clause) or _PRECONDITION.search(clause) or _UNSURE.search(clause):
        return False  # "If you can't find it...", "I can't do that without verifying you": not a refusal
    if _FIND_FAIL.search(clause) and not _GIVE_UP.search(clause):
        return False
    failed = not retrying and _FAILED_ATTEMPT.search(clause)
    return bool(_CANT.search(clause) or failed or already and _ALREADY.search(clause))


def says_cannot(text: str) -> bool:
    """Whether a reply says the request cannot be (or was not) done: a refusal other than "it was already done",
    which reports the state the user asked for."""
    labels = _model_labels(text)
    return SAYS_CANNOT in labels if labels is not None else _says_cannot(text)


def tells(text: str) -> bool:
    """Whether a reply tells the user something: a clause that neither asks a question nor asks for a detail
    ("Could you tell me the room id?" after a look-up tells nothing; "It can't be moved: it has shipped" does)."""
    return any(not _is_question(clause) and not _asks_information(clause, False)
               for sentence in _sentences(text or "") for clause in _clauses(sentence.lower()))


def claims_handoff(text: str) -> bool:
    """Whether a reply says the agent handed the request to a person or a team ("I've escalated it to a supervisor",
    "I'm transferring you to billing", "a specialist will contact you"): a claim about the world that only a
    hand-off tool's result makes true. Offers, questions, conditions and asking the user to reach someone are not."""
    labels = _model_labels(text)
    return CLAIMS_HANDOFF in labels if labels is not None else _claims_handoff(text)


@lru_cache(maxsize=4096)
def _claims_handoff(text: str) -> bool:
    for sentence in _sentences(text or ""):
        for clause in _clauses(sentence.lower()):
            if _is_question(clause) or _CONDITIONAL.search(clause) or _USER_REACHES.search(clause) or \
                    _FEEDBACK.search(clause):
                continue
            found = _HANDED.search(clause)
            # A negation inside the claim undoes it; one before it ("I'm not able to, so I've passed it on") does not.
            if found is not None and not re.search(r"\b(?:not|never|no one|nobody)\b|n['’]t\b", found.group(0)):
                return True
    return False


def classify_reply(text: str) -> frozenset[str]:
    """The labels (a subset of REPLY_LABELS) of one agent reply."""
    labels = _model_labels(text)
    return labels - {SAYS_CANNOT} if labels is not None else _classify(text)


@lru_cache(maxsize=4096)
def _says_cannot(text: str) -> bool:
    lowered = (text or "").lower()
    if _UNSURE.search(lowered):
        return False  # uncertainty about the outcome colours the whole reply ("... so please contact us again")
    retrying = bool(_RETRYING.search(lowered))
    return any(not _is_question(clause) and _refuses(clause, already=False, retrying=retrying)
               for sentence in _sentences(text or "") for clause in _clauses(sentence.lower()))


@lru_cache(maxsize=4096)
def _classify(text: str) -> frozenset[str]:
    lowered = (text or "").lower()
    offered = any(_OFFER.search(c) and _GO_AHEAD.search(c) for c in _clauses(lowered)) or bool(
        _OFFER.search(lowered) and _GO_AHEAD.search(lowered.strip().splitlines()[-1] if lowered.strip() else ""))
    labels: set[str] = {ASKS_CONFIRMATION} if _BUTTON.search(lowered) or offered else set()
    retrying = bool(_RETRYING.search(lowered))
    for sentence in _sentences(text or ""):
        failed = bool(_FAILED_AFTER.search(sentence))
        for clause in _clauses(sentence.lower()):
            question = _is_question(clause)
            if ASKS_CONFIRMATION in labels and _BARE_CHECK.search(clause):
                continue  # "... you'd like me to cancel it. Is that correct?": one approval question
            if _asks_confirmation(clause, question):
                labels.add(ASKS_CONFIRMATION)
                # What comes before the request for approval may ask for details too ("Send me the numbers, and tell
                # me whether you want me to apply them").
                asked = _ASK_ACTION.search(clause)
                rest = clause[: asked.start()].strip(" ,") if asked else ""
                if rest and _asks_information(rest, _is_question(rest), explicit=True) or _OR_OTHER.search(clause):
                    labels.add(ASKS_FOR_INFORMATION)
            elif _asks_information(clause, question):
                labels.add(ASKS_FOR_INFORMATION)
            elif not question and _refuses(clause, retrying=retrying):
                labels.add(REFUSES)
            elif not question and not failed and _claims_success(clause):
                labels.add(CLAIMS_SUCCESS)
    return frozenset(labels)
