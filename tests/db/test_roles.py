"""The three database roles of the README, created for real on the test server.

* the owner/migrator (the test server's superuser here) owns the schema and runs
  ``tnsrag db upgrade`` and ``tnsrag db build-indexes``;
* an application role: DML on the tables, no DDL;
* a read-only role: SELECT only, no TEMP, ``default_transaction_read_only = on``
  (what a hot standby looks like to a session).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import psycopg
import pytest
from click.testing import CliRunner
from psycopg import sql
from sqlalchemy.engine import URL

from tests.fix_db import SCHEMA
from tnsrag_db import BM25Index, HashingEmbedding, MemoryEntry, VectorMemoryStore, connect
from tnsrag_db._cli.db import db
from tnsrag_db._db import migrate
from tnsrag_db._db.pool import Pool
from tnsrag_db._errors import PermissionDeniedError
from tnsrag_db._indexes.vector.hnsw import IndexBuildDeferred

PASSWORD = "tnsrag-test-role"


def _conninfo(url: URL) -> str:
    return url.set(drivername="postgresql").render_as_string(hide_password=False)


@dataclass(frozen=True)
class Roles:
    owner: URL
    app: URL
    reader: URL


@pytest.fixture(scope="module")
def roles(make_database: Callable[[], URL]) -> Iterator[Roles]:
    """A database migrated by the owner, with an application and a read-only role."""
    owner = make_database()
    pool = Pool(owner, schema=SCHEMA, pool_size=1)
    try:
        migrate.upgrade(pool, schema=SCHEMA)
    finally:
        pool.close()
    suffix = uuid.uuid4().hex[:10]
    app, reader = f"tnsrag_app_{suffix}", f"tnsrag_ro_{suffix}"
    db = sql.Identifier(str(owner.database))
    statements = [
        sql.SQL("CREATE ROLE {} LOGIN PASSWORD {}").format(sql.Identifier(app), sql.Literal(PASSWORD)),
        sql.SQL("CREATE ROLE {} LOGIN PASSWORD {}").format(sql.Identifier(reader), sql.Literal(PASSWORD)),
        sql.SQL("ALTER ROLE {} SET default_transaction_read_only = on").format(sql.Identifier(reader)),
        # PUBLIC may create temp tables by default; the read-only role must do without.
        sql.SQL("REVOKE TEMPORARY ON DATABASE {} FROM PUBLIC").format(db),
    ]
    for role, grants in ((app, ["CONNECT, TEMPORARY ON DATABASE {db}", "USAGE ON SCHEMA {s}",
                                "SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA {s}",
                                "USAGE, SELECT ON ALL SEQUENCES IN SCHEMA {s}"]),
                         (reader, ["CONNECT ON DATABASE {db}", "USAGE ON SCHEMA {s}",
                                   "SELECT ON ALL TABLES IN SCHEMA {s}"])):
        for grant in grants:
            statements.append(sql.SQL("GRANT " + grant + " TO {r}").format(db=db, s=sql.Identifier(SCHEMA),
                                                                             r=sql.Identifier(role)))
    with psycopg.connect(_conninfo(owner), autocommit=True) as conn:
        for statement in statements:
            conn.execute(statement)
    yield Roles(owner, owner.set(username=app, password=PASSWORD), owner.set(username=reader, password=PASSWORD))
    with psycopg.connect(_conninfo(owner.set(database="postgres")), autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(db))
        for role in (app, reader):
            conn.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(role)))


def _corpus() -> str:
    return f"roles_{uuid.uuid4().hex[:8]}"


ENTRIES = [MemoryEntry(f"r{i}", f"refund policy number {i} for damaged parcels", metadata={"team": "t"})
           for i in range(30)]


def test_read_only_role_connects_and_every_read_works(roles: Roles) -> None:
    corpus = _corpus()
    with connect(roles.owner, corpus=corpus) as owner:
        VectorMemoryStore(owner, HashingEmbedding(64), index_threshold=None).add_all(ENTRIES)
    with connect(roles.reader, corpus=corpus) as reader:
        assert reader.count() == 30
        assert reader.get("r3") == ENTRIES[3]
        assert len(list(reader.iter_entries(batch_size=7))) == 30
        assert BM25Index(reader).search("damaged refund", 5)
        vectors = VectorMemoryStore(reader, HashingEmbedding(64), index_threshold=None)
        assert [i for i, _ in vectors.search("refund policy number 3", 3, filters={"team": "t"})]
        # A write fails with a typed error, before anything is written.
        with pytest.raises(PermissionDeniedError):
            reader.add(MemoryEntry("new", "text"))
        with pytest.raises(PermissionDeniedError):
            reader.delete("r1")
        assert reader.count() == 30 and reader.get("new") is None


def test_application_role_writes_vectors_past_the_threshold_and_the_owner_builds_the_index(roles: Roles) -> None:
    corpus = _corpus()
    with connect(roles.app, corpus=corpus) as app:
        vectors = VectorMemoryStore(app, HashingEmbedding(32), index_threshold=20)
        with pytest.warns(IndexBuildDeferred, match="tnsrag db build-indexes"):
            counts = vectors.add_all(ENTRIES)
        assert counts.inserted == 30  # reported as written, and it was
        assert vectors.count() == 30
        sql_text, _ = vectors.candidates_sql(HashingEmbedding(32)("refund"), 3)
        assert "hnsw.ef_search" not in sql_text  # no index yet: exact scans
        # Explicitly asked, the build fails with a typed error.
        with pytest.raises(PermissionDeniedError):
            vectors.build_index()
        result = CliRunner().invoke(db, ["build-indexes", "--url", roles.owner.render_as_string(hide_password=False),
                                         "--threshold", "20", "--json"])
        assert result.exit_code == 0, result.output
        built = json.loads(result.output)["built"]
        # the exact size of the space, not the threshold the sweep counted up to
        assert [(b["corpus"], b["vectors"]) for b in built if b["corpus"] == corpus] == [(corpus, 30)]
        fresh = VectorMemoryStore(app, HashingEmbedding(32), index_threshold=20)
        sql_text, params = fresh.candidates_sql(HashingEmbedding(32)("refund"), 3)
        assert "hnsw.ef_search" in sql_text
        assert len(app.read(sql_text, params)) == 3
        # Nothing is due any more.
        again = CliRunner().invoke(db, ["build-indexes", "--url", roles.owner.render_as_string(hide_password=False),
                                        "--threshold", "20", "--json"])
        assert [b for b in json.loads(again.output)["built"] if b["corpus"] == corpus] == []


def test_upgrade_by_roles_without_create_on_a_migrated_database_reports_at_head(roles: Roles) -> None:
    for url in (roles.app, roles.reader):
        result = CliRunner().invoke(db, ["upgrade", "--url", url.render_as_string(hide_password=False)])
        assert result.exit_code == 0, result.output
        assert "at head" in result.output
        result = CliRunner().invoke(db, ["upgrade", "--url", url.render_as_string(hide_password=False), "--json"])
        assert json.loads(result.output)["at_head"] is True
