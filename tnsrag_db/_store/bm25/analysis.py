"""Text analysis for BM25: identifier splitting in Python, lexemes from PostgreSQL tsvectors.

PostgreSQL's parser splits ``TAN-5326`` into ``tan`` and ``-5326``, ``snake_case_name``
into three words, and keeps ``HttpClient.get`` as one host-like token. So before the
text reaches ``to_tsvector`` every compound token (parts joined by ``- _ . : /`` or
written in camelCase, and holding a letter: numbers such as ``3.14`` stay as they are)
is rewritten into its parts, and its whole lower-cased form
(``tan-5326``, ``httpclient.get``, ``httpclient``) is added as an extra term. A query is
analysed the same way, so ``TAN-5326``, ``5326``, ``HttpClient`` and ``getHTTPResponse``
all match, and the whole identifier scores above its parts alone.

Parts shorter than :data:`MIN_PART_CHARS` (two) characters are not terms of their own:
abbreviations such as ``e.g.``, ``i.e.`` and ``U.S.`` keep only their whole form
(``e.g``, as PostgreSQL's parser alone would give), instead of adding stray one-letter
terms (``e``, ``g``, ``u``) that match unrelated text; ``x-15`` gives ``15`` and ``x-15``,
``getX`` gives ``get`` and ``getx``. (Plain one-letter words of the text are still
PostgreSQL's to keep or drop.)

Text is brought to Unicode normal form NFKC first, documents and queries alike, so the
same word matches however it was encoded: ``café`` written decomposed (``e`` and a
combining accent, as macOS file names and some editors write it) matches the composed
form, and compatibility characters meet their plain letters (the ``ﬁ`` ligature of PDF
text matches ``fi``, full-width ``Ｆｏｏ`` matches ``Foo``). The content itself is stored
as given; only its terms are normalised.

A tsvector caps a lexeme's count at 255 and merges positions past 16,383, so the
rewritten text is cut into chunks of at most :data:`CHUNK_CHARS` characters (at most
250 tokens each) and the counts of all chunks are summed: long documents keep their
true term frequencies.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterator
from dataclasses import dataclass
from functools import lru_cache
from typing import Final

__all__ = ["CHUNK_CHARS", "DEFAULT_MAX_QUERY_TERMS", "MAX_TERM_CHARS", "MIN_PART_CHARS", "NORMAL_FORM", "AnalyzedText",
           "analyze", "analyze_query", "camel_parts", "chunk_text", "normalize_text"]

#: The Unicode normal form text is analysed in (see the module docstring).
NORMAL_FORM: Final = "NFKC"


def normalize_text(text: str) -> str:
    """``text`` in :data:`NORMAL_FORM` (unchanged, and cheap, when it already is: ASCII always is)."""
    return text if unicodedata.is_normalized(NORMAL_FORM, text) else unicodedata.normalize(NORMAL_FORM, text)

#: Upper bound on a chunk's length; 500 characters hold at most 250 tokens, below the
#: tsvector limit of 255 positions per lexeme.
CHUNK_CHARS = 500
#: Whole-identifier terms longer than this are not indexed (btree entries have a size limit).
MAX_TERM_CHARS = 200
#: Identifier parts shorter than this are not indexed as terms of their own (only the
#: whole identifier is): the ``e`` and ``g`` of ``e.g.`` match unrelated text.
MIN_PART_CHARS = 2

_TOKEN_RE = re.compile(r"\w+(?:[-.:/]\w+)*")
_SEP_RE = re.compile(r"[-_.:/]+")


def camel_parts(word: str) -> list[str]:
    """Split ``getHTTPResponse`` into ``get``, ``HTTP``, ``Response`` (also at letter/digit changes)."""
    parts: list[str] = []
    start = 0
    n = len(word)
    for i in range(1, n):
        a, b = word[i - 1], word[i]
        boundary = (
            (a.islower() and b.isupper())
            or (a.isalpha() != b.isalpha() and (a.isalnum() and b.isalnum()))
            or (a.isupper() and b.isupper() and i + 1 < n and word[i + 1].islower())
        )
        if boundary:
            parts.append(word[start:i])
            start = i
    parts.append(word[start:])
    return [p for p in parts if p]


@dataclass(frozen=True, slots=True)
class AnalyzedText:
    """Text ready for ``to_tsvector``: chunks of rewritten text plus whole-identifier terms."""

    chunks: list[str]
    extra_terms: list[str]


@lru_cache(maxsize=1 << 16)
def _split_token(token: str) -> tuple[str, tuple[str, ...]] | None:
    """The rewritten form and whole-identifier terms of one token; None when it stays as is.

    Cached: natural text repeats its words, and most of them need no rewriting.
    """
    if not any(c.isalpha() for c in token):
        # Numbers (``3.14``, ``1/2``, ``5-10``) are not identifiers: PostgreSQL's
        # parser already keeps decimals whole, and splitting them only adds noise.
        return None
    segments = [s for s in _SEP_RE.split(token) if s]
    parts: list[str] = []
    extras: list[str] = []
    for segment in segments:
        sub = camel_parts(segment)
        if len(sub) > 1 and len(segment) <= MAX_TERM_CHARS and any(c.isalpha() for c in segment):
            # A camelCase segment of a larger identifier is a whole term too
            # (``HttpClient`` inside ``HttpClient.get``).
            if len(segments) > 1:
                extras.append(segment.lower())
        parts.extend(sub)
    if len(parts) <= 1:
        return None
    if len(token) <= MAX_TERM_CHARS:
        extras.append(token.lower())
    # The token's neighbours are not word characters, so dropping it whole joins no words.
    return " ".join(p for p in parts if len(p) >= MIN_PART_CHARS), tuple(extras)


_EDGE_PUNCTUATION = ".,;:!?()[]{}<>\"'"


@lru_cache(maxsize=1 << 16)
def _plain_word(word: str) -> bool:
    """True when a whitespace-separated word certainly holds no compound token: letters
    only (after edge punctuation), at most the first one upper-case."""
    core = word.strip(_EDGE_PUNCTUATION)
    return core.isalpha() and (len(core) == 1 or core[1:].islower())


def _rewrite(text: str, extras: list[str]) -> str:
    # Most texts hold no compound token at all: find that out from cached word checks
    # (C-level split and map), then from the cached token splits, before rewriting.
    if all(map(_plain_word, text.split())) or not any(map(_split_token, _TOKEN_RE.findall(text))):
        return text

    def replace(match: re.Match[str]) -> str:
        token = match.group(0)
        split = _split_token(token)
        if split is None:
            return token
        extras.extend(split[1])
        return split[0]

    return _TOKEN_RE.sub(replace, text)


def _cut_point(text: str, start: int, end: int) -> int:
    # The last whitespace (any kind: a newline-separated list has no spaces), else the
    # last character that is not a letter or digit, so no word is cut in two; only a
    # single run of word characters longer than the limit is cut hard.
    for j in range(end, start, -1):
        if text[j].isspace():
            return j
    for j in range(end, start, -1):
        if not text[j].isalnum():
            return j
    return end


def chunk_text(text: str, limit: int = CHUNK_CHARS) -> Iterator[str]:
    """Cut ``text`` into pieces of at most ``limit`` characters, at whitespace where
    possible, else between words; blank pieces are dropped."""
    if limit < 1:
        raise ValueError(f"limit must be >= 1, got {limit}")
    i, n = 0, len(text)
    while i < n:
        while i < n and text[i].isspace():
            i += 1
        if i == n:
            return
        end = min(i + limit, n)
        if end < n:
            end = _cut_point(text, i, end)
        yield text[i:end].rstrip()
        i = end


def analyze(text: str) -> AnalyzedText:
    """Normalise ``text`` (NFKC), rewrite compound identifiers into parts, collect their whole
    forms and chunk the result."""
    extras: list[str] = []
    rewritten = _rewrite(normalize_text(text), extras)
    short = rewritten.lstrip()
    if len(short) <= CHUNK_CHARS:  # the common case: one chunk (what chunk_text yields)
        return AnalyzedText([short.rstrip()] if short else [], extras)
    return AnalyzedText(list(chunk_text(rewritten)), extras)


#: Default of ``Store(max_query_terms=...)``: analysed terms of a query; the rest is ignored.
DEFAULT_MAX_QUERY_TERMS = 256
_WORD_RE = re.compile(r"\w+")


def _query_prefix(text: str, max_terms: int) -> str:
    """The longest prefix of ``text`` whose tokens yield at most ``max_terms`` terms: a plain
    token one per word, a compound identifier its parts plus its whole forms."""
    used = 0
    for match in _TOKEN_RE.finditer(text):
        token = match.group(0)
        split = _split_token(token)
        cost = len(_WORD_RE.findall(token)) if split is None else len(split[0].split()) + len(split[1])
        if used + cost > max_terms:
            return text[:match.start()]
        used += cost
    return text


def analyze_query(text: str, max_terms: int) -> AnalyzedText:
    """:func:`analyze` of the prefix of a query that yields at most ``max_terms`` terms (words,
    identifier parts and whole identifiers, in query order); the rest is ignored. The work of
    a query (analysis, then one posting list per term) no longer grows with its length: a
    100,000-word query held a connection for 40 s. (PostgreSQL's parser drops stop words
    and never makes more lexemes of a prefix than it has words.)
    """
    return analyze(_query_prefix(normalize_text(text), max_terms))
