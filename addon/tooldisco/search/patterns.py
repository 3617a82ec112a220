"""Untrusted regex patterns: their cost bounded before they are compiled.

Why: the ``regex`` module writes out every fixed repeat when it compiles, so
``a{4294967294}`` (13 characters) asked for more than 24 GB before any time budget
started, and ``(a{1000}){1000}`` nests the same blow-up. A model's pattern is untrusted
(a prompt-injected page can dictate it), so ``check`` reads it first, without compiling:

- every repeat count (``{n}``, ``{n,}``, ``{,m}``, ``{n,m}``) is at most ``MAX_REPEAT``;
- its *expanded size*, its length with every repeat written out (by the larger bound),
  is at most ``MAX_EXPANDED``: compiled code grows with it, by at most about
  ``BYTES_PER_EXPANDED_CHAR`` (``\\R``, ``\\X``, full case folding are the dearest);
- groups nest at most ``MAX_GROUP_DEPTH`` deep and quantifiers at most
  ``MAX_NESTED_QUANTIFIERS`` (``((a+)+)+`` is only ever a backtracking bomb).

The reading is conservative. It follows ``regex``'s VERSION0 syntax, and where it could
not be sure how ``regex`` parses a construct it refuses the pattern
(``UnsupportedPattern``, answered with keyword search like any invalid regex) rather than
guess: verbose mode (``(?x)``), VERSION1 (nested sets), fuzzy constraints (``a{e<=1}``)
or any other ``{`` that is not a repeat count, a ``[`` inside a set other than a POSIX
class. Items whose size it cannot know exactly are overcharged, never undercharged.

Compiled patterns are cached here by bytes (``bytecache``), never in ``regex``'s own
cache, which keeps up to 500 patterns whatever their size.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

import regex

from tooldisco.core.bytecache import ByteLRU, MiB
from tooldisco.search.base import QueryError

MAX_REPEAT = 1000
MAX_EXPANDED = 2000
MAX_GROUP_DEPTH = 10
MAX_NESTED_QUANTIFIERS = 2
# Above what the dearest item (``\R``) keeps per expanded character under tracemalloc:
# tests/unit/search/test_hardening.py checks the estimate bounds what compiling holds.
BYTES_PER_EXPANDED_CHAR = 512
COMPILED_BASE_BYTES = 8 * 1024
CACHE_BYTES = 4 * MiB

#: How every pattern is compiled: case-insensitive, VERSION0 whatever regex's default is.
FLAGS = regex.IGNORECASE | regex.VERSION0

# {n}, {n,}, {,m}, {n,m} and {,}: group 1 is the minimum, group 2 the maximum.
_COUNTS = regex.compile(r"\{(\d*)(,(\d*))?\}")
# Verbose mode or VERSION1 switched on anywhere, scoped or not: both change the syntax.
_SYNTAX_FLAGS = regex.compile(r"\(\?[a-zA-Z0-9-]*(?:x|V1)")
# Exactly what ``regex`` reads as the braced forms \N{name} and \p{property}.
_BRACED_ESCAPE = regex.compile(
    r"\\N\{[A-Za-z0-9 -]*\}"
    r"|\\[pP]\{\^?[A-Za-z0-9 &_.-]*(?:[:=] *[A-Za-z0-9&_./-][A-Za-z0-9 &_./-]*)?\}"
)
_POSIX_CLASS = regex.compile(r"\[:\^?[A-Za-z]+:\]")
# Inline flags are no item in ``regex``'s sequence, so a quantifier after them repeats the
# item before; a call such as (?1) is one. Either way the larger of the two is charged.
_TRANSPARENT_GROUP = regex.compile(r"\(\?[a-zA-Z0-9-]*\)")

# ``regex`` notes every pattern it compiles in this dict, even with cache_pattern=False,
# and trims it only when its own cache fills, which ours keeps empty: each distinct query
# would stay in memory for good, so the note is dropped after compiling.
_LOCALE_NOTES: dict[object, object] = getattr(sys.modules[regex.compile.__module__], "_locale_sensitive", {})


class PatternTooExpensive(QueryError):
    """The pattern could cost far more memory or time than one search may; the message
    is meant for the model."""

    def __init__(self, reason: str):
        super().__init__(f"The pattern is too expensive: {reason}; use keywords")


class UnsupportedPattern(Exception):
    """A pattern ``regex`` rejects, or one this module will not read."""


@dataclass
class _Group:
    """Tallies of the group being read; the whole pattern is the outermost one."""

    start: int
    size: int = 0  # expanded characters so far
    nesting: int = 0  # deepest quantifier nesting so far
    last: int = 0  # expanded size of the item a quantifier would repeat; 0 when none
    last_nesting: int = 0

    def item(self, size: int, nesting: int = 0) -> None:
        self.size += size
        self.last, self.last_nesting = size, nesting
        self.nesting = max(self.nesting, nesting)

    def transparent(self, size: int) -> None:
        """Inline flags, a comment or a call: what a following quantifier repeats may be
        the item before it, so it is charged as the larger of the two."""
        self.size += size
        self.last = max(self.last, size)

    def repeat(self, times: int) -> None:
        if not self.last:  # nothing to repeat: "(?", or an error regex reports
            return
        self.size += self.last * (times - 1)
        self.last *= times
        self.last_nesting += 1
        if self.last_nesting > MAX_NESTED_QUANTIFIERS:
            raise PatternTooExpensive(f"quantifiers nest more than {MAX_NESTED_QUANTIFIERS} deep")
        self.nesting = max(self.nesting, self.last_nesting)


def check(pattern: str) -> int:
    """The pattern's expanded size; raises ``PatternTooExpensive`` or ``UnsupportedPattern``."""
    if _SYNTAX_FLAGS.search(pattern):
        raise UnsupportedPattern("verbose mode (?x) and VERSION1 (?V1) are not supported")
    stack = [_Group(0)]
    i, n = 0, len(pattern)
    while i < n:
        top, ch = stack[-1], pattern[i]
        if ch == "\\":
            braced = _BRACED_ESCAPE.match(pattern, i)
            end = braced.end() if braced else min(i + 2, n)
            top.item(end - i)
        elif ch == "[":
            end = _set_end(pattern, i)
            top.item(end - i)
        elif ch == "(" and pattern.startswith("(?#", i):
            end = _comment_end(pattern, i)
            top.transparent(end - i)
        elif ch == "(":
            if len(stack) > MAX_GROUP_DEPTH:
                raise PatternTooExpensive(f"groups nest more than {MAX_GROUP_DEPTH} deep")
            stack.append(_Group(i))
            end = i + 1
        elif ch == ")":
            if len(stack) == 1:
                raise UnsupportedPattern(f"unbalanced parenthesis at {i}")
            group = stack.pop()
            end = i + 1
            if _TRANSPARENT_GROUP.fullmatch(pattern, group.start, end):
                stack[-1].transparent(group.size + 2)
            else:
                stack[-1].item(group.size + 2, group.nesting)
        elif ch == "|":
            top.item(1)
            top.last = 0  # a quantifier right after "|" repeats nothing
            end = i + 1
        elif ch in "*+?":
            top.size += 1
            top.repeat(1)
            end = _suffix(pattern, i + 1, top)
        elif ch == "{":
            counts = _COUNTS.match(pattern, i)
            if counts is None or not (counts.group(1) or counts.group(2)):
                raise UnsupportedPattern(
                    f"the '{{' at {i} is not a repeat count like {{2,5}}; write a literal one as \\{{"
                )
            bound = max(int(counts.group(1) or 0), int(counts.group(3) or 0))
            if bound > MAX_REPEAT:
                raise PatternTooExpensive(f"a repeat count of {bound} is over the limit of {MAX_REPEAT}")
            top.size += counts.end() - i
            top.repeat(max(bound, 1))
            end = _suffix(pattern, counts.end(), top)
        else:
            top.item(1)
            end = i + 1
        i = end
    if len(stack) > 1:
        raise UnsupportedPattern("missing )")
    size = stack[0].size
    if size > MAX_EXPANDED:
        raise PatternTooExpensive(
            f"with its repeats written out it is {size} characters long; the limit is {MAX_EXPANDED}"
        )
    return size


def _suffix(pattern: str, i: int, group: _Group) -> int:
    """Past a lazy (``?``) or possessive (``+``) suffix of a quantifier, if there is one."""
    if pattern.startswith(("?", "+"), i):
        group.size += 1
        return i + 1
    return i


def _set_end(pattern: str, i: int) -> int:
    """Just past the set opening at ``i``, read as VERSION0 does: a ``]`` first is a member,
    escapes and POSIX classes (``[:alpha:]``) are single members."""
    j = i + 1
    if pattern.startswith("^", j):
        j += 1
    first = True
    while j < len(pattern):
        ch = pattern[j]
        if ch == "]" and not first:
            return j + 1
        if ch == "\\":
            j += 2
        elif ch == "[":
            posix = _POSIX_CLASS.match(pattern, j)
            if posix is None:
                raise UnsupportedPattern(f"the '[' at {j} is inside a set; write a literal one as \\[")
            j = posix.end()
        else:
            j += 1
        first = False
    return len(pattern)  # unterminated: regex rejects it


def _comment_end(pattern: str, i: int) -> int:
    """Just past the ``(?#...)`` comment at ``i``; as in ``regex``, ``\\)`` does not end it."""
    j = i + 3
    while j < len(pattern):
        if pattern[j] == ")":
            return j + 1
        j += 2 if pattern[j] == "\\" else 1
    return len(pattern)


def compiled_bytes(pattern: str) -> int:
    """An upper estimate of what the compiled pattern holds."""
    return COMPILED_BASE_BYTES + BYTES_PER_EXPANDED_CHAR * check(pattern)


_COMPILED: ByteLRU[str, regex.Pattern[str]] = ByteLRU(CACHE_BYTES, lambda pattern, _: compiled_bytes(pattern))


def compile_pattern(pattern: str) -> regex.Pattern[str]:
    """The compiled pattern, checked first; raises ``PatternTooExpensive`` or
    ``UnsupportedPattern``."""
    compiled: regex.Pattern[str] | None = _COMPILED.get(pattern)
    if compiled is None:
        check(pattern)
        try:
            compiled = regex.compile(pattern, FLAGS, cache_pattern=False)
        except (regex.error, ValueError) as exc:  # ValueError: clashing flags, e.g. (?a)(?u)
            raise UnsupportedPattern(str(exc)) from None
        finally:
            _LOCALE_NOTES.pop((str, pattern), None)
        _COMPILED.put(pattern, compiled)
    return compiled


def clear_cache() -> None:
    """Forget every compiled pattern (tests measure cold compiles with it)."""
    _COMPILED.clear()
