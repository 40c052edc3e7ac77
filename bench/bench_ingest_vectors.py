"""Ingest with precomputed vectors until ready to query: ``tnsrag ingest`` against a bare
COPY + HNSW build and the peers' stores, same rows, same server, same run.

Usage::

    python -m bench.bench_ingest_vectors [--url URL] [--n 20000] [--repeats 3]
        [--baseline DIR] [--peers-path DIR]

Without ``--url`` (or ``TNSRAG_DATABASE_URL``) an embedded server in a temporary
directory is used. The rows are ``bench/_corpus.py``'s seeded entries with 384-d
vectors. Each repeat runs every path into a fresh corpus or table, the order rotating
from one repeat to the next, and the table shows rows/s medians and their ratio to the
bare path:

* ``bare``: ``COPY`` (binary) of the rows into a plain table, then the same HNSW index
  (m, ef_construction, ``maintenance_work_mem`` and parallel workers as tnsrag's build);
* ``tnsrag``: ``tnsrag ingest FILE.jsonl`` in a child process, the file a ``tnsrag export
  --vectors`` of the rows (written beforehand, not timed): every entry written and
  keyword-searchable, then their vectors, then the HNSW build; timed from the child's
  start to its exit (interpreter start and the file's parsing included);
* ``baseline``: the same with ``--baseline DIR`` first on the child's ``PYTHONPATH`` (an
  older checkout: before against after in one run);
* ``langchain-postgres`` and ``llamaindex``: the peers' stores (``PGVector.add_embeddings``
  in calls of 1,000 rows; ``PGVectorStore.add`` of ``TextNode`` s with their embeddings in
  calls of 2,048, ``VectorStoreIndex``'s insert batch), then the HNSW index they leave to
  the user, built like the bare one. They run in a child process with ``--peers-path DIR``
  first on its ``PYTHONPATH``: the peers need SQLAlchemy 2.0 and an older pgvector, so they
  are installed apart (``pip install --target DIR --no-deps langchain-postgres
  llama-index-vector-stores-postgres SQLAlchemy==2.0.* pgvector==0.3.* asyncpg``), never
  into the project's environment.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import psycopg

PROVIDER = "bench-precomputed-384"
HNSW_M, HNSW_EF_CONSTRUCTION = 16, 128  # tnsrag's defaults (tnsrag_db._indexes.vector.sql)
_ROOT = Path(__file__).resolve().parent.parent


def _rows(n: int, dim: int, seed: int) -> tuple[list, object]:
    from bench._corpus import generate_corpus

    corpus = generate_corpus(n, dim=dim, seed=seed)
    return corpus.entries, corpus.embeddings


def _index_settings(conn: object, n: int, dim: int) -> list[str]:
    """The settings tnsrag's HNSW build runs with (memory for the graph, parallel workers)."""
    mem_mb = min(2048, max(64, int(n * (dim * 4 + 2 * HNSW_M * 12 + 64) * 1.3 / 2**20) + 64))
    workers = conn.execute("SHOW max_parallel_maintenance_workers").fetchone()[0]  # type: ignore[attr-defined]
    return [f"SET maintenance_work_mem = '{mem_mb}MB'", f"SET max_parallel_maintenance_workers = {workers}"]


def _libpq(url: str) -> str:
    from sqlalchemy.engine import make_url

    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


def bare(url: str, n: int, dim: int, seed: int) -> float:
    from pgvector.psycopg import register_vector

    entries, vectors = _rows(n, dim, seed)
    with psycopg.connect(_libpq(url), autocommit=True) as conn:
        register_vector(conn)
        conn.execute("DROP TABLE IF EXISTS public.bench_ingest_bare")
        conn.execute(f"CREATE TABLE public.bench_ingest_bare (id text PRIMARY KEY, content text NOT NULL, "
                     f"tier text NOT NULL, source text, metadata jsonb NOT NULL, embedding vector({dim}))")
        started = time.perf_counter()
        copy_sql = ("COPY public.bench_ingest_bare (id, content, tier, source, metadata, embedding) "
                    "FROM STDIN (FORMAT BINARY)")
        with conn.transaction(), conn.cursor() as cur, cur.copy(copy_sql) as copy:
            copy.set_types(["text", "text", "text", "text", "jsonb", "vector"])
            for e, v in zip(entries, vectors):  # type: ignore[call-overload]
                copy.write_row((e.id, e.content, e.tier.name, e.source, json.dumps(dict(e.metadata)), v))
        for setting in _index_settings(conn, n, dim):
            conn.execute(setting)
        conn.execute(f"CREATE INDEX ON public.bench_ingest_bare USING hnsw (embedding vector_cosine_ops) "
                     f"WITH (m = {HNSW_M}, ef_construction = {HNSW_EF_CONSTRUCTION})")
        seconds = time.perf_counter() - started
        conn.execute("DROP TABLE public.bench_ingest_bare")
    return seconds


def export_file(path: Path, n: int, dim: int, seed: int) -> None:
    """The rows as a ``tnsrag export --vectors`` file (records as tnsrag_db.admin.export writes them)."""
    import numpy as np

    entries, vectors = _rows(n, dim, seed)
    with path.open("w") as out:
        for e, v in zip(entries, vectors):  # type: ignore[call-overload]
            record = {"id": e.id, "content": e.content, "tier": e.tier.name, "source": e.source, "parentId": None,
                      "timestamp": None, "metadata": dict(e.metadata), "edges": [],
                      "vectors": [{"provider": PROVIDER, "float32": base64.b64encode(
                          np.asarray(v, dtype="<f4").tobytes()).decode("ascii")}]}
            out.write(json.dumps(record) + "\n")


def tnsrag(url: str, path: Path, code: Path, n: int) -> float:
    corpus = f"bench_iv_{uuid.uuid4().hex[:8]}"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(code), os.environ.get("PYTHONPATH", "")])}
    started = time.perf_counter()
    res = subprocess.run([sys.executable, "-c", "from tnsrag_db._cli import main; main()", "ingest", str(path),
                          "--url", url, "--corpus", corpus, "--json", "-q"], env=env, capture_output=True, text=True,
                         check=False)
    seconds = time.perf_counter() - started
    if res.returncode != 0:
        raise SystemExit(f"tnsrag ingest ({code}) failed: {res.stderr}")
    from tnsrag_db._store.store import connect

    with connect(url, corpus=corpus) as store:
        rows = store.read("SELECT bool_and(index_name IS NOT NULL) AS indexed FROM embedding_spaces WHERE corpus = :c",
                          {"c": corpus})
        assert rows[0].indexed or n < 10_000, f"{code}: no HNSW index after the ingest"  # (its threshold)
        store.drop_corpus()
    return seconds


def peer(name: str, url: str, n: int, dim: int, seed: int) -> float:
    """One peer's ingest into fresh tables (run in the peers' child process)."""

    entries, vectors = _rows(n, dim, seed)
    texts = [e.content for e in entries]
    metas = [{"tier": e.tier.name, **dict(e.metadata)} for e in entries]
    ids = [str(uuid.uuid5(uuid.NAMESPACE_URL, e.id)) for e in entries]  # both key rows by UUID
    table = f"bench_peer_{uuid.uuid4().hex[:8]}"
    if name == "langchain-postgres":
        from langchain_core.embeddings import FakeEmbeddings
        from langchain_postgres import PGVector

        started = time.perf_counter()
        store = PGVector(FakeEmbeddings(size=dim), connection=url, embedding_length=dim, collection_name=table,
                         use_jsonb=True)
        lists = [list(map(float, v)) for v in vectors]  # type: ignore[attr-defined]
        for i in range(0, n, 1000):
            store.add_embeddings(texts[i:i + 1000], lists[i:i + 1000], metas[i:i + 1000], ids[i:i + 1000])
        index = "CREATE INDEX {name} ON public.langchain_pg_embedding USING hnsw (embedding vector_cosine_ops) " \
                "WITH (m = {m}, ef_construction = {ef})"
        cleanup = [f"DROP INDEX public.{table}_hnsw", "DROP TABLE public.langchain_pg_embedding",
                   "DROP TABLE public.langchain_pg_collection"]
    else:
        from llama_index.core.schema import TextNode
        from llama_index.vector_stores.postgres import PGVectorStore
        from sqlalchemy.engine import make_url

        started = time.perf_counter()
        store = PGVectorStore.from_params(connection_string=url, table_name=table, embed_dim=dim, use_jsonb=True,
                                          async_connection_string=make_url(url).set(drivername="postgresql+asyncpg"))
        nodes = [TextNode(id_=i, text=t, metadata=m, embedding=list(map(float, v)))
                 for i, t, m, v in zip(ids, texts, metas, vectors)]  # type: ignore[call-overload]
        for i in range(0, n, 2048):
            store.add(nodes[i:i + 2048])
        index = f"CREATE INDEX {{name}} ON public.data_{table} USING hnsw (embedding vector_cosine_ops) " \
                "WITH (m = {m}, ef_construction = {ef})"
        cleanup = [f"DROP TABLE public.data_{table}"]
    with psycopg.connect(_libpq(url), autocommit=True) as conn:
        for setting in _index_settings(conn, n, dim):
            conn.execute(setting)
        conn.execute(index.format(name=f"{table}_hnsw", m=HNSW_M, ef=HNSW_EF_CONSTRUCTION))
        seconds = time.perf_counter() - started
        for statement in cleanup:
            conn.execute(statement)
    return seconds


PEERS = ("langchain-postgres", "llamaindex")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", default=os.environ.get("TNSRAG_DATABASE_URL"))
    ap.add_argument("--n", type=int, default=20_000)
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--baseline", type=Path, default=None, help="an older checkout to run as 'baseline'")
    ap.add_argument("--peers-path", type=Path, default=None, help="where the peers' packages are installed")
    ap.add_argument("--only", default=None, help="comma-separated paths to run (default: all available)")
    ap.add_argument("--peer", choices=PEERS, default=None, help=argparse.SUPPRESS)  # the peers' child
    args = ap.parse_args()
    if args.peer is not None:
        print(peer(args.peer, args.url, args.n, args.dim, args.seed))
        return
    from bench._common import database_url

    paths = ["bare", "tnsrag"] + (["baseline"] if args.baseline else []) + (list(PEERS) if args.peers_path else [])
    if args.only:
        paths = [p for p in paths if p in args.only.split(",")]
    times: dict[str, list[float]] = {p: [] for p in paths}
    with database_url(args.url) as url, tempfile.TemporaryDirectory(prefix="tnsrag-bench-iv-") as tmp:
        from tnsrag_db._store.store import connect

        connect(url, auto_migrate=True).close()
        data = Path(tmp) / "rows.jsonl"
        export_file(data, args.n, args.dim, args.seed)
        for rep in range(args.repeats):
            for path in paths[rep % len(paths):] + paths[:rep % len(paths)]:
                if path == "bare":
                    seconds = bare(url, args.n, args.dim, args.seed)
                elif path == "tnsrag":
                    seconds = tnsrag(url, data, _ROOT, args.n)
                elif path == "baseline":
                    seconds = tnsrag(url, data, args.baseline.resolve(), args.n)
                else:
                    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(args.peers_path), str(_ROOT)])}
                    res = subprocess.run([sys.executable, "-m", "bench.bench_ingest_vectors", "--peer", path,
                                          "--url", url, "--n", str(args.n), "--dim", str(args.dim),
                                          "--seed", str(args.seed)], env=env, capture_output=True, text=True,
                                         check=False)
                    if res.returncode != 0:
                        raise SystemExit(f"{path} failed: {res.stderr}")
                    seconds = float(res.stdout.strip().splitlines()[-1])
                times[path].append(seconds)
                print(json.dumps({"repeat": rep, "path": path, "seconds": round(seconds, 2),
                                  "rows/s": round(args.n / seconds)}), flush=True)
    base = statistics.median(times["bare"]) if "bare" in times else None
    print(f"{args.n} rows, {args.dim}-d, until ready to query; medians of {args.repeats}")
    print(f"{'path':<20} {'seconds':>8} {'rows/s':>8} {'x bare':>7}")
    for path, values in times.items():
        med = statistics.median(values)
        print(f"{path:<20} {med:>8.1f} {args.n / med:>8.0f} {base / med if base else float('nan'):>7.2f}")


if __name__ == "__main__":
    main()
