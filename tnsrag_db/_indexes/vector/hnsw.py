"""HNSW indexes of embedding spaces: build, drop, and the owner's catch-up of deferred builds.

The HNSW index of a space is a partial index on the typed expression
``(embedding::vector(<dim>)) WHERE space_id = <id>`` named ``ix_embeddings_hnsw_<id>``
(cosine, m 16, ef_construction 128). Builds and drops on one ``embeddings`` table take
turns under :meth:`Store.hnsw_build_lock`; both run ``CONCURRENTLY``, so reads and writes
of the table go on meanwhile. (Indexes left by dropped corpora are dropped by
:meth:`Store.drop_orphan_hnsw_indexes`.)

``CREATE INDEX`` needs ownership of the table: an application role with DML only
(see docs/deployment.md, "Database roles") cannot build the per-space HNSW index that
:meth:`VectorMemoryStore.add_all` builds once a space reaches ``index_threshold``
vectors. Its writes then commit as usual and the build is deferred: an
:class:`IndexBuildDeferred` warning names the space, searches stay exact (correct,
only slower) until the owner runs ``tnsrag db build-indexes`` (:func:`build_due_indexes`),
which builds every space's index that is due.
"""

from __future__ import annotations

import threading
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tnsrag_db._db.pool import Connection
from tnsrag_db._errors import ConfigurationError, PermissionDeniedError, TnsragError
from tnsrag_db._indexes.vector.progress import IndexProgress
from tnsrag_db._indexes.vector.spaces import Space
from tnsrag_db._indexes.vector.sql import HNSW_EF_CONSTRUCTION, HNSW_M
from tnsrag_db._store.store import Store
from tnsrag_db._validate import check_number

__all__ = ["DueIndex", "IndexBuildDeferred", "IndexSweep", "build_due_indexes", "defer_build", "due_indexes", "hnsw_index_name",
           "may_build_indexes"]

#: The most ``maintenance_work_mem`` (MB) a build raises the session's to on any server; a
#: server with a larger page cache lends a build up to half of ``shared_buffers``
#: (:func:`build_memory_mb`).
_MAX_MAINTENANCE_MEM_MB = 2048


class IndexBuildDeferred(UserWarning):
    """An automatic HNSW build was skipped or failed after the write committed; the write stands."""


@dataclass(frozen=True, slots=True)
class DueIndex:
    """An embedding space without its HNSW index, holding at least the threshold's vectors
    (``vectors`` is counted up to the threshold only)."""

    corpus: str
    provider: str
    dimension: int
    space_id: int
    vectors: int


def hnsw_index_name(space_id: int) -> str:
    """Name of the HNSW index the library builds for embedding space ``space_id``."""
    return f"ix_embeddings_hnsw_{int(space_id)}"


def may_build_indexes(conn: Connection) -> bool:
    """True when the session's role may create indexes on ``embeddings`` (it owns the table,
    directly or through a role it belongs to; superusers always may) and the session can
    write (not read-only, not a hot standby)."""
    row = conn.execute(
        "SELECT pg_has_role(current_user, c.relowner, 'USAGE') AND NOT pg_is_in_recovery() "
        "AND current_setting('transaction_read_only') = 'off' AS ok "
        "FROM pg_class c WHERE c.oid = CAST('embeddings' AS regclass)").one()
    return bool(row.ok)


def defer_build(store: Store, space_id: int, vectors: int, reason: str) -> None:
    """Warn (:class:`IndexBuildDeferred`) that space ``space_id``'s HNSW build did not run."""
    warnings.warn(IndexBuildDeferred(
        f"HNSW index of embedding space {space_id} (corpus {store.corpus!r}, {vectors}+ vectors) not built: "
        f"{reason}. The write committed; searches scan exactly until the schema's owner runs "
        f"`tnsrag db build-indexes --schema {store.schema}`"), stacklevel=4)


def due_indexes(store: Store, threshold: int) -> list[DueIndex]:
    """Every space of ``store``'s schema (all corpora) without a valid HNSW index and with at
    least ``threshold`` vectors, by corpus and space id."""
    with store.session.transaction() as conn:
        rows = conn.execute((
            # Every corpus on purpose: the owner's sweep (Citus runs it as a multi-shard query).
            "/* tnsrag:all-corpora */ "
            "SELECT s.corpus, s.provider, s.dimension, s.space_id, n.vectors FROM embedding_spaces s "
            "CROSS JOIN LATERAL (SELECT count(*) AS vectors FROM (SELECT 1 FROM embeddings x "
            "  WHERE x.corpus = s.corpus AND x.space_id = s.space_id LIMIT :t) l) n "
            "WHERE n.vectors >= :t AND NOT EXISTS (SELECT 1 FROM pg_index i WHERE i.indisvalid AND i.indexrelid = "
            "  to_regclass(:schema || '.ix_embeddings_hnsw_' || s.space_id::text) "
            "  AND s.index_name IS NOT DISTINCT FROM 'ix_embeddings_hnsw_' || s.space_id::text) "
            "ORDER BY s.corpus, s.space_id"), {"t": threshold, "schema": store.schema}).all()
    return [DueIndex(r.corpus, r.provider, int(r.dimension), int(r.space_id), int(r.vectors)) for r in rows]


@dataclass(frozen=True, slots=True)
class IndexSweep:
    """What :func:`build_due_indexes` did: each space built (with its index name) and each
    space whose build failed (with the typed error saying why)."""

    built: list[tuple[DueIndex, str]]
    failed: list[tuple[DueIndex, TnsragError]]


def build_due_indexes(store: Store, threshold: int) -> IndexSweep:
    """Build (and record) the HNSW index of every space :func:`due_indexes` lists.

    Run by the schema's owner; the builds take turns with any other build on the table
    and do not block writes (see :meth:`VectorMemoryStore.build_index`). Each space is
    built on its own: one whose build fails (vectors that do not fit its dimension, a
    statement timeout) is listed in :attr:`IndexSweep.failed` with its error, and the
    sweep goes on with the next. Raises :class:`PermissionDeniedError` at once for a role
    that may not create indexes (no build could succeed).
    """
    sweep = IndexSweep([], [])
    for due in due_indexes(store, threshold):
        try:
            name = build_space_index(store.with_corpus(due.corpus), Space(due.space_id, due.dimension, None))
        except PermissionDeniedError:
            raise
        except TnsragError as exc:
            sweep.failed.append((due, exc))
            continue
        if name is not None:
            sweep.built.append((due, name))
    return sweep


def _check_space_of_corpus(conn: Connection, store: Store, space_id: int) -> bool:
    """Whether space ``space_id`` belongs to the store's corpus; raises
    :class:`ConfigurationError` when another corpus holds a space of the same id (its
    index, named by the id alone, would hold both corpora's vectors). Since revision 0010
    ids come from the identity only; this guards against ids set by hand."""
    corpora = list(conn.execute((
        # Every corpus on purpose: the one check that no other corpus shares the id.
        "/* tnsrag:all-corpora */ SELECT corpus FROM embedding_spaces WHERE space_id = :s ORDER BY corpus"),
        {"s": space_id}).scalars())
    if store.corpus not in corpora:
        return False
    if len(corpora) > 1:
        raise ConfigurationError(
            f"embedding space id {space_id} is shared by corpora {', '.join(map(repr, corpora))}: its HNSW "
            f"index would hold all their vectors, so it is neither built nor dropped. Give each space its own id "
            f"(`tnsrag db upgrade` to revision 0010 does) and run `tnsrag db build-indexes`")
    return True


def index_state(conn: Connection, store: Store, name: str) -> bool | None:
    """None when index ``name`` does not exist in the store's schema, else whether it is valid."""
    valid: bool | None = conn.execute((
        "SELECT i.indisvalid FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
        "JOIN pg_index i ON i.indexrelid = c.oid WHERE n.nspname = :schema AND c.relname = :name"),
        {"schema": store.schema, "name": name}).scalar_one_or_none()
    return valid


def graph_memory_mb(n: int, dimension: int, m: int) -> int:
    """The memory (MB) an HNSW build of ``n`` vectors of ``dimension`` holds in memory: per
    element the vector (4 bytes per dimension), about 2 ``m`` neighbour slots of 12 bytes and
    64 bytes of header, plus 30 % and 64 MB of slack (1M x 384-d, m 16: 2,523 MB; pgvector
    reported the graph outgrowing 256 MB after 119,133 such vectors, 2.2 kB each)."""
    return int(n * (dimension * 4 + 2 * m * 12 + 64) * 1.3 / 2**20) + 64


def build_memory_mb(need_mb: int, current_mb: int, shared_buffers_mb: int) -> int:
    """The ``maintenance_work_mem`` (MB) of an HNSW build whose graph needs ``need_mb``: the
    session's own ``current_mb`` when that is enough (an operator's larger setting is kept),
    else ``need_mb`` up to the larger of :data:`_MAX_MAINTENANCE_MEM_MB` and half of
    ``shared_buffers_mb``. A graph that outgrows it is finished on disk, several times
    slower per vector (figures in docs/performance.md), so a server sized with a large page
    cache (the embedded server sizes its own from the machine) lends the build a share of
    that size, while a server with the stock 128 MB keeps the fixed cap."""
    cap = max(_MAX_MAINTENANCE_MEM_MB, shared_buffers_mb // 2)
    return max(current_mb, min(need_mb, cap))


def build_space_index(store: Store, space: Space, on_pid: Callable[[int], None] | None = None, *,
                      m: int = HNSW_M, ef_construction: int = HNSW_EF_CONSTRUCTION) -> str | None:
    """Create ``space``'s HNSW index if it does not exist (valid), and record it; returns its
    name, or None when the corpus was dropped meanwhile. ``on_pid`` is called with the
    building session's backend pid just before ``CREATE INDEX`` (for progress reports);
    ``m`` and ``ef_construction`` are the graph's parameters (checked by the caller: the
    view's options, or the defaults)."""
    corpus = store.corpus
    name = hnsw_index_name(space.space_id)
    with store.session.autocommit() as conn, store.session.hnsw_build_lock(conn):
        if not _check_space_of_corpus(conn, store, space.space_id):
            return None  # the corpus was dropped meanwhile
        if not index_state(conn, store, name):
            n = conn.execute("SELECT count(*) FROM embeddings WHERE corpus = :c AND space_id = :s",
                             {"c": corpus, "s": space.space_id}).scalar_one()
            need_mb = graph_memory_mb(n, space.dimension, int(m))
            settings = {str(r.name): int(r.mb) for r in conn.execute(
                "SELECT name, setting::bigint * (CASE unit WHEN 'kB' THEN 1024 WHEN '8kB' THEN 8192 ELSE 1 END) "
                "/ 1048576 AS mb FROM pg_settings WHERE name IN ('maintenance_work_mem', 'shared_buffers')")}
            mem = build_memory_mb(need_mb, settings["maintenance_work_mem"], settings["shared_buffers"])
            # Session settings on an autocommit connection: reset below, and on an error
            # the connection is closed rather than pooled (Store.autocommit).
            conn.execute(f"SET maintenance_work_mem = '{int(mem)}MB'")
            conn.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {name}")  # an invalid leftover
            if on_pid is not None:
                on_pid(int(conn.execute("SELECT pg_backend_pid()").scalar_one()))
            # Index name, dimension and space id are integers from the database, m and ef_construction
            # checked integers: safe to format in.
            conn.execute(
                f"CREATE INDEX CONCURRENTLY {name} ON embeddings USING hnsw "
                f"((embedding::vector({space.dimension})) vector_cosine_ops) "
                f"WITH (m = {int(m)}, ef_construction = {int(ef_construction)}) WHERE space_id = {space.space_id}")
            conn.execute("RESET maintenance_work_mem")
            # Fresh statistics, so the planner sizes this space right (a bulk load leaves
            # the shared table's statistics describing other corpora). Still under the
            # build lock, and never waiting for a table lock: an ANALYZE queued behind
            # the next build could deadlock with it (SKIP_LOCKED leaves the table to
            # whoever holds it).
            conn.execute("ANALYZE (SKIP_LOCKED) embeddings")
        conn.execute((
            "UPDATE embedding_spaces SET index_name = :name WHERE corpus = :c AND space_id = :s "
            "AND index_name IS DISTINCT FROM :name"),
            {"name": name, "c": corpus, "s": space.space_id})
    return name


def build_with_progress(store: Store, build: Callable[[Callable[[int], None] | None], str | None],
                        progress: IndexProgress, poll_seconds: object) -> str | None:
    """Run ``build(on_pid)`` on a worker thread and its own connection, reporting PostgreSQL's
    progress for it to ``progress`` every ``poll_seconds`` from the calling thread (see
    :meth:`VectorMemoryStore.build_index`); its result, or its error raised here."""
    poll = check_number(poll_seconds, "poll_seconds", above=0)
    state: dict[str, Any] = {}
    started = threading.Event()

    def on_pid(pid: int) -> None:
        state["pid"] = pid
        started.set()

    def run() -> None:
        try:
            state["name"] = build(on_pid)
        except BaseException as exc:  # handed to the calling thread below
            state["error"] = exc
        finally:
            started.set()

    worker = threading.Thread(target=run, name="tnsrag-hnsw-build", daemon=True)
    worker.start()
    started.wait()
    # The largest block count seen: the later phases of a concurrent build (validation,
    # waits) report their own counts, often zero.
    total = 0
    while worker.is_alive():
        worker.join(poll)
        if worker.is_alive() and "pid" in state:
            rows = store.read(
                "SELECT phase, blocks_done, blocks_total FROM pg_stat_progress_create_index WHERE pid = :pid",
                {"pid": state["pid"]})
            if rows:
                done, of = int(rows[0].blocks_done or 0), int(rows[0].blocks_total or 0)
                total = max(total, done, of)
                progress(str(rows[0].phase), done, of)
    if "error" in state:
        raise state["error"]
    if "pid" in state:  # a build ran (not only a check that found the index)
        progress("done", total, total)
    name: str | None = state.get("name")
    return name


def drop_space_index(store: Store, space: Space) -> bool:
    """Drop ``space``'s HNSW index (``CONCURRENTLY``, after unrecording it so queries stop
    planning for it); True when one existed. Waits for a build running on the table.

    Only the index of a space of the store's corpus: nothing is dropped (False) when the
    corpus has no space of that id, and :class:`ConfigurationError` is raised when another
    corpus has one too (the index serves both)."""
    name = hnsw_index_name(space.space_id)
    with store.session.autocommit() as conn, store.session.hnsw_build_lock(conn):
        if not _check_space_of_corpus(conn, store, space.space_id):
            return False
        existed = index_state(conn, store, name) is not None
        conn.execute("UPDATE embedding_spaces SET index_name = NULL WHERE corpus = :c AND space_id = :s",
                     {"c": store.corpus, "s": space.space_id})
        conn.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {name}")
    return existed


def space_size_reaches(store: Store, space: Space, threshold: int) -> tuple[int, bool]:
    """The space's vector count (counted up to ``threshold`` only) and whether this session
    may build its index (:func:`may_build_indexes`; only asked when the count reaches it)."""
    with store.session.transaction() as conn:
        n = int(conn.execute(
            "SELECT count(*) FROM (SELECT 1 FROM embeddings WHERE corpus = :c AND space_id = :s LIMIT :t) s",
            {"c": store.corpus, "s": space.space_id, "t": threshold}).scalar_one())
        allowed = n >= threshold and may_build_indexes(conn)
    return n, allowed
