"""Rolling upgrades: the schema serves the previous release until the operator finishes the
upgrade, and only then do changes it cannot read (postings merged into blocks) take effect.

Tried with a real previous release (the tree of the commit before revision 0011, run in a
child process) reading and writing beside an upgrade, this release's writes and merges,
and the finish; and with a schema one revision ahead of this release, as a later release
leaves it."""

from __future__ import annotations

import json
import random
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from sqlalchemy.engine import URL

from bench.attack._previous_release import PREVIOUS_HEAD, PreviousRelease, previous_release_tree
from tests.db.test_bm25 import QUERIES, VOCAB, generated_entries, random_text
from tests.db.test_bm25_blocks import layout
from tnsrag_db import connect
from tnsrag_db._cli import main_group
from tnsrag_db._db import migrate
from tnsrag_db._db.migration_ops import compat_function_sql
from tnsrag_db._db.pool import OneConnection, Pool
from tnsrag_db._errors import MigrationError, SchemaNotReadyError
from tnsrag_db._indexes.bm25 import BM25Index
from tnsrag_db._store.store import Store
from tnsrag_db._types import MemoryEntry

SCHEMA = "tnsrag"


@pytest.fixture()
def pool(fresh_db_url: URL) -> Iterator[Pool]:
    eng = Pool(fresh_db_url, schema=SCHEMA, pool_size=3)
    try:
        yield eng
    finally:
        eng.close()


def _previous(dest: Path) -> Path:
    try:
        return previous_release_tree(dest)
    except LookupError as exc:
        pytest.skip(str(exc))


def _url(url: URL) -> str:
    return url.render_as_string(hide_password=False)


def _rankings(store: Store, queries: list[str], k: int = 50) -> list[list[tuple[str, float]]]:
    index = BM25Index(store)
    return [index.search(q, k) for q in queries]


def _same(theirs: list[list[list[object]]], ours: list[list[tuple[str, float]]]) -> None:
    """The previous release's rankings equal this release's: the same ids in the same order,
    the same scores (both compute them in SQL from the same statistics)."""
    assert [[i for i, _ in r] for r in theirs] == [[i for i, _ in r] for r in ours]
    for t, o in zip(theirs, ours):
        assert [s for _, s in t] == pytest.approx([s for _, s in o], rel=1e-9)


def _queries(rng: random.Random) -> list[str]:
    return QUERIES + [random_text(rng, rng.randint(1, 5)) for _ in range(26)]


def _upgrade_cli(url: URL, *extra: str) -> dict[str, object]:
    result = CliRunner().invoke(main_group, ["db", "upgrade", "--url", _url(url), "--json", *extra])
    assert result.exit_code == 0, result.output
    answer: dict[str, object] = json.loads(result.stdout)
    return answer


@pytest.mark.slow
def test_the_previous_release_answers_exactly_beside_the_upgrade_until_the_finish(
        fresh_db_url: URL, pool: Pool, tmp_path: Path) -> None:
    tree = _previous(tmp_path / "previous")
    url = _url(fresh_db_url)
    rng = random.Random(36)
    queries = _queries(rng)
    old = PreviousRelease(tree, url, "shared")
    writer = PreviousRelease(tree, url, "shared")
    try:
        # The previous release creates its schema (0010) and writes; its processes stay connected.
        assert old.send(op="connect", auto_migrate=True)["ok"]
        assert writer.send(op="connect")["ok"]
        first = generated_entries(rng, 120, prefix="old")
        assert writer.send(op="add", entries=[[e.id, e.content] for e in first])["ok"]

        # The upgrade, beside them: the floor stays at the previous release.
        answer = _upgrade_cli(fresh_db_url)
        assert answer["to"] == migrate.head_revision() and answer["serves_from"] == PREVIOUS_HEAD
        assert answer["finished"] is False

        # This release writes, and would merge after every entry: the merges wait.
        store = Store(pool, corpus="shared", schema=SCHEMA, merge_after_entries=1)
        store.add_all(generated_entries(rng, 150, prefix="new"))
        with pytest.raises(SchemaNotReadyError, match="upgrade --finish"):
            store.merge_postings()
        result = CliRunner().invoke(main_group, ["db", "merge-postings", "--url", url])
        assert result.exit_code != 0 and "--finish" in result.output
        # The previous release's writer deletes and rewrites beside them.
        assert writer.send(op="delete", ids=[e.id for e in first[:10]])["deleted"] > 0
        assert writer.send(op="add", entries=[[first[10].id, "agent memory rewritten by the old writer"]])["ok"]
        store.delete("new001")
        assert layout(store)["merged"] == 0 and layout(store)["blocks"] == 0

        ours = _rankings(store, queries)
        assert sum(map(len, ours)) > 0
        _same(old.send(op="search", queries=queries, k=50)["results"], ours)

        # The finish, once the rollout is over: merges take effect, this release's answers stay.
        answer = _upgrade_cli(fresh_db_url, "--finish")
        assert answer["finished"] is True and answer["serves_from"] == "0013"  # the salted lock keys' revision
        assert store.merge_postings().entries > 0
        assert layout(store)["rows_entries"] == 0
        _same([[[i, s] for i, s in r] for r in _rankings(store, queries)], ours)
    finally:
        old.close()
        writer.close()


@pytest.mark.slow
def test_a_previous_release_started_after_the_upgrade_is_refused(fresh_db_url: URL, pool: Pool,
                                                                  tmp_path: Path) -> None:
    # A release already out cannot be changed: its head check wants exactly 0010. From
    # this release on, a newer schema that serves the release is accepted (see below).
    tree = _previous(tmp_path / "previous")
    migrate.upgrade(pool, schema=SCHEMA)
    late = PreviousRelease(tree, _url(fresh_db_url), "late")
    try:
        answer = late.send(op="connect")
        assert answer["error"] == "SchemaNotReadyError" and PREVIOUS_HEAD in answer["message"]
    finally:
        late.close()


def _ahead(pool: Pool, *, serves_from: str) -> str:
    """Make the schema look as a later release leaves it: one revision past this release's
    head, serving releases from ``serves_from`` on. Returns that revision."""
    ahead = f"{int(migrate.head_revision()) + 1:04d}"
    with pool.begin() as conn:
        conn.execute(f"UPDATE {SCHEMA}.alembic_version SET version_num = :v", {"v": ahead})
        conn.execute((compat_function_sql(SCHEMA, serves_from, None)))
    return ahead


def test_a_schema_one_revision_ahead_that_serves_this_release_is_used(fresh_db_url: URL, pool: Pool) -> None:
    migrate.upgrade(pool, schema=SCHEMA)
    ahead = _ahead(pool, serves_from=migrate.head_revision())
    url = _url(fresh_db_url)
    # A URL without auto-migration, auto-migration (nothing to do), the command line.
    store = connect(url, corpus="ahead")
    try:
        store.add_all([MemoryEntry("a", "agent memory in a newer schema"), MemoryEntry("b", "vector index")])
        assert [i for i, _ in BM25Index(store).search("agent memory", 5)] == ["a"]
    finally:
        store.close()
    connect(url, corpus="ahead", auto_migrate=True).close()
    with OneConnection(url, schema=SCHEMA) as one:  # the command line's one connection
        assert migrate.schema_state(one, schema=SCHEMA).usable
    result = CliRunner().invoke(main_group, ["query", "agent memory", "--url", url, "--corpus", "ahead",
                                             "--strategy", "keyword", "--json"])
    assert result.exit_code == 0, result.output
    assert [r["id"] for r in json.loads(result.stdout)["results"]][:1] == ["a"]
    # The CLI says where the schema stands, and an upgrade by this release changes nothing.
    result = CliRunner().invoke(main_group, ["db", "upgrade", "--url", url])
    assert result.exit_code == 0 and f"at revision {ahead}, newer than this tnsrag_db" in result.output
    result = CliRunner().invoke(main_group, ["db", "current", "--url", url, "--json"])
    assert json.loads(result.stdout)["usable"] is True


def test_a_schema_that_no_longer_serves_this_release_is_refused_with_what_helps(fresh_db_url: URL,
                                                                                  pool: Pool) -> None:
    migrate.upgrade(pool, schema=SCHEMA)
    ahead = _ahead(pool, serves_from=f"{int(migrate.head_revision()) + 1:04d}")
    url = _url(fresh_db_url)
    for auto in (False, True):
        with pytest.raises((SchemaNotReadyError, MigrationError), match=f"{ahead}.*upgrade tnsrag_db"):
            connect(url, corpus="x", auto_migrate=auto)
    result = CliRunner().invoke(main_group, ["query", "agent", "--url", url, "--strategy", "keyword"])
    assert result.exit_code != 0 and "upgrade tnsrag_db" in result.output
    result = CliRunner().invoke(main_group, ["db", "upgrade", "--url", url])
    assert result.exit_code != 0 and "upgrade tnsrag_db" in result.output
    with pool.begin() as conn:  # its version row as it was (the database is dropped after the test)
        conn.execute(f"UPDATE {SCHEMA}.alembic_version SET version_num = :v",
                     {"v": migrate.head_revision()})


def test_merges_wait_for_the_finish_after_an_upgrade_of_a_used_schema(pool: Pool) -> None:
    migrate.upgrade(pool, schema=SCHEMA, revision=PREVIOUS_HEAD)
    with pool.begin() as conn:  # the previous release's corpus (its rows, as it writes them)
        conn.execute(f"INSERT INTO {SCHEMA}.corpora (corpus) VALUES ('used')")
    migrate.upgrade(pool, schema=SCHEMA)
    assert migrate.served_releases(pool, schema=SCHEMA) == (PREVIOUS_HEAD, "0013")
    store = Store(pool, corpus="used", schema=SCHEMA, merge_after_entries=1)
    store.add_all(generated_entries(random.Random(5), 40))
    store.add(MemoryEntry("one-more", "agent memory"))  # an automatic merge after each write: deferred
    assert layout(store)["merged"] == 0
    before = _rankings(store, QUERIES)
    with pytest.raises(SchemaNotReadyError, match="still serves releases"):
        store.merge_postings()
    report = migrate.finish(pool, schema=SCHEMA)
    assert (report.serves_from_before, report.serves_from, report.changed) == (PREVIOUS_HEAD, "0013", True)
    assert migrate.finish(pool, schema=SCHEMA).changed is False  # nothing waits any more
    assert store.merge_postings().entries > 0
    assert [[i for i, _ in r] for r in _rankings(store, QUERIES)] == [[i for i, _ in r] for r in before]


def test_a_new_schema_and_one_already_merged_need_no_finish(pool: Pool) -> None:
    migrate.upgrade(pool, schema=SCHEMA)
    assert migrate.served_releases(pool, schema=SCHEMA) == ("0013", None)
    store = Store(pool, corpus="merged", schema=SCHEMA, merge_after_entries=10**9)
    store.add_all(generated_entries(random.Random(9), 30))
    assert store.merge_postings().entries > 0
    # Down to 0011 and up again with blocks in place: a merge already hid rows from older readers.
    migrate.downgrade(pool, schema=SCHEMA, revision="0011")
    migrate.upgrade(pool, schema=SCHEMA, revision="0012")
    assert migrate.served_releases(pool, schema=SCHEMA) == ("0011", None)
    # Revision 0013's salted lock keys wait for the finish (a release before it may run), merges do not.
    migrate.upgrade(pool, schema=SCHEMA)
    assert migrate.served_releases(pool, schema=SCHEMA) == ("0011", "0013")
    assert store.merge_postings().deferred is False
    assert migrate.finish(pool, schema=SCHEMA).serves_from == "0013"


def _waiting_on_entries(pool: Pool) -> bool:
    with pool.connect() as conn:
        return bool(conn.execute((
            "SELECT EXISTS (SELECT 1 FROM pg_locks l JOIN pg_class c ON c.oid = l.relation "
            "WHERE NOT l.granted AND c.relname = 'entries')")).scalar_one())


def test_a_downgrade_beside_a_previous_release_writer_leaves_no_orphans_and_exact_df(pool: Pool) -> None:
    migrate.upgrade(pool, schema=SCHEMA)
    store = Store(pool, corpus="down", schema=SCHEMA, merge_after_entries=10**9)
    entries = generated_entries(random.Random(11), 80)
    store.add_all(entries)
    store.merge_postings()
    gone = [e.id for e in entries if e.content.strip()][:20]
    # The revisions after 0012 first, with no writer in flight: the race is 0011's copy.
    migrate.downgrade(pool, schema=SCHEMA, revision="0012")
    done: list[BaseException | None] = []
    with pool.connect() as writer:
        # A previous-release writer's delete, in flight: the rows of the entries, then the entries.
        writer.execute((f"DELETE FROM {SCHEMA}.bm25_postings WHERE corpus = 'down' "
                               "AND entry_id = ANY (:ids)"), {"ids": gone})
        writer.execute(f"DELETE FROM {SCHEMA}.entries WHERE corpus = 'down' AND id = ANY (:ids)",
                       {"ids": gone})

        def down() -> None:
            try:
                migrate.downgrade(pool, schema=SCHEMA, revision=PREVIOUS_HEAD, lock_timeout=0)
                done.append(None)
            except BaseException as exc:  # noqa: BLE001 - reported below
                done.append(exc)

        thread = threading.Thread(target=down)
        thread.start()
        deadline = time.monotonic() + 60
        while not _waiting_on_entries(pool) and thread.is_alive() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert thread.is_alive(), done  # the downgrade waits for the writer, before copying anything
        writer.commit()
        thread.join(timeout=120)
    assert done == [None]
    with pool.begin() as conn:
        conn.execute(f"SET LOCAL search_path TO {SCHEMA}")
        orphans = conn.execute((
            "SELECT count(*) FROM bm25_postings p WHERE p.corpus = 'down' AND NOT EXISTS ("
            "SELECT 1 FROM entries e WHERE e.corpus = p.corpus AND e.id = p.entry_id)")).scalar_one()
        wrong_df = conn.execute((
            "SELECT count(*) FROM (SELECT lexeme, sum(df) AS df FROM bm25_df WHERE corpus = 'down' "
            "GROUP BY lexeme HAVING sum(df) <> 0) d FULL JOIN (SELECT lexeme, count(*) AS df FROM bm25_postings "
            "WHERE corpus = 'down' GROUP BY lexeme) p USING (lexeme) WHERE d.df IS DISTINCT FROM p.df")).scalar_one()
    assert (orphans, wrong_df) == (0, 0)
    # The deleted ids can be written again.
    migrate.upgrade(pool, schema=SCHEMA)
    store = Store(pool, corpus="down", schema=SCHEMA)
    store.add_all([MemoryEntry(i, "written again " + " ".join(VOCAB[:3])) for i in gone])
    assert set(gone) <= {i for i, _ in BM25Index(store).search("written again", 100)}


def test_a_new_corpus_is_embedded_as_every_served_release_reads_it(pool: Pool, fresh_db_url: URL,
                                                                   tmp_path: Path) -> None:
    # While the schema serves the previous release (it knows no contextual space), a new
    # corpus gets the plain shipped model, which that release can embed its queries with;
    # after the finish, the default (the shipped model with each entry's context).
    from tnsrag_db._indexes.vector.spaces import default_embedding_name, query_embedding
    from tnsrag_db.embeddings import DEFAULT_EMBEDDING_NAME, SHIPPED_MODEL_NAME

    migrate.upgrade(pool, schema=SCHEMA, revision=PREVIOUS_HEAD)
    with pool.begin() as conn:  # the previous release's corpus
        conn.execute(f"INSERT INTO {SCHEMA}.corpora (corpus) VALUES ('used')")
    migrate.upgrade(pool, schema=SCHEMA)
    assert migrate.served_releases(pool, schema=SCHEMA)[0] == PREVIOUS_HEAD
    store = Store(pool, corpus="fresh", schema=SCHEMA)
    assert default_embedding_name(store) == SHIPPED_MODEL_NAME
    assert query_embedding(store).name == SHIPPED_MODEL_NAME
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.md").write_text("# A\n\nagents keep memory\n")
    url = _url(fresh_db_url)
    res = CliRunner().invoke(main_group, ["ingest", str(docs), "--url", url, "--corpus", "fresh", "--quiet", "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["embedding"] == SHIPPED_MODEL_NAME

    migrate.finish(pool, schema=SCHEMA)
    later = Store(pool, corpus="later", schema=SCHEMA)
    assert default_embedding_name(later) is None
    assert query_embedding(later).name == DEFAULT_EMBEDDING_NAME
    # The corpus written during the rollout keeps its plain space.
    res = CliRunner().invoke(main_group, ["ingest", str(docs), "--url", url, "--corpus", "fresh", "--quiet", "--json"])
    assert res.exit_code == 0 and json.loads(res.stdout)["embedding"] == SHIPPED_MODEL_NAME
