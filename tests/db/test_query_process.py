"""``tnsrag query`` as its process runs it: the store opened on one connection
(:func:`tnsrag_db._cli._schema.open_existing` with ``one_connection``), the strategy built by
name. Its results are the library's, its notes and errors explain empty answers, each
statement is sent once, and neither SQLAlchemy nor alembic is imported."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import pytest
from click.testing import CliRunner, Result
from sqlalchemy.engine import URL

from tnsrag_db._cli import main_group
from tnsrag_db._store.store import Store
from tnsrag_db._strategies.registry import build_strategy
from tnsrag_db._types import MemoryEntry, RAGContext, RetrievedDocument

ENTRIES = [
    MemoryEntry("memory-guide", "Agents persist semantic memory in PostgreSQL so facts survive restarts "
                "and are shared between agent processes.", "SEMANTIC", source="guide.md", metadata={"topic": "memory"}),
    MemoryEntry("tenant-acme", "Customer Acme asked how agents share one corpus of memory.", "EPISODIC",
                source="crm.md", metadata={"topic": "crm"}),
    MemoryEntry("working-note", "Agents use working memory while running a task.", "WORKING", source="scratch.md"),
    MemoryEntry("TAN-5326", "Ticket TAN-5326: the HttpClient.get call times out.", "EPISODIC", source="jira.md"),
]


@pytest.fixture
def corpus(make_store: Callable[..., Store]) -> Store:
    store = make_store()
    store.add_all(ENTRIES)
    return store


def _url(db_url: URL) -> str:
    return db_url.render_as_string(hide_password=False)


def _query(url: str | None, *args: str, strategy: str = "keyword", env: dict[str, str] | None = None) -> Result:
    return CliRunner().invoke(main_group, ["query", *args, "--strategy", strategy,
                                           *(["--url", url] if url is not None else [])], env=env)


def _expected_json(documents: list[RetrievedDocument]) -> list[dict[str, Any]]:
    """The ``--json`` results of ``documents``: the shape the command keeps stable."""
    return [{"rank": n, "id": d.metadata["entryId"], "score": d.score, "content": d.content, "source": d.source,
             "metadata": dict(d.metadata)} for n, d in enumerate(documents, 1)]


def _assert_prints(text: Result, as_json: Result, strategy: str, documents: list[RetrievedDocument]) -> list[str]:
    """Both outputs of one query show ``documents`` (the library's answer), the text one
    with the notes of the JSON one on stderr; the notes are returned."""
    assert text.exit_code == 0 and as_json.exit_code == 0, text.output + as_json.output
    got = json.loads(as_json.stdout)
    assert got["strategy"] == strategy and got["results"] == _expected_json(documents)
    assert as_json.stderr == ""  # the notes are in the JSON
    lines = text.stdout.splitlines()
    assert re.fullmatch(rf"{strategy}: {len(documents)} results? in [0-9.]+ ms", lines[0]), lines[0]
    heads = [line for line in lines if line.startswith("[")]
    assert [h.split()[:3] for h in heads] == \
        [[f"[{n}]", f"{d.score:.4f}", d.metadata["entryId"]] for n, d in enumerate(documents, 1)]
    assert text.stderr == "".join(f"note: {note}\n" for note in got["notes"])
    return list(got["notes"])


# -- keyword queries -------------------------------------------------------------------

OPTIONS = [
    (["agents share memory"], RAGContext(5)),
    (["agents share memory", "--top-k", "2"], RAGContext(2)),
    (["agents memory", "--filter", "tier=EPISODIC"], RAGContext(5, 0.0, {"tier": "EPISODIC"})),
    (["memory", "--filter", "topic=memory", "--filter", "source=guide.md"],
     RAGContext(5, 0.0, {"topic": "memory", "source": "guide.md"})),
    (["agents share memory", "--min-score", "1.5"], RAGContext(5, 1.5)),
    (["TAN-5326"], RAGContext(5)),
]


@pytest.mark.parametrize(("args", "context"), OPTIONS)
def test_a_keyword_query_prints_the_librarys_results(db_url: URL, corpus: Store, args: list[str],
                                                     context: RAGContext) -> None:
    where = [*args, "--corpus", corpus.corpus]
    text, as_json = _query(_url(db_url), *where), _query(_url(db_url), *where, "--json")
    documents = build_strategy("keyword", corpus).retrieve(args[0], context)
    assert documents, "the comparison is not of empty answers"
    assert _assert_prints(text, as_json, "keyword", documents) == []


def test_the_database_url_comes_from_the_environment_too(db_url: URL, corpus: Store) -> None:
    res = _query(None, "agents share memory", "--corpus", corpus.corpus, "--json",
                 env={"TNSRAG_DATABASE_URL": _url(db_url)})
    assert res.exit_code == 0, res.output
    assert "memory-guide" in [r["id"] for r in json.loads(res.stdout)["results"]]
    libpq_form = db_url.set(drivername="postgresql").render_as_string(hide_password=False)  # db_url: SQLAlchemy's
    res = _query(libpq_form, "agents share memory", "--corpus", corpus.corpus, "--json")
    assert res.exit_code == 0 and json.loads(res.stdout)["results"], res.output


# -- empty answers: their notes and errors ------------------------------------------------

EMPTY_ANSWERS = [
    (["memory", "--filter", "tier=semantic"],  # a filter note naming the tiers
     ["tier=semantic matches no entry; tiers here: EPISODIC, SEMANTIC, WORKING"]),
    (["memory", "--filter", "topic=nothing", "--filter", "tier=SEMANTIC"],
     ["topic=nothing matches no entry; values of topic here: crm, memory"]),
    (["memory", "--filter", "colour=red"],  # a key no entry has
     ["colour=red matches no entry; no entry has the metadata key 'colour'; keys here: "]),
    (["zzyzx"], []),  # no match, no filter: no note
]


@pytest.mark.parametrize(("args", "notes"), EMPTY_ANSWERS)
def test_an_empty_answer_prints_its_notes(db_url: URL, corpus: Store, args: list[str], notes: list[str]) -> None:
    where = [*args, "--corpus", corpus.corpus]
    got = _assert_prints(_query(_url(db_url), *where), _query(_url(db_url), *where, "--json"), "keyword", [])
    assert len(got) == len(notes) and all(g.startswith(n) for g, n in zip(got, notes)), got


@pytest.mark.parametrize("flag", [[], ["--json"]])
def test_a_missing_corpus_is_an_error_naming_the_corpora(db_url: URL, corpus: Store, flag: list[str]) -> None:
    res = _query(_url(db_url), "memory", "--corpus", "no_such_corpus_q", *flag)
    assert res.exit_code == 1, res.output
    assert re.search(r"^error: corpus 'no_such_corpus_q' does not exist; corpora here: .*" + corpus.corpus,
                     res.stderr)
    assert res.stdout == "" and "Traceback" not in res.output


def test_an_empty_corpus_gets_its_note(db_url: URL, make_store: Callable[..., Store]) -> None:
    empty = make_store()
    empty.add(ENTRIES[0])
    empty.delete(ENTRIES[0].id)  # the corpus exists and holds nothing
    res = _query(_url(db_url), "memory", "--corpus", empty.corpus)
    assert res.exit_code == 0, res.output
    assert "0 results" in res.stdout
    assert res.stderr == (f"note: corpus {empty.corpus!r} holds no entries yet: add some with tnsrag ingest PATH "
                          f"--corpus {empty.corpus}\n")


# -- the process: statements sent, modules imported ------------------------------------------

_PROBE = """
import json, sys
from tnsrag_db._db.runner import add_statement_listener
sent = []
add_statement_listener(lambda text, values: sent.append([text, [repr(v) for v in values]]))
from tnsrag_db._cli import main_group
try:
    main_group(sys.argv[2:], standalone_mode=False)
finally:
    loaded = sorted(m for m in sys.modules if m.split(".")[0] in ("sqlalchemy", "alembic"))
    with open(sys.argv[1], "w") as out:
        json.dump({"sent": sent, "loaded": loaded}, out)
"""


def _probe(tmp_path: Any, *args: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """Run ``tnsrag <args>`` in a process of its own, as the command runs: its JSON output,
    and the statements it sent (``$n`` text, values) and the SQLAlchemy or alembic modules
    it imported."""
    report = tmp_path / "report.json"
    done = subprocess.run([sys.executable, "-c", _PROBE, str(report), *args],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout), json.loads(report.read_text())


def _sent_once(seen: dict[str, Any]) -> bool:
    return len(seen["sent"]) == len({json.dumps(sent) for sent in seen["sent"]})


@pytest.mark.parametrize("args", [["zzyzx quux"], ["memory", "--filter", "tier=semantic"]])
def test_a_query_with_no_match_sends_each_statement_once_without_sqlalchemy(
        db_url: URL, corpus: Store, args: list[str], tmp_path: Any) -> None:
    """The answer's statements and those that explain an empty answer are each sent
    once, and neither SQLAlchemy nor alembic is imported."""
    output, seen = _probe(tmp_path, "query", *args, "--strategy", "keyword", "--corpus", corpus.corpus,
                          "--url", _url(db_url), "--json")
    assert output["results"] == []
    assert seen["loaded"] == []
    assert any("bm25" in text for text, _values in seen["sent"])  # the query's own statements were sent...
    assert _sent_once(seen)  # ...each once


def test_an_unmigrated_schema_and_bad_urls_are_errors(fresh_db_url: URL, db_url: URL) -> None:
    res = _query(_url(fresh_db_url), "memory")
    assert res.exit_code == 1, res.output
    assert res.stderr == ("error: schema 'tnsrag' does not exist in this database (a read creates none); tnsrag "
                          "schemas here: none yet (tnsrag db upgrade --url ... creates one)\n"), res.stderr
    res = _query("mysql://u@h/db", "memory")
    assert res.exit_code == 1 and "tnsrag_db needs PostgreSQL, got a 'mysql' URL" in res.stderr, res.output
    res = _query(_url(db_url.set(host="127.0.0.1", port=1)), "memory")
    assert res.exit_code == 1 and res.stderr.startswith("error: could not connect:"), res.output
    assert "Traceback" not in res.output


@pytest.mark.parametrize("strategy", ["keyword", "vector"])
def test_a_blank_query_is_an_error_before_any_connection(db_url: URL, strategy: str) -> None:
    # No server listens on port 1: had the command connected first, it would say "could not connect".
    unreachable = _url(db_url.set(host="127.0.0.1", port=1, query={}))
    for res in (_query(unreachable, "   ", strategy=strategy),
                _query(None, "\t", strategy=strategy, env={"TNSRAG_DATABASE_URL": unreachable})):
        assert res.exit_code == 1 and "query is blank" in res.stderr, res.output
        assert "could not connect" not in res.stderr


# -- vector and hybrid queries -------------------------------------------------------------

@pytest.fixture
def embedded(make_store: Callable[..., Store]) -> Store:
    """A corpus embedded with the hash provider, one entry of it without a vector (a partly
    filled space: its note is printed)."""
    from tnsrag_db._indexes.vector import VectorMemoryStore
    from tnsrag_db.embeddings import HashingEmbedding

    store = make_store()
    VectorMemoryStore(store, HashingEmbedding()).add_all(ENTRIES[:-1])
    store.add(ENTRIES[-1])
    return store


EMBEDDING_OPTIONS = [
    (["agents share memory"], RAGContext(5), []),
    (["agents share memory", "--top-k", "2", "--embedding", "hash"], RAGContext(2), []),
    (["agents memory", "--filter", "tier=EPISODIC"], RAGContext(5, 0.0, {"tier": "EPISODIC"}), []),
    (["memory", "--filter", "tier=semantic"], RAGContext(5, 0.0, {"tier": "semantic"}),
     ["tier=semantic matches no entry; tiers here: EPISODIC, SEMANTIC, WORKING"]),
    (["agents share memory", "--min-score", "1.5"], RAGContext(5, 1.5), []),  # an empty answer
]


@pytest.mark.parametrize("strategy", ["vector", "hybrid"])
@pytest.mark.parametrize(("args", "context", "notes"), EMBEDDING_OPTIONS)
def test_vector_and_hybrid_queries_print_the_librarys_results(db_url: URL, embedded: Store, strategy: str,
                                                              args: list[str], context: RAGContext,
                                                              notes: list[str]) -> None:
    where = [*args, "--corpus", embedded.corpus]
    text = _query(_url(db_url), *where, strategy=strategy)
    as_json = _query(_url(db_url), *where, "--json", strategy=strategy)
    documents = build_strategy(strategy, embedded).retrieve(args[0], context)  # the corpus's space: hash
    if args == ["agents share memory"]:
        assert documents, "the comparison is not of empty answers"
    got = _assert_prints(text, as_json, strategy, documents)
    assert got[:-1] == notes and "holds vectors for 3 of 4 entries" in got[-1], got  # the space's note, last


@pytest.mark.parametrize("strategy", ["vector", "hybrid"])
def test_a_missing_corpus_or_space_is_an_error(db_url: URL, embedded: Store, strategy: str) -> None:
    res = _query(_url(db_url), "memory", "--corpus", "no_such_corpus_q", strategy=strategy)
    assert res.exit_code == 1 and re.search(
        r"^error: corpus 'no_such_corpus_q' does not exist; corpora here: .*" + embedded.corpus, res.stderr)
    res = _query(_url(db_url), "memory", "--corpus", embedded.corpus, "--embedding", "hash-64", strategy=strategy)
    assert res.exit_code == 1 and "has no embedding space for provider tnsrag-hash-64" in res.stderr, res.output
    assert "Traceback" not in res.output


@pytest.mark.parametrize("strategy", ["vector", "hybrid"])
def test_vector_and_hybrid_queries_send_each_statement_once_without_sqlalchemy(
        db_url: URL, embedded: Store, strategy: str, tmp_path: Any) -> None:
    output, seen = _probe(tmp_path, "query", "agents share memory", "--strategy", strategy,
                          "--corpus", embedded.corpus, "--url", _url(db_url), "--json")
    assert output["results"]
    assert seen["loaded"] == []
    assert any("embeddings" in text and "<=>" in text for text, _values in seen["sent"])  # the ranking was sent...
    assert _sent_once(seen)  # ...each statement once
