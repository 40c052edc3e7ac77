"""Split text into chunks sized for an embedding model's window, never inside a word.

A :class:`Chunker` measures text with a ``count_tokens`` function (the embedding's own
tokenizer when it has one, else ``len``: characters) and packs whole units into chunks of
at most ``max_tokens``: blank-line paragraphs first; a paragraph too large for one chunk
is cut at sentence ends, a sentence too large at whitespace. Consecutive chunks of one
text overlap by a few trailing words (``overlap`` tokens, default an eighth of the
chunk) so a sentence cut at a boundary is whole in at least one chunk when it can be.
A single word larger than a chunk becomes a chunk of its own (the model truncates it).

Sizes are estimates: the token counts of the units of a chunk are added up, which
over-counts slightly when the tokenizer adds special tokens per call, so chunks come
out at or below the limit, never above it except for one oversized word.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator, Sequence

from tnsrag_db._errors import ConfigurationError
from tnsrag_db._validate import is_int

__all__ = ["DEFAULT_CHUNK_CHARS", "Chunker", "chunker_for"]

#: Chunk size, in characters, when the embedding exposes no tokenizer (the hash fallback).
DEFAULT_CHUNK_CHARS = 1000

_PARAGRAPH = re.compile(r"\n[ \t]*\n+")
# A sentence ends at . ! ? (optionally closed by a quote or bracket) followed by whitespace.
_SENTENCE = re.compile(r"(?<=[.!?])[\"')\]]*\s+")
_WORD = re.compile(r"\S+\s*")
#: Word counts a chunker remembers before it starts over.
_WORD_CACHE = 50_000


def _check_positive(name: str, value: object) -> int:
    if not is_int(value) or value < 1:
        raise ConfigurationError(f"{name} must be an int >= 1, got {value!r}")
    return value


class Chunker:
    """Packs text into chunks of at most ``max_tokens`` as ``count_tokens`` measures them.

    ``overlap`` (default ``max_tokens // 8``; 0 turns it off) is the size of the words a
    chunk repeats from the end of the previous one. Raises :class:`ConfigurationError`
    for a bad option. Thread-safe when ``count_tokens`` is.
    """

    def __init__(self, max_tokens: int = DEFAULT_CHUNK_CHARS, count_tokens: Callable[[str], int] = len, *,
                 overlap: int | None = None, unit: str = "characters") -> None:
        self._max = _check_positive("max_tokens", max_tokens)
        if not callable(count_tokens):
            raise ConfigurationError("count_tokens must be callable")
        if overlap is None:
            overlap = max_tokens // 8
        if not is_int(overlap) or not 0 <= overlap < max_tokens:
            raise ConfigurationError(f"overlap must be an int from 0 to max_tokens - 1, got {overlap!r}")
        self._count = count_tokens
        # Token counts of single words (the overlap is measured word by word, and so is a
        # sentence too long for a chunk): words repeat, and a tokenizer call costs far
        # more than the word's own tokenization. Bounded: cleared when full.
        self._words: dict[str, int] = {}
        self._overlap = overlap
        self._unit = unit
        # What joining two pieces adds: separators cost characters, not word pieces.
        self._sep = {True: max(0, count_tokens("a\n\nb") - count_tokens("a") - count_tokens("b")),
                     False: max(0, count_tokens("a b") - count_tokens("a") - count_tokens("b"))}

    @property
    def max_tokens(self) -> int:
        """The largest chunk, in the units of ``count_tokens``."""
        return self._max

    @property
    def unit(self) -> str:
        """What ``count_tokens`` counts ("characters" or "tokens"), for messages."""
        return self._unit

    def __repr__(self) -> str:
        return f"Chunker(max_tokens={self._max}, overlap={self._overlap}, unit={self._unit!r})"

    def count(self, text: str) -> int:
        """The size of ``text`` as ``count_tokens`` measures it."""
        return self._count(text)

    def fits(self, text: str) -> bool:
        """Whether ``text`` fits in one chunk."""
        return self._count(text) <= self._max

    def chunks(self, text: str) -> list[str]:
        """``text`` cut into chunks (stripped, none empty); ``[]`` for blank text."""
        return list(self.iter_chunks(text))

    def iter_chunks(self, text: str) -> Iterator[str]:
        """The chunks of :meth:`chunks`, each produced as soon as it is complete (a long text's
        first chunks come before the rest of it is measured)."""
        text = text.strip()
        if not text:
            return
        size = self._count(text)
        if size <= self._max:
            yield text
            return
        yield from self._pack(self._pieces(text, size))

    # -- internals ----------------------------------------------------------------
    def _count_word(self, word: str) -> int:
        """``count_tokens(word)``, remembered (see ``_words``)."""
        size = self._words.get(word)
        if size is None:
            if len(self._words) >= _WORD_CACHE:
                self._words.clear()
            size = self._words[word] = self._count(word)
        return size

    def _pieces(self, text: str, text_size: int) -> Iterator[tuple[str, int, bool]]:
        """``(text, tokens, starts_paragraph)`` units, each fitting a chunk (but lone long
        words). ``text_size`` is ``text``'s own measure: a paragraph or sentence that is the
        whole text is not measured again (one long paragraph without sentence ends, such as
        a changelog, was measured three times over before its first chunk)."""
        for paragraph in _PARAGRAPH.split(text):
            paragraph = paragraph.strip()
            if not paragraph:
                continue
            paragraph_size = text_size if paragraph == text else self._count(paragraph)
            if paragraph_size <= self._max:
                yield paragraph, paragraph_size, True
                continue
            first = True
            for sentence in _split_keep(paragraph, _SENTENCE):
                size = paragraph_size if sentence == paragraph else self._count(sentence)
                if size <= self._max:
                    yield sentence, size, first
                    first = False
                    continue
                for word in _WORD.findall(sentence):
                    yield word, self._count_word(word), first
                    first = False

    def _pack(self, pieces: Iterable[tuple[str, int, bool]]) -> Iterator[str]:
        current: list[tuple[str, int, bool]] = []
        size = 0
        for piece in pieces:
            if current and size + self._sep[piece[2]] + piece[1] > self._max:
                chunk = _join(current)
                if chunk:
                    yield chunk
                current = self._tail(current, self._max - piece[1] - self._sep[False])
                size = sum(p[1] for p in current)
            if current:
                size += self._sep[piece[2]]
            current.append(piece)
            size += piece[1]
        if current:
            chunk = _join(current)
            if chunk:
                yield chunk

    def _tail(self, pieces: Sequence[tuple[str, int, bool]], room: int) -> list[tuple[str, int, bool]]:
        """The last whole words of ``pieces`` worth at most ``overlap`` (and ``room``) tokens."""
        budget = min(self._overlap, room)
        if budget <= 0:
            return []
        out: list[str] = []
        used = 0
        for piece in reversed(pieces):  # only as far back as the budget reaches
            for word in reversed(_WORD.findall(piece[0] + " ")):
                cost = self._count_word(word)
                if used + cost > budget:
                    break
                out.append(word)
                used += cost
            else:
                continue
            break
        if not out:
            return []
        text = "".join(reversed(out)).strip()
        return [(text + " ", self._count(text), False)]


def _split_keep(text: str, pattern: re.Pattern[str]) -> list[str]:
    """Split ``text`` after each match of ``pattern``, keeping the separators with the left part."""
    parts: list[str] = []
    start = 0
    for match in pattern.finditer(text):
        parts.append(text[start:match.end()])
        start = match.end()
    parts.append(text[start:])
    return [p for p in parts if p.strip()]


def _join(pieces: Sequence[tuple[str, int, bool]]) -> str:
    out = ""
    for text, _, starts_paragraph in pieces:
        if not out:
            out = text.strip() if starts_paragraph else text.lstrip()
        elif starts_paragraph:
            out = out.rstrip() + "\n\n" + text.strip()
        else:
            out = out + ("" if out[-1:].isspace() else " ") + text.lstrip()
    return out.strip()


def _window(embedding: object) -> tuple[object, object]:
    """``(max_tokens, count_tokens)`` of ``embedding`` or of the provider the library's own
    wrappers (:class:`~tnsrag_db.embeddings.ValidatingEmbedding`, the process embedding) hold."""
    current = embedding
    for _ in range(4):
        window = getattr(current, "max_tokens", None)
        if window is not None:
            return window, getattr(current, "count_tokens", None)
        inner = getattr(current, "_embedding", None) or getattr(current, "_fn", None)
        if inner is None:
            break
        current = inner
    return None, None


def chunker_for(embedding: object, chunk_tokens: int | None = None) -> Chunker:
    """The chunker that suits ``embedding``: its ``max_tokens`` window counted with its
    ``count_tokens(text)`` when it has both, else :data:`DEFAULT_CHUNK_CHARS` characters.

    ``chunk_tokens`` overrides the size (in the embedding's tokens when it counts them,
    else in characters). Raises :class:`ConfigurationError` for a bad size.
    """
    window, count = _window(embedding)
    if is_int(window) and window > 0 and callable(count):
        size = window if chunk_tokens is None else chunk_tokens
        return Chunker(_check_positive("chunk size", size), count, unit="tokens")
    size = DEFAULT_CHUNK_CHARS if chunk_tokens is None else chunk_tokens
    return Chunker(_check_positive("chunk size", size), len, unit="characters")
