"""Value cues: what the values a query carries say about the tool it wants.

Why: a task names its arguments as much as its action ("the forecast for Berkeley on
April 25th", "read d:/playground/test.py", "mail andy@gorilla.ai"), and among tools that
match its words equally (five weather tools), the one taking a date, a path or an address
is the one wanted. Those values are no words a tool's definition shares, so keyword search
reads past them. Each kind of value found in a query adds its kind's word (``date``,
``file``…) to the query at ``WEIGHT``, for tools that already match the query's own words.

Cues raise the recall of BM25 and hybrid on every set of ``scripts/bench_retrieval.py``
(any weight from 0.6 to 1.0 does). Dates carry BFCL, paths the multi-turn file-system
tasks; years alone and relative dates ("next week") cost recall on BFCL and are not cues.

The query is the model's, so untrusted: no pattern nests a repetition (no catastrophic
backtracking), and a query is at most 1,000 characters.
"""

from __future__ import annotations

import regex

#: How much a cue's word counts against one of the query's own words.
WEIGHT = 0.8

_MONTH = r"(?:jan(?:uary)?|feb(?:ruary)?|mar(?:ch)?|apr(?:il)?|may|june?|july?|aug(?:ust)?|sep(?:t(?:ember)?)?|" \
         r"oct(?:ober)?|nov(?:ember)?|dec(?:ember)?)"
_DAY = r"\d{1,2}(?:st|nd|rd|th)?"

#: (the kind's word, a value of that kind)
CUES: tuple[tuple[str, regex.Pattern[str]], ...] = (
    ("date", regex.compile(
        rf"\b(?:\d{{4}}-\d{{2}}-\d{{2}}|\d{{1,2}}/\d{{1,2}}/\d{{2,4}}|{_MONTH}\s+{_DAY}|{_DAY}\s+(?:of\s+)?{_MONTH}|"
        r"(?:mon|tues|wednes|thurs|fri|satur|sun)day|today|tomorrow|yesterday)\b", regex.I)),
    ("time", regex.compile(r"\b\d{1,2}(?::\d{2})?\s*[ap]\.?m\b|\b\d{1,2}:\d{2}\b", regex.I)),
    ("email", regex.compile(r"(?<=[\w.+-])@[\w-]+\.\w")),  # from the "@": a local part would be read again at every start
    ("url", regex.compile(r"\bhttps?://\S", regex.I)),
    ("file", regex.compile(
        r"\b[\w-]+\.(?:txt|csv|json|pdf|py|md|png|jpe?g|xlsx?|docx?|log|ya?ml|html?)\b|"
        # a path: a drive or no word before its first separator (not a URL's), a segment
        # starting with no digit (not a date's), and a second separator
        r"(?:\b[a-z]:|(?<![:/\w]))[\\/][a-z_.~][\w.-]*[\\/][\w.-]", regex.I)),
    ("currency", regex.compile(
        r"[$€£¥]\s?\d|\b\d+(?:\.\d+)?\s*(?:dollars?|euros?|pounds?|usd|eur|gbp|jpy|yen)\b", regex.I)),
)


def cue_words(query: str) -> list[str]:
    """The kinds of value ``query`` carries, as words a tool's definition names them by."""
    return [word for word, pattern in CUES if pattern.search(query)]
