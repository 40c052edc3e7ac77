"""``tnsrag query``: empty answers explain themselves, blank queries are errors, output shows
what each strategy adds and wraps on word boundaries; the JSON shape is stable."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from click.testing import CliRunner
from sqlalchemy.engine import URL

from tnsrag_db._cli import main_group
from tnsrag_db._errors import ValidationError
from tnsrag_db._indexes.graph import GraphStore
from tnsrag_db._indexes.vector import VectorMemoryStore
from tnsrag_db._store.store import Store
from tnsrag_db._strategies.registry import STRATEGY_NAMES, build_strategy
from tnsrag_db._types import MemoryEntry
from tnsrag_db.admin import corpus_exists
from tnsrag_db.embeddings import HashingEmbedding

LONG = ("Agents share memory across processes through PostgreSQL; every write commits with its "
        "postings and statistics, so a reader in another process sees a consistent corpus. ") * 3


def _query(db_url: URL, corpus: str, *args: str) -> Any:
    return CliRunner().invoke(main_group, ["query", *args, "--corpus", corpus,
                                           "--url", db_url.render_as_string(hide_password=False)])


@pytest.fixture
def corpus(make_store: Callable[..., Store]) -> Store:
    store = make_store()
    now = datetime.now(timezone.utc)
    VectorMemoryStore(store, HashingEmbedding()).add_all([
        MemoryEntry("root", "Manual about agent memory.", "SEMANTIC", source="manual.md"),
        MemoryEntry("root#1", LONG, "SEMANTIC", source="manual.md", parent_id="root", timestamp=now - timedelta(days=3)),
        MemoryEntry("faq", "Questions about memory sharing and agents.", "WORKING", source="faq.md",
                    metadata={"topic": "faq"}),
    ])
    GraphStore(store).add_edge("root#1", "faq", "see-also")
    return store


def test_a_query_on_a_missing_corpus_names_the_corpora_and_creates_none(db_url: URL, corpus: Store) -> None:
    res = _query(db_url, "no_such_corpus_q", "memory")
    assert res.exit_code == 1, res.output
    assert re.search(r"corpus 'no_such_corpus_q' does not exist; corpora here: .*" + corpus.corpus, res.stderr)
    assert "Traceback" not in res.output and "0 result" not in res.output
    assert not corpus_exists(corpus.with_corpus("no_such_corpus_q"))


def test_a_filter_matching_nothing_gets_a_note(db_url: URL, corpus: Store) -> None:
    res = _query(db_url, corpus.corpus, "memory", "--filter", "tier=semantic")
    assert res.exit_code == 0, res.output
    assert "0 results" in res.stdout
    assert "note: tier=semantic matches no entry; tiers here: SEMANTIC, WORKING" in res.stderr
    res = _query(db_url, corpus.corpus, "memory", "--filter", "tenant=acme", "--json")
    out = json.loads(res.stdout)
    assert out["results"] == [] and "no entry has the metadata key 'tenant'" in out["notes"][0]
    # A filter that matches entries but not the query: no note about the filter.
    res = _query(db_url, corpus.corpus, "zebra", "--strategy", "keyword", "--filter", "tier=SEMANTIC")
    assert res.exit_code == 0 and res.stderr == ""


def test_a_corpus_embedded_by_a_provider_not_installed_here_names_it_and_keyword_still_answers(
        db_url: URL, make_store: Callable[..., Store]) -> None:
    from tnsrag_db._errors import ProviderConfigurationError

    store = make_store()
    # A provider known only to the process that wrote the corpus (a plain function, named).
    VectorMemoryStore(store, lambda text: [1.0, float(len(text) % 5), 0.5], name="lab-model-3").add_all(
        [MemoryEntry("a", "turbine blade inspection"), MemoryEntry("b", "catering menu")])
    for name in ("vector", "hybrid"):
        with pytest.raises(ProviderConfigurationError,
                           match=r"provider lab-model-3, which is not installed here; install .*keyword strategy"):
            build_strategy(name, store)
    res = _query(db_url, store.corpus, "turbine")  # the default strategy needs the corpus's provider
    assert res.exit_code == 1 and "Traceback" not in res.output
    assert "lab-model-3, which is not installed here" in res.stderr and "keyword strategy" in res.stderr
    res = _query(db_url, store.corpus, "turbine", "--strategy", "keyword", "--json")
    assert res.exit_code == 0, res.output
    assert [r["id"] for r in json.loads(res.stdout)["results"]] == ["a"]


@pytest.mark.parametrize("text", ["", "   ", "\t\n"])
def test_a_blank_query_is_an_error_in_the_cli(db_url: URL, corpus: Store, text: str) -> None:
    res = _query(db_url, corpus.corpus, text)
    assert res.exit_code == 1 and "error: query is blank" in res.stderr and "Traceback" not in res.output


def test_a_blank_query_is_a_validation_error_for_every_strategy(corpus: Store) -> None:
    for name in STRATEGY_NAMES:
        strategy = build_strategy(name, corpus, embedding=HashingEmbedding())
        for text in ("", "  "):
            with pytest.raises(ValidationError, match="query is blank"):
                strategy.retrieve(text)


def test_json_results_carry_id_score_content_source_metadata(db_url: URL, corpus: Store) -> None:
    res = _query(db_url, corpus.corpus, "agents memory", "--strategy", "keyword", "--json")
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert set(out) >= {"query", "strategy", "milliseconds", "results", "notes"}
    first = out["results"][0]
    assert {"rank", "id", "score", "content", "source", "metadata"} <= set(first)
    assert first["id"] == first["metadata"]["entryId"] and first["rank"] == 1
    assert {r["id"] for r in out["results"]} <= {"root", "root#1", "faq"}


def _blocks(stdout: str) -> list[list[str]]:
    """The output lines of each result (its header line first)."""
    blocks: list[list[str]] = []
    for line in stdout.splitlines()[1:]:
        if re.match(r"\[\d+\] ", line):
            blocks.append([line])
        else:
            blocks[-1].append(line)
    return blocks


def test_text_output_wraps_on_words_and_shows_what_each_strategy_adds(db_url: URL, corpus: Store) -> None:
    res = _query(db_url, corpus.corpus, "consistent corpus postings", "--strategy", "keyword", "--top-k", "1")
    assert res.exit_code == 0, res.output
    (block,) = _blocks(res.stdout)
    assert block[0].startswith("[1] ") and "root#1" in block[0] and "(SEMANTIC, manual.md)" in block[0]
    body = block[1:]
    assert 2 <= len(body) <= 3 and all(line.startswith("    ") and len(line) <= 100 for line in body)
    words = set(LONG.split()) | {"..."}
    assert all(w in words for line in body for w in line.split())  # no word cut in two
    graph = _query(db_url, corpus.corpus, "consistent corpus postings", "--strategy", "graph")
    faq = next(b for b in _blocks(graph.stdout) if "faq" in b[0])
    assert "    depth 1; path root#1 > faq" in faq
    temporal = _query(db_url, corpus.corpus, "consistent corpus postings", "--strategy", "temporal")
    fresh = next(b for b in _blocks(temporal.stdout) if "root#1" in b[0])
    assert any(re.fullmatch(r"    freshness 0\.9\d\d, age 3\.0 d", line) for line in fresh), fresh
    hier = _query(db_url, corpus.corpus, "consistent corpus postings", "--strategy", "hierarchical")
    blocks = {b[0].split()[2]: b for b in _blocks(hier.stdout)}
    assert "    hit" in blocks["root#1"] and "    level 1 above root#1" in blocks["root"]


@pytest.mark.parametrize("command", [["stats"], ["corpora"], ["query", "agent memory"], ["query", "agent memory",
                                                                                       "--strategy", "vector"]])
def test_an_unreachable_server_is_one_error_without_sqlalchemy_s_link(tmp_path: Any, command: list[str]) -> None:
    # A socket directory with no server: the driver's words (and its hint), not SQLAlchemy's
    # class tag and "Background on this error at: https://sqlalche.me/..." line.
    url = f"postgresql://nobody@/nodb?host={tmp_path / 'no-socket-here'}"
    res = CliRunner().invoke(main_group, [*command, "--url", url])
    assert res.exit_code == 1, res.output
    assert res.stderr.startswith("error: could not connect: "), res.stderr
    assert "no-socket-here" in res.stderr and "Traceback" not in res.output
    assert "sqlalche.me" not in res.stderr and "Background on this error" not in res.stderr, res.stderr
    assert "(psycopg." not in res.stderr and "[SQL:" not in res.stderr, res.stderr


def test_the_cli_error_line_drops_what_sqlalchemy_adds() -> None:
    from tnsrag_db._cli._common import error_text
    from tnsrag_db._errors import DatabaseError

    wrapped = DatabaseError('upgrade failed: (psycopg.errors.UndefinedTable) relation "x" does not exist\n'
                            "LINE 1: SELECT * FROM x\n[SQL: SELECT * FROM x WHERE a[1] = %(p)s]\n"
                            "[parameters: {'p': 1}]\n(Background on this error at: https://sqlalche.me/e/21/f405)")
    assert error_text(wrapped) == 'upgrade failed: relation "x" does not exist\nLINE 1: SELECT * FROM x'
    assert error_text(DatabaseError("plain (words) stay")) == "plain (words) stay"


@pytest.mark.parametrize(("args", "suggested"), [
    (["query", "x", "--strategy", "semantic"], "Did you mean 'vector'?"),  # a word for a strategy
    (["query", "x", "--strategy", "bm25"], "Did you mean 'keyword'?"),
    (["query", "x", "--strategy", "hybird"], "Did you mean 'hybrid'?"),  # a typo
    (["query", "x", "--strategy", "multi-query"], "Did you mean 'multi_query'?"),
    (["eval", "--strategy", "vektor"], "Did you mean 'vector'?"),
    (["ingest", "x", "--tier", "semantic"], "Did you mean 'SEMANTIC'?"),
    (["querry", "x"], "No such command 'querry'. Did you mean 'query'?"),  # a command of the lazy root group
    (["search", "x"], "No such command 'search'. Did you mean 'query'?"),
    (["copora"], "No such command 'copora'. Did you mean 'corpora'?"),
    (["db", "upgarde"], "No such command 'upgarde'. Did you mean 'upgrade'?"),  # and of its subgroups
    (["server", "strat"], "Did you mean 'start'"),
    (["graph", "add-edges"], "Did you mean 'add-edge'?"),
])
def test_a_mistyped_strategy_or_command_gets_a_suggestion(args: list[str], suggested: str) -> None:
    res = CliRunner().invoke(main_group, args)
    assert res.exit_code == 2 and suggested in res.stderr, res.stderr


def test_a_word_close_to_nothing_gets_no_suggestion() -> None:
    res = CliRunner().invoke(main_group, ["query", "x", "--strategy", "zzzz"])
    assert res.exit_code == 2 and "'zzzz' is not one of" in res.stderr and "Did you mean" not in res.stderr
    res = CliRunner().invoke(main_group, ["qqqqqq"])
    assert res.exit_code == 2 and "No such command 'qqqqqq'." in res.stderr and "Did you mean" not in res.stderr


def test_counts_agree_with_their_nouns() -> None:
    from tnsrag_db._cli._common import plural

    assert [plural(n, "entry") for n in (0, 1, 2)] == ["0 entries", "1 entry", "2 entries"]
    assert [plural(n, "file") for n in (1, 12)] == ["1 file", "12 files"]
    assert plural(1, "key") == "1 key" and plural(3, "key") == "3 keys"  # a vowel before the y
