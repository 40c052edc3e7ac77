"""``tnsrag query --strategy keyword`` on the lean path (tnsrag_db._db.driver): the same output as
the full path, the full path's errors and notes, and the full path wherever the lean one
does not answer."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from click.testing import CliRunner, Result
from sqlalchemy.engine import URL

import tnsrag_db._store.store as store_module
from tnsrag_db._cli import main_group, retrieve
from tnsrag_db._store.store import Store
from tnsrag_db._types import MemoryEntry

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


@pytest.fixture
def full_path_calls(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[object]]:
    """The calls of the full path's ``connect`` (the lean path makes none)."""
    calls: list[object] = []
    real = store_module.connect

    def spy(*args: Any, **kwargs: Any) -> Store:
        calls.append(args[0] if args else kwargs.get("url"))
        return real(*args, **kwargs)

    monkeypatch.setattr(store_module, "connect", spy)
    yield calls


def _query(url: str | None, *args: str, env: dict[str, str] | None = None) -> Result:
    return CliRunner().invoke(main_group, ["query", *args, "--strategy", "keyword",
                                           *(["--url", url] if url is not None else [])], env=env)


def _url(db_url: URL) -> str:
    return db_url.render_as_string(hide_password=False)


OPTIONS = [
    ["agents share memory"],
    ["agents share memory", "--top-k", "2"],
    ["agents memory", "--filter", "tier=EPISODIC"],
    ["memory", "--filter", "topic=memory", "--filter", "source=guide.md"],
    ["agents share memory", "--min-score", "1.5"],
    ["TAN-5326"],
]


@pytest.mark.parametrize("args", OPTIONS)
def test_the_lean_path_prints_what_the_full_path_prints(db_url: URL, corpus: Store, args: list[str],
                                                       full_path_calls: list[object],
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    where = [*args, "--corpus", corpus.corpus]
    lean_json, lean_text = _query(_url(db_url), *where, "--json"), _query(_url(db_url), *where)
    assert lean_json.exit_code == 0 and lean_text.exit_code == 0, lean_json.output + lean_text.output
    assert full_path_calls == []  # answered without the store
    monkeypatch.setattr(retrieve, "lean_query", lambda *a, **k: None)
    full_json, full_text = _query(_url(db_url), *where, "--json"), _query(_url(db_url), *where)
    assert len(full_path_calls) == 2
    got, want = json.loads(lean_json.stdout), json.loads(full_json.stdout)
    assert got["results"], "the comparison is not of empty answers"
    del got["milliseconds"], want["milliseconds"]
    assert got == want
    header = re.compile(r"in [0-9.]+ ms")
    assert header.sub("", lean_text.stdout) == header.sub("", full_text.stdout)
    assert lean_text.stderr == full_text.stderr == ""


def test_the_database_url_comes_from_the_environment_too(db_url: URL, corpus: Store,
                                                         full_path_calls: list[object]) -> None:
    res = _query(None, "agents share memory", "--corpus", corpus.corpus, "--json",
                 env={"TNSRAG_DATABASE_URL": _url(db_url)})
    assert res.exit_code == 0, res.output
    assert "memory-guide" in [r["id"] for r in json.loads(res.stdout)["results"]]
    assert full_path_calls == []
    libpq_form = db_url.set(drivername="postgresql").render_as_string(hide_password=False)  # db_url: SQLAlchemy's
    res = _query(libpq_form, "agents share memory", "--corpus", corpus.corpus, "--json")
    assert res.exit_code == 0 and json.loads(res.stdout)["results"], res.output
    assert full_path_calls == []


EMPTY_ANSWERS = [
    ["memory", "--corpus", "no_such_corpus_lean"],  # an error naming the corpora
    ["memory", "--filter", "tier=semantic"],  # a filter note naming the tiers
    ["memory", "--filter", "topic=nothing", "--filter", "tier=SEMANTIC"],
    ["memory", "--filter", "colour=red"],  # a key no entry has
    ["zzyzx"],  # no match, no filter: no note
]


@pytest.mark.parametrize("args", EMPTY_ANSWERS)
def test_empty_answers_and_their_errors_are_the_full_paths_on_the_lean_path(
        db_url: URL, corpus: Store, args: list[str], full_path_calls: list[object],
        monkeypatch: pytest.MonkeyPatch) -> None:
    where = [*args] if "--corpus" in args else [*args, "--corpus", corpus.corpus]
    lean = [_query(_url(db_url), *where, *flag) for flag in ([], ["--json"])]
    assert full_path_calls == []  # answered, notes and errors included, without the store
    monkeypatch.setattr(retrieve, "lean_query", lambda *a, **k: None)
    full = [_query(_url(db_url), *where, *flag) for flag in ([], ["--json"])]
    assert len(full_path_calls) == 2
    header = re.compile(r"in [0-9.]+ ms|\"milliseconds\": [0-9.]+")
    for got, want in zip(lean, full):
        assert (got.exit_code, header.sub("", got.stdout), got.stderr) == \
            (want.exit_code, header.sub("", want.stdout), want.stderr)
    assert "Traceback" not in lean[0].output


def test_a_missing_corpus_and_an_empty_filter_answer_as_the_full_path_does(db_url: URL, corpus: Store,
                                                                            full_path_calls: list[object]) -> None:
    res = _query(_url(db_url), "memory", "--corpus", "no_such_corpus_lean")
    assert res.exit_code == 1, res.output
    assert re.search(r"^error: corpus 'no_such_corpus_lean' does not exist; corpora here: .*" + corpus.corpus,
                     res.stderr)
    assert "Traceback" not in res.output
    res = _query(_url(db_url), "memory", "--corpus", corpus.corpus, "--filter", "tier=semantic")
    assert res.exit_code == 0, res.output
    assert "0 results" in res.stdout
    assert "note: tier=semantic matches no entry; tiers here: EPISODIC, SEMANTIC, WORKING" in res.stderr
    assert full_path_calls == []  # both answered on the lean path


def test_an_empty_corpus_gets_its_note_on_the_lean_path(db_url: URL, make_store: Callable[..., Store],
                                                        full_path_calls: list[object]) -> None:
    empty = make_store()
    empty.add(ENTRIES[0])
    empty.delete(ENTRIES[0].id)  # the corpus exists and holds nothing
    res = _query(_url(db_url), "memory", "--corpus", empty.corpus)
    assert res.exit_code == 0, res.output
    assert f"note: corpus {empty.corpus!r} holds no entries yet" in res.stderr
    assert full_path_calls == []


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


@pytest.mark.parametrize("args", [["zzyzx quux"], ["memory", "--filter", "tier=semantic"]])
def test_a_query_with_no_match_sends_each_statement_once_without_sqlalchemy(
        db_url: URL, corpus: Store, args: list[str], tmp_path: Any) -> None:
    """A separate process, as the command runs: the answer's statements and those that
    explain an empty answer are each sent once, and neither SQLAlchemy nor alembic is
    imported."""
    import subprocess
    import sys

    report = tmp_path / "report.json"
    done = subprocess.run([sys.executable, "-c", _PROBE, str(report), "query", *args, "--strategy", "keyword",
                           "--corpus", corpus.corpus, "--url", _url(db_url), "--json"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["results"] == []
    seen = json.loads(report.read_text())
    assert seen["loaded"] == []
    texts = [text for text, _values in seen["sent"]]
    assert any("bm25" in text for text in texts)  # the query's own statements were sent...
    assert len(seen["sent"]) == len({json.dumps(sent) for sent in seen["sent"]})  # ...each once


def test_an_unmigrated_schema_and_bad_urls_are_the_full_paths_errors(fresh_db_url: URL, db_url: URL) -> None:
    res = _query(_url(fresh_db_url), "memory")
    assert res.exit_code == 1, res.output
    assert res.stderr == ("error: schema 'tnsrag' does not exist in this database (a read creates none); tnsrag "
                          "schemas here: none yet (tnsrag db upgrade --url ... creates one)\n"), res.stderr
    res = _query("mysql://u@h/db", "memory")
    assert res.exit_code == 1 and "tnsrag_db needs PostgreSQL, got a 'mysql' URL" in res.stderr, res.output
    res = _query(_url(db_url.set(host="127.0.0.1", port=1)), "memory")
    assert res.exit_code == 1 and res.stderr.startswith("error: could not connect:"), res.output
    assert "Traceback" not in res.output


def test_explain_and_standbys_take_the_full_path(db_url: URL, corpus: Store, full_path_calls: list[object]) -> None:
    res = _query(_url(db_url), "agents share memory", "--corpus", corpus.corpus, "--explain", "--json")
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["results"]
    assert full_path_calls == [_url(db_url)]
    res = _query(_url(db_url), "agents share memory", "--corpus", corpus.corpus, "--read-url", _url(db_url))
    assert len(full_path_calls) == 2  # whatever the standby check says, it is the full path's to say
    assert "Traceback" not in res.output


def test_a_blank_query_is_an_error_before_any_connection(db_url: URL, full_path_calls: list[object]) -> None:
    res = _query(_url(db_url), "   ")
    assert res.exit_code == 1 and "query is blank" in res.stderr, res.output
    assert full_path_calls == []


# -- vector and hybrid queries on the lean path --------------------------------------------------

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


def _strategy_query(url: str, strategy: str, *args: str) -> Result:
    return CliRunner().invoke(main_group, ["query", *args, "--strategy", strategy, "--url", url])


EMBEDDING_OPTIONS = [
    ["agents share memory"],
    ["agents share memory", "--top-k", "2", "--embedding", "hash"],
    ["agents memory", "--filter", "tier=EPISODIC"],
    ["memory", "--filter", "tier=semantic"],  # a filter note
    ["agents share memory", "--min-score", "1.5"],  # an empty answer
]


@pytest.mark.parametrize("strategy", ["vector", "hybrid"])
@pytest.mark.parametrize("args", EMBEDDING_OPTIONS)
def test_vector_and_hybrid_on_the_lean_path_print_what_the_full_path_prints(
        db_url: URL, embedded: Store, strategy: str, args: list[str], full_path_calls: list[object],
        monkeypatch: pytest.MonkeyPatch) -> None:
    where = [*args, "--corpus", embedded.corpus]
    lean = [_strategy_query(_url(db_url), strategy, *where, *flag) for flag in ([], ["--json"])]
    assert all(r.exit_code == 0 for r in lean), [r.output for r in lean]
    assert full_path_calls == []  # answered, notes included, without the store
    monkeypatch.setattr(retrieve, "lean_query", lambda *a, **k: None)
    full = [_strategy_query(_url(db_url), strategy, *where, *flag) for flag in ([], ["--json"])]
    assert len(full_path_calls) == 2
    header = re.compile(r"in [0-9.]+ ms|\"milliseconds\": [0-9.]+")
    for got, want in zip(lean, full):
        assert (got.exit_code, header.sub("", got.stdout), got.stderr) == \
            (want.exit_code, header.sub("", want.stdout), want.stderr)
    notes = json.loads(lean[1].stdout)["notes"]
    assert any("holds vectors for 3 of 4 entries" in note for note in notes), notes  # the space's note
    if args == ["agents share memory"]:
        assert json.loads(lean[1].stdout)["results"], "the comparison is not of empty answers"


@pytest.mark.parametrize("strategy", ["vector", "hybrid"])
def test_a_missing_corpus_or_space_is_the_full_paths_error_on_the_lean_path(
        db_url: URL, embedded: Store, strategy: str, full_path_calls: list[object]) -> None:
    res = _strategy_query(_url(db_url), strategy, "memory", "--corpus", "no_such_corpus_lean")
    assert res.exit_code == 1 and re.search(
        r"^error: corpus 'no_such_corpus_lean' does not exist; corpora here: .*" + embedded.corpus, res.stderr)
    res = _strategy_query(_url(db_url), strategy, "memory", "--corpus", embedded.corpus, "--embedding", "hash-64")
    assert res.exit_code == 1 and "has no embedding space for provider tnsrag-hash-64" in res.stderr, res.output
    assert full_path_calls == [] and "Traceback" not in res.output


def test_a_hybrid_query_of_a_corpus_with_edges_takes_the_full_path_only_with_a_graph_weight(
        db_url: URL, embedded: Store, full_path_calls: list[object], monkeypatch: pytest.MonkeyPatch) -> None:
    from tnsrag_db._indexes.graph import GraphStore
    from tnsrag_db._strategies import compose

    GraphStore(embedded).add_edge("memory-guide", "working-note", "see-also")
    lean = _strategy_query(_url(db_url), "hybrid", "agents share memory", "--corpus", embedded.corpus, "--json")
    assert lean.exit_code == 0 and json.loads(lean.stdout)["results"], lean.output
    assert full_path_calls == []  # hybrid by name does not run its 0-weighted graph stream
    monkeypatch.setattr(compose, "HYBRID_GRAPH_WEIGHT", 0.5)
    res = _strategy_query(_url(db_url), "hybrid", "agents share memory", "--corpus", embedded.corpus, "--json")
    assert res.exit_code == 0 and json.loads(res.stdout)["results"], res.output
    assert full_path_calls == [_url(db_url)]  # a weighted graph stream is the full path's
    res = _strategy_query(_url(db_url), "vector", "agents share memory", "--corpus", embedded.corpus, "--json")
    assert res.exit_code == 0 and len(full_path_calls) == 1  # vector search has no graph stream


@pytest.mark.parametrize("strategy", ["vector", "hybrid"])
def test_vector_and_hybrid_queries_send_each_statement_once_without_sqlalchemy(
        db_url: URL, embedded: Store, strategy: str, tmp_path: Any) -> None:
    import subprocess
    import sys

    report = tmp_path / "report.json"
    done = subprocess.run([sys.executable, "-c", _PROBE, str(report), "query", "agents share memory", "--strategy",
                           strategy, "--corpus", embedded.corpus, "--url", _url(db_url), "--json"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["results"]
    seen = json.loads(report.read_text())
    assert seen["loaded"] == []
    texts = [text for text, _values in seen["sent"]]
    assert any("embeddings" in text and "<=>" in text for text in texts)  # the ranking was sent...
    assert len(seen["sent"]) == len({json.dumps(sent) for sent in seen["sent"]})  # ...each statement once
