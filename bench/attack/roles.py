"""The three database roles of the README, created for real: what each may and may not do.

An application role (DML only) writes vectors past the HNSW threshold (the build is
deferred with a warning, the write stands), a read-only role (no TEMP,
``default_transaction_read_only``) runs every retrieval and is refused every write with
a typed error, both run ``tnsrag db upgrade`` on the migrated database ("at head"), and
the owner's ``tnsrag db build-indexes`` builds what is due.
"""

from __future__ import annotations

import uuid
import warnings
from collections.abc import Callable

import psycopg
from click.testing import CliRunner
from psycopg import sql
from sqlalchemy.engine import make_url

from bench.attack._support import SCHEMA, arguments, migrated_database, print_table
from tnsrag_db import BM25Index, HashingEmbedding, HybridRAGStrategy, MemoryEntry, VectorMemoryStore, connect
from tnsrag_db._cli.db import db
from tnsrag_db._errors import PermissionDeniedError
from tnsrag_db._indexes.vector.hnsw import IndexBuildDeferred

PASSWORD = "attack-role"


def main() -> None:
    rows: list[tuple[str, object]] = []
    held = True

    def check(what: str, fn: Callable[[], bool]) -> None:
        nonlocal held
        try:
            ok = fn()
        except Exception as exc:  # reported as broken
            ok = False
            what += f" ({type(exc).__name__}: {str(exc)[:80]})"
        held = held and ok
        rows.append((what, "held" if ok else "BROKEN"))

    args = arguments(__doc__ or "", 30.0)
    with migrated_database(args.url) as url:
        owner = make_url(url)
        suffix = uuid.uuid4().hex[:8]
        app, ro = f"attack_app_{suffix}", f"attack_ro_{suffix}"
        admin = owner.set(drivername="postgresql").render_as_string(hide_password=False)
        dbname, s = sql.Identifier(str(owner.database)), sql.Identifier(SCHEMA)
        with psycopg.connect(admin, autocommit=True) as conn:
            for role in (app, ro):
                conn.execute(sql.SQL("CREATE ROLE {} LOGIN PASSWORD {}").format(sql.Identifier(role),
                                                                                 sql.Literal(PASSWORD)))
            conn.execute(sql.SQL("ALTER ROLE {} SET default_transaction_read_only = on").format(sql.Identifier(ro)))
            conn.execute(sql.SQL("REVOKE TEMPORARY ON DATABASE {} FROM PUBLIC").format(dbname))
            for grant in ("GRANT CONNECT, TEMPORARY ON DATABASE {d} TO {r}", "GRANT USAGE ON SCHEMA {s} TO {r}",
                          "GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA {s} TO {r}",
                          "GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA {s} TO {r}"):
                conn.execute(sql.SQL(grant).format(d=dbname, s=s, r=sql.Identifier(app)))
            for grant in ("GRANT CONNECT ON DATABASE {d} TO {r}", "GRANT USAGE ON SCHEMA {s} TO {r}",
                          "GRANT SELECT ON ALL TABLES IN SCHEMA {s} TO {r}"):
                conn.execute(sql.SQL(grant).format(d=dbname, s=s, r=sql.Identifier(ro)))
        app_url = owner.set(username=app, password=PASSWORD)
        ro_url = owner.set(username=ro, password=PASSWORD)
        entries = [MemoryEntry(f"e{i}", f"parcel refund rule {i}", metadata={"team": "t"}) for i in range(40)]
        try:
            with connect(app_url, corpus="roles") as store:
                vectors = VectorMemoryStore(store, HashingEmbedding(32), index_threshold=30)

                def app_write() -> bool:
                    with warnings.catch_warnings(record=True) as seen:
                        warnings.simplefilter("always")
                        counts = vectors.add_all(entries)
                    return counts.inserted == 40 and vectors.count() == 40 and any(
                        isinstance(w.message, IndexBuildDeferred) for w in seen)

                check("application role: 40 vectors past threshold 30 commit, build deferred", app_write)

                def app_build_refused() -> bool:
                    try:
                        vectors.build_index()
                    except PermissionDeniedError:
                        return True
                    return False

                check("application role: explicit build_index -> PermissionDeniedError", app_build_refused)
            with connect(ro_url, corpus="roles") as store:
                ro_vectors = VectorMemoryStore(store, HashingEmbedding(32), index_threshold=None)
                check("read-only role: count/get/iterate", lambda: store.count() == 40 and store.get("e1") == entries[1]
                      and len(list(store.iter_entries())) == 40)
                check("read-only role: keyword search", lambda: bool(BM25Index(store).search("refund", 5)))
                check("read-only role: filtered vector search",
                      lambda: len(ro_vectors.search("refund rule", 5, filters={"team": "t"})) == 5)
                check("read-only role: hybrid", lambda: len(HybridRAGStrategy(BM25Index(store), ro_vectors)
                                                            .retrieve("parcel refund")) > 0)
                for name, write in (("add", lambda: store.add(MemoryEntry("new", "x"))),
                                    ("delete", lambda: store.delete("e1")),
                                    ("drop_corpus", lambda: store.drop_corpus())):
                    def refused(write: Callable[[], object] = write) -> bool:
                        try:
                            write()
                        except PermissionDeniedError:
                            return store.count() == 40
                        return False

                    check(f"read-only role: {name} -> PermissionDeniedError, nothing written", refused)
            for who, role_url in (("application", app_url), ("read-only", ro_url)):
                result = CliRunner().invoke(db, ["upgrade", "--url", role_url.render_as_string(hide_password=False)])
                check(f"{who} role: tnsrag db upgrade reports at head",
                      lambda result=result: result.exit_code == 0 and "at head" in result.output)
            result = CliRunner().invoke(db, ["build-indexes", "--url", url, "--threshold", "30"])
            check("owner: tnsrag db build-indexes builds the deferred index",
                  lambda: result.exit_code == 0 and "built ix_embeddings_hnsw_" in result.output)
        finally:
            with psycopg.connect(admin, autocommit=True) as conn:
                conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = ANY(%s)",
                             ([app, ro],))
                for role in (app, ro):
                    conn.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(role)))
                    conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))
    rows.append(("verdict", "held" if held else "BROKEN"))
    print_table("database roles", rows)


if __name__ == "__main__":
    main()
