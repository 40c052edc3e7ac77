"""A rolling upgrade with the previous release still serving: its reader and writer processes
(the tree of the commit before revision 0011, from the repository's history) stay
connected while this release upgrades the schema, writes with automatic merges, tries
explicit merges, and finally finishes the upgrade.

Checked at each step: the previous release's BM25 answers against this release's, query
by query (the same ids in the same order, the same scores); whether a process of the
previous release started after the upgrade connects; after the finish, this release's
answers against its own answers before the merge.
"""

from __future__ import annotations

import random
import tempfile
import time
import uuid
from pathlib import Path

import psycopg
from psycopg import sql

from bench._common import database_url
from bench.attack._previous_release import PreviousRelease, previous_release_tree
from bench.attack._support import SCHEMA, arguments, engine_for, inconsistencies, print_table
from tnsrag_db import MemoryEntry
from tnsrag_db._db import migrate
from tnsrag_db._db.pool import normalize_url
from tnsrag_db._errors import SchemaNotReadyError
from tnsrag_db._indexes.bm25 import BM25Index
from tnsrag_db._store.store import Store

WORDS = [f"w{i}" for i in range(3000)]


def _text(rng: random.Random) -> str:
    return " ".join(rng.choices(WORDS, weights=[1 / (i + 1) for i in range(len(WORDS))], k=rng.randint(5, 80)))


def _differing(theirs: list[list[list[object]]], ours: list[list[tuple[str, float]]]) -> int:
    """Queries whose previous-release ranking differs from this release's."""
    return sum([i for i, _ in t] != [i for i, _ in o] or any(abs(float(a[1]) - b[1]) > 1e-9 * max(1.0, b[1])  # type: ignore[arg-type]
                                                               for a, b in zip(t, o))
               for t, o in zip(theirs, ours))


def main() -> None:
    args = arguments(__doc__ or "", 60.0)
    rng = random.Random(36)
    queries = [" ".join(rng.sample(WORDS[:400], rng.randint(1, 4))) for _ in range(40)]
    rows: list[tuple[str, object]] = []
    with database_url(args.url) as server, tempfile.TemporaryDirectory() as tmp:
        # A database left at nothing: the previous release creates its own schema (0010).
        base = normalize_url(server)
        name = f"tnsrag_attack_{uuid.uuid4().hex[:10]}"
        admin = base.set(drivername="postgresql").render_as_string(hide_password=False)
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        url = base.set(database=name).render_as_string(hide_password=False)
        tree = previous_release_tree(Path(tmp) / "previous")
        reader, writer = PreviousRelease(tree, url, "roll"), PreviousRelease(tree, url, "roll")
        pool = engine_for(url)
        try:
            assert reader.send(op="connect", auto_migrate=True)["ok"]
            assert writer.send(op="connect")["ok"]
            old = [[f"old{i}", _text(rng)] for i in range(3000)]
            for i in range(0, len(old), 500):
                writer.send(op="add", entries=old[i:i + 500])
            started = time.perf_counter()
            migrate.upgrade(pool, schema=SCHEMA)
            rows.append(("upgrade (s)", round(time.perf_counter() - started, 2)))
            store = Store(pool, corpus="roll", schema=SCHEMA, merge_after_entries=256)
            deadline = time.monotonic() + args.seconds / 2
            written = deleted = 0
            while time.monotonic() < deadline:
                store.add_all([MemoryEntry(f"new{written + i}", _text(rng)) for i in range(200)])
                written += 200
                gone = [f"old{rng.randrange(3000)}" for _ in range(5)]
                deleted += int(writer.send(op="delete", ids=gone)["deleted"])
                writer.send(op="add", entries=[[f"old{rng.randrange(3000)}", _text(rng)]])
            try:
                store.merge_postings()
                refused = "no"
            except SchemaNotReadyError:
                refused = "yes"
            ours = [BM25Index(store).search(q, 20) for q in queries]
            theirs = reader.send(op="search", queries=queries, k=20)["results"]
            late = PreviousRelease(tree, url, "roll")
            late_answer = late.send(op="connect")
            late.close()
            rows += [("entries written by this release", written),
                      ("entries deleted by the previous release", deleted),
                      ("explicit merge refused before the finish", refused),
                      ("queries compared (before the finish)", len(queries)),
                      ("  empty answers of the previous release", sum(not t for t in theirs)),
                      ("  answers differing from this release", _differing(theirs, ours)),
                      ("previous release started after the upgrade",
                       "connected" if late_answer["ok"] else late_answer["error"])]
            started = time.perf_counter()
            report = migrate.finish(pool, schema=SCHEMA)
            merged = store.merge_postings()
            rows += [("finish: serves from", f"{report.serves_from_before} -> {report.serves_from}"),
                     ("entries merged after the finish", merged.entries),
                     ("finish + merge (s)", round(time.perf_counter() - started, 2))]
            after = [BM25Index(store).search(q, 20) for q in queries]
            rows += [("this release's answers changed by the merge",
                      _differing([[[i, s] for i, s in r] for r in after], ours)),
                     ("previous release's answers differing after the finish (expected: it is no longer served)",
                      _differing(reader.send(op="search", queries=queries, k=20)["results"], after))]
            rows += list(inconsistencies(store).items())
        finally:
            reader.close()
            writer.close()
            pool.close()
            with psycopg.connect(admin, autocommit=True) as conn:
                conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
    print_table("rolling upgrade beside the previous release", rows)


if __name__ == "__main__":
    main()
