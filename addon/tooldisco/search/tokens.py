"""Turning tool definitions and queries into comparable words.

Why: tool names are identifiers (``get_current_weather``, ``getWeather``,
``math.factorial``, ``Events_3_FindEvents``) while queries are prose, so both are cut
into lower-case words at every case change, underscore, dot, hyphen and digit run.
Keyword backends then drop English function words (they only add noise to prose
queries) and stem with Snowball, so "forecasts" meets "forecast" and "booking" meets
"book", without a dictionary.
"""

from __future__ import annotations

import functools

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


SHORT_WORD = 24  # characters up to which a word's stem is memoised by count (nearly every word)
MAX_QUERY_MEMO = 2000  # characters up to which a query's terms are memoised


@functools.lru_cache(maxsize=16384)  # about 4 MiB at most
def _stem_short(word: str) -> str:
    return _STEMMER.stemWord(word)


@memoize(1 * MiB)
def _stem_long(word: str) -> str:
    return _STEMMER.stemWord(word)


def stem(word: str) -> str:
    """Snowball (Porter 2) English stem, memoised: catalogs and queries repeat their words.
    Short words (nearly all) sit in a counted cache, fast enough for every word of every search;
    a longer "word" (a tool description can hold any) is charged by its bytes."""
    return _stem_short(word) if len(word) <= SHORT_WORD else _stem_long(word)


def terms(text: str) -> list[str]:
    """Stemmed content words: what the BM25 index and its queries are made of."""
    return [stem(w) for w in words(text) if w not in STOPWORDS]


@functools.lru_cache(maxsize=64)
def _query_terms(query: str) -> tuple[str, ...]:
    return tuple(terms(query))


def query_terms(query: str) -> tuple[str, ...]:
    """``terms`` of a search query, memoised for the few latest queries: one search reads
    its query's terms several times (the backend, its intents, the learned priors)."""
    return _query_terms(query) if len(query) <= MAX_QUERY_MEMO else tuple(terms(query))
