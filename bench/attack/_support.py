"""Shared helpers of the attack scripts: a migrated database, the BM25 recomputation, tables."""

from __future__ import annotations

import argparse
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any, NamedTuple

import psycopg
from psycopg import sql
from sqlalchemy.engine import URL, make_url

from bench._common import database_url
from tests.fix_db import sa_url
from tnsrag_db._db import migrate
from tnsrag_db._db.pool import Pool
from tnsrag_db._store.store import Store

__all__ = ["SCHEMA", "TenantPair", "arguments", "create_login_roles", "inconsistencies", "libpq", "migrated_database",
           "print_table", "tenant_pair"]

SCHEMA = "tnsrag"


def arguments(description: str, seconds: float) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--url", default=None, help="server URL (default: a temporary embedded server)")
    parser.add_argument("--seconds", type=float, default=seconds, help="time budget of the attack")
    return parser.parse_args()


@contextmanager
def migrated_database(url: str | None) -> Iterator[str]:
    """A fresh database migrated to head on ``url``'s server (dropped afterwards); yields its URL."""
    with database_url(url) as server:
        base = sa_url(server)
        name = f"tnsrag_attack_{uuid.uuid4().hex[:10]}"
        admin = base.set(drivername="postgresql").render_as_string(hide_password=False)
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        target = base.set(database=name)
        pool = Pool(target, schema=SCHEMA, pool_size=1)
        try:
            migrate.upgrade(pool, schema=SCHEMA)
        finally:
            pool.close()
        try:
            yield target.render_as_string(hide_password=False)
        finally:
            with psycopg.connect(admin, autocommit=True) as conn:
                conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


def create_login_roles(admin: str, database: str, roles: Sequence[str], password: str) -> None:
    """Create each of ``roles`` as a login role with ``password``, allowed to connect to
    ``database`` and to create temporary tables there (what a tenant needs besides its
    grant), through ``admin`` (a libpq URL of a role that may create roles)."""
    with psycopg.connect(admin, autocommit=True) as conn:
        for role in roles:
            conn.execute(sql.SQL("CREATE ROLE {} LOGIN PASSWORD {}").format(sql.Identifier(role), sql.Literal(password)))
            conn.execute(sql.SQL("GRANT CONNECT, TEMPORARY ON DATABASE {} TO {}").format(
                sql.Identifier(database), sql.Identifier(role)))


def libpq(url: object) -> str:
    """``url`` (either form) as a libpq URL, for psycopg."""
    return make_url(str(url)).set(drivername="postgresql").render_as_string(hide_password=False)


class TenantPair(NamedTuple):
    """Two tenant login roles on one database, tenancy on, nothing granted yet."""

    owner: URL
    admin: str  # the owner's libpq URL
    pool: Any  # the owner's engine (one connection)
    role_a: str
    role_b: str
    corpus_a: str
    corpus_b: str
    url_a: URL
    url_b: URL


def tenant_pair(url: str, prefix: str, password: str) -> TenantPair:
    """Create roles ``{prefix}_a_*`` and ``{prefix}_b_*`` with ``password`` on ``url``'s
    database and switch tenancy on; the caller grants each its corpus (``alpha_*``, ``beta_*``)."""
    from tnsrag_db import tenancy

    owner = make_url(url)
    suffix = uuid.uuid4().hex[:8]
    role_a, role_b = f"{prefix}_a_{suffix}", f"{prefix}_b_{suffix}"
    admin = libpq(owner)
    pool = engine_for(url, pool_size=1)
    create_login_roles(admin, str(owner.database), (role_a, role_b), password)
    tenancy.enable(pool, schema=SCHEMA)
    return TenantPair(owner, admin, pool, role_a, role_b, f"alpha_{suffix}", f"beta_{suffix}",
                      owner.set(username=role_a, password=password), owner.set(username=role_b, password=password))


def inconsistencies(store: Store) -> dict[str, int]:
    """Differences between the stored BM25 bookkeeping and a recomputation from the entries."""
    c = {"c": store.corpus}
    one = lambda q: int(store.read(q, c)[0].n)  # noqa: E731
    # Live postings: the per-entry rows, and the merged blocks' postings whose number is not
    # tombstoned, each with its entry.
    live = ("SELECT p.lexeme, p.entry_id FROM bm25_postings p WHERE p.corpus = :c UNION ALL "
            "SELECT b.lexeme, d.entry_id FROM bm25_blocks b CROSS JOIN unnest(b.docnos) u(docno) "
            "LEFT JOIN bm25_docs d ON d.corpus = :c AND d.docno = u.docno WHERE b.corpus = :c "
            "AND u.docno NOT IN (SELECT t.docno FROM bm25_tombstones t WHERE t.corpus = :c)")
    return {
        "orphan postings": one(f"SELECT count(*) AS n FROM ({live}) p WHERE p.entry_id IS NULL OR NOT EXISTS "
                               "(SELECT 1 FROM entries e WHERE e.corpus = :c AND e.id = p.entry_id)"),
        "missing postings": one("SELECT count(*) AS n FROM entries e CROSS JOIN unnest(e.lexemes) l(lexeme) "
                                f"WHERE e.corpus = :c AND NOT EXISTS (SELECT 1 FROM ({live}) p WHERE "
                                "p.lexeme = l.lexeme AND p.entry_id = e.id)"),
        "wrong df": one("SELECT count(*) AS n FROM (SELECT lexeme, sum(df) AS df FROM bm25_df WHERE corpus = :c "
                        f"GROUP BY lexeme) d FULL JOIN (SELECT lexeme, count(*) AS df FROM ({live}) x "
                        "GROUP BY lexeme) p USING (lexeme) WHERE coalesce(d.df, 0) <> coalesce(p.df, 0)"),
        "wrong n_docs": one("SELECT abs((SELECT coalesce(sum(n_docs), 0) FROM bm25_stats WHERE corpus = :c) "
                            "- (SELECT count(*) FROM entries WHERE corpus = :c)) AS n"),
        "wrong total_len": one("SELECT abs((SELECT coalesce(sum(total_len), 0) FROM bm25_stats WHERE corpus = :c) "
                               "- (SELECT coalesce(sum(doc_len), 0) FROM entries WHERE corpus = :c)) AS n"),
    }


def print_table(title: str, rows: Sequence[tuple[str, object]]) -> None:
    width = max(len(k) for k, _ in rows)
    print(f"\n{title}\n" + "-" * (width + 14))
    for key, value in rows:
        print(f"{key:<{width}}  {value}")


def engine_for(url: str, pool_size: int = 4):  # type: ignore[no-untyped-def]
    return Pool(make_url(url), schema=SCHEMA, pool_size=pool_size)
