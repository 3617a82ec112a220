"""Turning tool definitions and queries into comparable words.

Why: tool names are identifiers (``get_current_weather``, ``getWeather``,
``math.factorial``, ``Events_3_FindEvents``) while queries are prose, so both are cut
into lower-case words at every case change, underscore, dot, hyphen and digit run.
Keyword backends then drop English function words (they only add noise to prose
queries) and stem with Snowball, so "forecasts" meets "forecast" and "booking" meets
"book", without a dictionary.
"""

from __future__ import annotations

import regex
import snowballstemmer

from tooldisco.core.bytecache import MiB, memoize

# An upper-case run before a capitalised word (HTTPServer -> HTTP), a capitalised or
# lower-case word, an upper-case run, a digit run, or letters of a caseless script.
_WORD = regex.compile(r"\p{Lu}+(?=\p{Lu}\p{Ll})|\p{Lu}?\p{Ll}+|\p{Lu}+|\p{N}+|[\p{L}\p{M}]+")

#: Function words of English prose: they say nothing about which tool is wanted.
STOPWORDS = frozenset(
    """a an and are as at be been but by can could do does for from had has have how
    i if in into is it its me my of on or our please so some than that the their them
    then there these they this those to us was we were what when where which who will
    with would you your""".split()
)

_STEMMER = snowballstemmer.stemmer("english")


def words(text: str) -> list[str]:
    """Lower-case words of ``text``, identifiers split: ``getHTTPUrl_v2`` -> get http url v 2."""
    return [w.lower() for w in _WORD.findall(text)]


@memoize(4 * MiB)
def stem(word: str) -> str:
    """Snowball (Porter 2) English stem; memoised, since catalogs repeat their words (by
    bytes: a "word" of a tool description can be any length)."""
    return _STEMMER.stemWord(word)


def terms(text: str) -> list[str]:
    """Stemmed content words: what the BM25 index and its queries are made of."""
    return [stem(w) for w in words(text) if w not in STOPWORDS]
