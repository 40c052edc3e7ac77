"""Tenant A against tenant B through keys A may choose: every tenant-writable table, then B and the owner.

Two tenant roles under row-level security. B writes a corpus with vectors and the owner
builds its HNSW index. A then plants rows with chosen keys wherever it may write: space
ids (B's, the next one the sequence would give), the identity sequence itself, index
names, vectors near B's query (21,000 copies), entries, postings, document frequencies,
statistics shards and edges under B's ids and lexemes, and filter pairs. Afterwards:

* B's answers (keyword, vector, hybrid, filtered) are the same, with the same scores;
* B's vector query keeps its HNSW plan, and its median latency is compared before/after;
* ``EXPLAIN ANALYZE`` of A's own queries tells A nothing about B's contents (five
  membership guesses, in and out of B's corpus);
* B's next writes (a new space) succeed;
* the owner's ``tnsrag db build-indexes`` exits 0 and its drops stay in their corpus.

Advisory locks: A holds the key earlier releases used for B's corpus write lock (a hash
of the names, which any role can compute); B's next write does not wait for it, the key
now mixes in a salt A cannot read. The stalls A can still cause (a key read in
``pg_locks``, ``LOCK TABLE``) and their bound are measured by ``bench/attack/tenant_stalls.py``.
"""

from __future__ import annotations

import json
import re
import statistics
import threading
import time
from collections.abc import Callable

import numpy as np
import psycopg
from click.testing import CliRunner
from psycopg import sql

from bench.attack._support import SCHEMA, arguments, libpq, migrated_database, print_table, tenant_pair
from tnsrag_db import BM25Index, HashingEmbedding, HybridRAGStrategy, KeywordRAGStrategy, MemoryEntry, connect, tenancy
from tnsrag_db._cli import main_group
from tnsrag_db._indexes.vector import VectorMemoryStore

PASSWORD = "attack-tenant"
SEQ = f"{SCHEMA}.embedding_spaces_space_id_seq"
DIM = 32


def _vec(v: np.ndarray) -> str:
    return "[" + ",".join(f"{float(x):.6f}" for x in v) + "]"


def _tie_free(ranked: list[tuple[str, float]]) -> tuple[list[float], set[str]]:
    """A top-k as its scores and the ids scoring above its last score (ties at the cut
    come back in any order, and any of them may make the cut)."""
    scores = [round(score, 9) for _, score in ranked]
    return scores, {i for i, score in ranked if scores and round(score, 9) > scores[-1]}


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

    args = arguments(__doc__ or "", 60.0)
    with migrated_database(args.url) as url:
        owner, admin, pool, role_a, role_b, a, b, url_a, url_b = tenant_pair(url, "attack", PASSWORD)
        tenancy.grant(pool, schema=SCHEMA, role=role_a, corpus=a)
        tenancy.grant(pool, schema=SCHEMA, role=role_b, corpus=b)
        embed = HashingEmbedding(DIM)
        texts = [f"beta note {i}: refund rule for damaged parcel number {i} in region {i % 7}" for i in range(66)]
        try:
            with connect(url_b, corpus=b) as store:
                VectorMemoryStore(store, embed, index_threshold=None).add_all(
                    [MemoryEntry(f"b{i}", t, metadata={"team": "beta"}) for i, t in enumerate(texts)])
            result = CliRunner().invoke(main_group, ["db", "build-indexes", "--url", url, "--threshold", "50"])
            check("owner: build-indexes builds B's index", lambda: result.exit_code == 0 and "built" in result.output)
            query = "refund rule for damaged parcel number 3"

            def answers() -> dict[str, object]:
                with connect(url_b, corpus=b) as store:
                    vectors = VectorMemoryStore(store, embed, index_threshold=None)
                    key = lambda docs: [(d.metadata.get("entryId"), round(d.score, 9)) for d in docs]  # noqa: E731
                    return {"keyword": key(KeywordRAGStrategy(BM25Index(store)).retrieve(query)),
                            "vector": _tie_free(vectors.search(query, 10)),
                            "filtered": _tie_free(vectors.search(query, 10, filters={"team": "beta"})),
                            "hybrid": key(HybridRAGStrategy(BM25Index(store), vectors).retrieve(query))}

            def b_latency() -> tuple[float, str]:
                with connect(url_b, corpus=b) as store:
                    vectors = VectorMemoryStore(store, embed, index_threshold=None)
                    sql_text, params = vectors.candidates_sql(embed(query), 10)
                    times = []
                    for _ in range(25):
                        t0 = time.perf_counter()
                        store.read(sql_text, params)
                        times.append((time.perf_counter() - t0) * 1000)
                    path = "hnsw" if "hnsw.ef_search" in sql_text else "exact"
                return statistics.median(times[5:]), path

            before, (ms_before, path_before) = answers(), b_latency()
            with psycopg.connect(admin) as conn:
                (b_space,) = conn.execute(f"SELECT space_id FROM {SCHEMA}.embedding_spaces WHERE corpus = %s",
                                          (b,)).fetchone()  # type: ignore[misc]
                lexemes = [r[0] for r in conn.execute(
                    f"SELECT DISTINCT lexeme FROM {SCHEMA}.bm25_postings WHERE corpus = %s", (b,)).fetchall()]

            with psycopg.connect(libpq(url_a), autocommit=True) as conn:
                conn.execute(f"SET search_path TO {SCHEMA}, public")

                def refused(statement: str, *params: object) -> bool:
                    try:
                        conn.execute(statement, params or None)
                    except psycopg.errors.InsufficientPrivilege:
                        return True
                    except psycopg.Error:
                        return True  # refused by a constraint or a policy: also nothing written
                    return False

                conn.execute("INSERT INTO corpora (corpus) VALUES (%s) ON CONFLICT DO NOTHING", (a,))
                check("A: read the space-id sequence", lambda: refused(f"SELECT last_value FROM {SEQ}"))
                check("A: nextval / setval on it", lambda: refused(f"SELECT nextval('{SEQ}')")
                      and refused(f"SELECT setval('{SEQ}', 1)"))
                for label, chosen in (("B's id", b_space), ("the next id", b_space + 1), ("a far id", 10**12)):
                    check(f"A: insert a space with {label}", lambda chosen=chosen: refused(
                        "INSERT INTO embedding_spaces (corpus, space_id, provider, dimension) VALUES (%s, %s, 'x', 3)",
                        a, chosen))
                (own,) = conn.execute("INSERT INTO embedding_spaces (corpus, provider, dimension) "
                                      "VALUES (%s, 'planted', %s) RETURNING space_id", (a, DIM)).fetchone()  # type: ignore[misc]
                check("A: move its own space to B's id", lambda: refused(
                    "UPDATE embedding_spaces SET space_id = %s WHERE corpus = %s", b_space, a))
                check("A: record an index name on its space", lambda: refused(
                    "UPDATE embedding_spaces SET index_name = %s WHERE corpus = %s", f"ix_embeddings_hnsw_{b_space}", a))
                check("A: vectors under B's space id", lambda: refused(
                    "INSERT INTO embeddings (corpus, space_id, entry_id, embedding) VALUES (%s, %s, 'x', %s::vector)",
                    a, b_space, _vec(np.ones(DIM))))
                check("A: write filter pairs", lambda: refused(
                    "INSERT INTO entry_filter_pairs (corpus, key, value, entry_id) VALUES (%s, 'team', 'beta', 'b1')", a))
                # 21,000 copies of B's query vector in A's own space, under B's entry ids where they exist.
                qv = _vec(np.asarray(embed(query), dtype=np.float32))
                conn.execute("INSERT INTO entries (corpus, id, content, tier, content_hash, doc_len, lexemes, metadata) "
                             "SELECT %s, 'b' || g, 'planted', 'SEMANTIC', '\\x00', 1000000, %s, "
                             "'{\"team\": \"beta\"}' FROM generate_series(0, 20999) g",
                             (a, lexemes))
                conn.execute("INSERT INTO embeddings (corpus, space_id, entry_id, embedding) "
                             "SELECT %s, %s, 'b' || g, %s::vector FROM generate_series(0, 20999) g", (a, own, qv))
                conn.execute("INSERT INTO bm25_postings (corpus, lexeme, entry_id, tf, doc_len) "
                             "SELECT %s, l, 'b' || g, 1000, 1 FROM unnest(%s::text[]) l, generate_series(0, 65) g",
                             (a, lexemes))
                conn.execute("INSERT INTO bm25_df (corpus, lexeme, shard, df) SELECT %s, l, s, -1000000 "
                             "FROM unnest(%s::text[]) l, generate_series(-3, 40) s", (a, lexemes))
                conn.execute("INSERT INTO bm25_stats (corpus, shard, n_docs, total_len) SELECT %s, s, -5, -5 "
                             "FROM generate_series(-3, 40) s ON CONFLICT DO NOTHING", (a,))
                conn.execute("INSERT INTO edges (corpus, src, dst, weight) VALUES (%s, 'b0', 'b1', 1e300)", (a,))
                conn.execute("UPDATE corpora SET text_config = 'simple' WHERE corpus = %s", (a,))

                def rows_removed(text: str) -> int:
                    plan = conn.execute("EXPLAIN (ANALYZE, FORMAT JSON) SELECT entry_id FROM embeddings "
                                        "WHERE corpus = %s AND space_id = %s "
                                        "ORDER BY embedding::vector(32) <=> %s::vector(32) LIMIT 10",
                                        (a, own, _vec(np.asarray(embed(text), dtype=np.float32)))).fetchone()
                    found = re.findall(r'"Rows Removed by Filter": (\d+)', json.dumps(plan))
                    mentions = b_space is not None and f"ix_embeddings_hnsw_{b_space}\"" in json.dumps(plan)
                    return -1 if mentions else sum(map(int, found))

                inside = [rows_removed(texts[i]) for i in (1, 9, 17, 33, 60)]
                outside = [rows_removed(f"unrelated guess {i} about tax forms") for i in range(5)]
                rows.append(("A: EXPLAIN rows removed, guesses in B / not in B", f"{inside} / {outside}"))
                check("A: its plans never read B's index nor count B's rows",
                      lambda: -1 not in inside + outside and len(set(inside + outside)) == 1)
            after = answers()
            for key in before:
                check(f"B: {key} answers and scores unchanged", lambda key=key: after[key] == before[key])
            ms_after, path_after = b_latency()
            rows.append(("B: vector top-10 median before / after (ms)",
                         f"{ms_before:.2f} ({path_before}) / {ms_after:.2f} ({path_after})"))
            check("B: keeps its HNSW plan", lambda: path_before == path_after == "hnsw")
            with connect(url_b, corpus=b) as store:
                wider = VectorMemoryStore(store, HashingEmbedding(16), index_threshold=None)
                check("B: a new space's vectors are written and found", lambda: wider.add_all(
                    [MemoryEntry(f"b{i}", t, metadata={"team": "beta"}) for i, t in enumerate(texts[:20])]) is not None
                    and wider.search(texts[3], 1)[0][0] == "b3")
            result = CliRunner().invoke(main_group, ["db", "build-indexes", "--url", url, "--threshold", "50",
                                                     "--json"])
            check("owner: build-indexes builds A's index too, exit 0",
                  lambda: result.exit_code == 0 and json.loads(result.stdout)["failed"] == [])
            with connect(owner, corpus=a) as store:
                check("owner: drop of A's index leaves B's", lambda: VectorMemoryStore(
                    store, HashingEmbedding(DIM), index_threshold=None).drop_index() in (True, False)
                    and answers() == before)
            with connect(owner, corpus=a) as store:
                store.drop_corpus()
            check("owner: drop of A's corpus leaves B's answers", lambda: answers() == before)

            # Advisory locks: A takes B's corpus write lock under the key computed from the names;
            # B's next write no longer waits for it (the key has a salt A cannot read).
            with psycopg.connect(libpq(url_a), autocommit=True) as conn:
                conn.execute("SELECT pg_advisory_lock(hashtextextended(%s, 0))", (f"tnsrag_db.corpus:{SCHEMA}:{b}",))
                done = threading.Event()
                started = time.perf_counter()

                def write() -> None:
                    with connect(url_b, corpus=b) as store:
                        store.add(MemoryEntry("late", "written while A holds the lock"))
                    done.set()

                worker = threading.Thread(target=write, daemon=True)
                worker.start()
                done.wait(3.0)
                blocked = not done.is_set()
                waited = time.perf_counter() - started
                conn.execute("SELECT pg_advisory_unlock_all()")
                worker.join(30)
                rows.append(("A holds B's corpus lock key computed from the names: B's write",
                             f"{'blocked for' if blocked else 'done in'} {waited:.1f} s"))
                check("B: its write does not wait for the computed key", lambda: not blocked)
        finally:
            pool.close()
            with psycopg.connect(admin, autocommit=True) as conn:
                conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = ANY(%s)",
                             ([role_a, role_b],))
                for role in (role_a, role_b):
                    conn.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(role)))
                    conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))
    rows.append(("verdict", "held" if held else "BROKEN"))
    print_table("tenant-chosen keys", rows)


if __name__ == "__main__":
    main()
