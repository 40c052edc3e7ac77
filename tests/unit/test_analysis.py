"""BM25 text analysis rules: identifier splitting and chunking (no database)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from tnsrag_db._store.bm25.analysis import CHUNK_CHARS, MAX_TERM_CHARS, MIN_PART_CHARS, analyze, camel_parts, chunk_text


@pytest.mark.parametrize(("word", "parts"), [
    ("getHTTPResponse", ["get", "HTTP", "Response"]),
    ("HttpClient", ["Http", "Client"]),
    ("XMLHttpRequest2", ["XML", "Http", "Request", "2"]),
    ("parseJSON5Data", ["parse", "JSON", "5", "Data"]),
    ("ÉcoleNormale", ["École", "Normale"]),
    ("lower", ["lower"]),
    ("UPPER", ["UPPER"]),
    ("5326", ["5326"]),
    ("a", ["a"]),
])
def test_camel_parts(word: str, parts: list[str]) -> None:
    assert camel_parts(word) == parts


@pytest.mark.parametrize(("text", "chunk", "extras"), [
    ("TAN-5326", "TAN 5326", ["tan-5326"]),
    ("snake_case_name", "snake case name", ["snake_case_name"]),
    # The camelCase segment of a larger identifier is a whole term as well.
    ("HttpClient.get", "Http Client get", ["httpclient", "httpclient.get"]),
    ("HttpClient", "Http Client", ["httpclient"]),
    ("getHTTPResponse", "get HTTP Response", ["gethttpresponse"]),
    # Parts shorter than two characters are no terms of their own; the whole form stays.
    ("a/b:c", "", ["a/b:c"]),
    ("v2.1", "", ["v2", "v2.1"]),
    ("x-15 aircraft", "15 aircraft", ["x-15"]),
    ("getX", "get", ["getx"]),
    ("iPhone", "Phone", ["iphone"]),
    ("XMLHttpRequest2", "XML Http Request", ["xmlhttprequest2"]),
    ("TAN-5", "TAN", ["tan-5"]),
    # Abbreviations: only the whole form, as PostgreSQL's parser alone gives it.
    ("e.g. a turbine", ". a turbine", ["e.g"]),
    ("i.e., the U.S. navy", "., the . navy", ["i.e", "u.s"]),
    ("U.S.A.", ".", ["u.s.a"]),
    ("n.a.c.a. report", ". report", ["n.a.c.a"]),
    # Plain words and numbers (even with separators) are left to to_tsvector.
    ("plain words 5326", "plain words 5326", []),
    ("3.14 5-10 1/2", "3.14 5-10 1/2", []),
    ("a b", "a b", []),  # plain one-letter words are to_tsvector's to keep or drop
    # Separators only (no parts on one side) leave the token alone.
    ("__init__", "__init__", []),
])
def test_identifiers_become_parts_plus_whole_terms(text: str, chunk: str, extras: list[str]) -> None:
    analysed = analyze(text)
    assert analysed.chunks == ([chunk] if chunk else [])
    assert analysed.extra_terms == extras


_LETTERS = st.text(alphabet="abcXYZ", min_size=1, max_size=4)
_SEPARATORS = st.sampled_from(["-", "_", ".", ":", "/"])


@given(st.lists(st.tuples(_LETTERS, st.lists(st.tuples(_SEPARATORS, _LETTERS), min_size=1, max_size=4)),
                min_size=1, max_size=6))
@settings(max_examples=200, deadline=None)
def test_no_identifier_part_shorter_than_two_characters_is_a_term(tokens: list[tuple[str, list[tuple[str, str]]]],
                                                                  ) -> None:
    # Every token below has a separator, so every word of the rewritten text is one of
    # its parts: none may be a single character; each token is kept whole.
    words = [head + "".join(sep + part for sep, part in rest) for head, rest in tokens]
    analysed = analyze(" ".join(words))
    parts = [w for chunk in analysed.chunks for w in chunk.split()]
    assert all(len(p) >= MIN_PART_CHARS for p in parts)
    assert all(any(p in w for w in words) for p in parts)
    assert all(w.lower() in analysed.extra_terms for w in words)


def test_identifiers_inside_prose() -> None:
    analysed = analyze("Fixed TAN-5326 in HttpClient.get, see getHTTPResponse.")
    assert analysed.chunks == ["Fixed TAN 5326 in Http Client get, see get HTTP Response."]
    assert analysed.extra_terms == ["tan-5326", "httpclient", "httpclient.get", "gethttpresponse"]
    analysed = analyze("Fixed TAN-5326 in HttpClient.get, e.g. in the U.S. office.")
    assert analysed.chunks == ["Fixed TAN 5326 in Http Client get, . in the . office."]
    assert analysed.extra_terms == ["tan-5326", "httpclient", "httpclient.get", "e.g", "u.s"]


def test_overlong_identifier_is_split_but_not_kept_whole() -> None:
    long_id = "-".join(["part"] * 60)  # 299 characters
    assert len(long_id) > MAX_TERM_CHARS
    analysed = analyze(long_id)
    assert analysed.extra_terms == []
    assert " ".join(analysed.chunks).split() == ["part"] * 60


def test_chunks_respect_limit_and_keep_every_word() -> None:
    words = [f"w{i % 97}x{i}" for i in range(5000)]
    text = " ".join(words)
    chunks = list(chunk_text(text))
    assert all(len(c) <= CHUNK_CHARS for c in chunks)
    assert " ".join(chunks).split() == words  # no word cut in two, none lost


def test_chunks_cut_at_newlines_and_tabs_too() -> None:
    words = [f"word{i}" for i in range(400)]
    for sep in ("\n", "\t", "\r\n"):
        chunks = list(chunk_text(sep.join(words), 50))
        assert all(len(c) <= 50 for c in chunks)
        assert [w for c in chunks for w in c.split()] == words


def test_chunks_without_whitespace_cut_between_words() -> None:
    text = ",".join(f"item{i}" for i in range(300))
    chunks = list(chunk_text(text, 40))
    assert all(len(c) <= 40 for c in chunks)
    assert [w for c in chunks for w in c.split(",") if w] == [f"item{i}" for i in range(300)]


def test_a_single_overlong_run_is_cut_hard() -> None:
    chunks = list(chunk_text("x" * 1201, 500))
    assert [len(c) for c in chunks] == [500, 500, 201]


def test_exact_fit_and_blank_pieces() -> None:
    assert list(chunk_text("abcde fghij", 5)) == ["abcde", "fghij"]
    assert list(chunk_text("abc   defgh ij", 5)) == ["abc", "defgh", "ij"]
    assert list(chunk_text("   \n  ")) == []
    assert list(chunk_text("")) == []
    assert list(chunk_text("short text")) == ["short text"]
    with pytest.raises(ValueError):
        list(chunk_text("x", 0))


def test_chunk_bound_keeps_tf_below_tsvector_cap() -> None:
    # The tightest packing of one lexeme: one-letter words separated by one character.
    chunks = list(chunk_text(" ".join(["x"] * 2000)))
    assert max(c.split().count("x") for c in chunks) <= 250 < 255


def test_long_documents_keep_every_token() -> None:
    filler = [f"filler{chr(97 + i % 26)}{chr(97 + i // 26 % 26)}" for i in range(17000)]
    text = " ".join(["alpha"] * 300 + filler)
    analysed = analyze(text)
    tokens = [w for c in analysed.chunks for w in c.split()]
    assert tokens.count("alpha") == 300 and len(tokens) == 17300


# -- the fast paths change nothing ---------------------------------------------------------

def _analyze_slowly(text: str) -> tuple[list[str], list[str]]:
    """The analysis without any shortcut: NFKC, every token through the rewrite, then chunking."""
    import re
    import unicodedata

    from tnsrag_db._store.bm25 import analysis

    extras: list[str] = []
    split_token = analysis._split_token.__wrapped__

    def replace(match: re.Match[str]) -> str:
        split = split_token(match.group(0))
        if split is None:
            return match.group(0)
        extras.extend(split[1])
        return split[0]

    text = unicodedata.normalize("NFKC", text)
    return list(chunk_text(analysis._TOKEN_RE.sub(replace, text))), extras


_PIECES = ["word", "Word", "WORD", "getHTTPResponse", "TAN-5326", "snake_case", "HttpClient.get", "3.14",
           "e.g.", "(Paren)", "end.", "École", "éA", "ǅx", "中文", "x2", "a", "-", "__", ":", "/", " ", "\n", "\t",
           "\"quoted\"", "it's", "a/b", "U.S.A."]


@given(st.lists(st.sampled_from(_PIECES), max_size=80), st.lists(st.sampled_from(["", " ", ",", "."]), max_size=80))
@settings(max_examples=300, deadline=None)
def test_shortcuts_give_the_same_analysis(pieces: list[str], glue: list[str]) -> None:
    text = "".join(p + (glue[i] if i < len(glue) else " ") for i, p in enumerate(pieces))
    result = analyze(text)
    assert (result.chunks, result.extra_terms) == _analyze_slowly(text)
    # and again, now answered from the caches
    again = analyze(text)
    assert (again.chunks, again.extra_terms) == _analyze_slowly(text)
