"""Binary ``COPY`` of vectors into ``embeddings``.

The stream is assembled here from one big-endian copy of the whole matrix, far cheaper
per row than psycopg's ``write_row`` or the text form (docs/performance.md). Each
row is ``(corpus text, space_id bigint, entry_id text, embedding vector)`` in
PostgreSQL's binary COPY format; the vector field is pgvector's binary wire format
(int16 dimension, int16 unused, big-endian float4s), the one its ``vector_recv`` reads
and :meth:`pgvector.Vector.from_binary` decodes.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Sequence

import numpy as np
import numpy.typing as npt

from tnsrag_db._db.pool import Connection
from tnsrag_db._store.staging import VECTOR_STAGE_DDL

__all__ = ["COPY_SQL", "ROW_SECURITY_ACTIVE", "copy_vectors", "encode_rows", "encode_vector"]

#: The statement the stream of :func:`encode_rows` feeds.
COPY_SQL = "COPY embeddings (corpus, space_id, entry_id, embedding) FROM STDIN (FORMAT BINARY)"
_STAGED_COPY_SQL = "COPY tnsrag_stage_vectors (corpus, space_id, entry_id, embedding) FROM STDIN (FORMAT BINARY)"

# Binary COPY header: signature, flags, header-extension length; the trailer is a field count of -1.
_SIGNATURE = b"PGCOPY\n\xff\r\n\x00" + struct.pack(">ii", 0, 0)
_TRAILER = b"\xff\xff"
_CHUNK_ROWS = 4096


def encode_vector(vector: npt.NDArray[np.float32]) -> bytes:
    """One vector in pgvector's binary format (without the COPY field length)."""
    return struct.pack(">hh", int(vector.shape[0]), 0) + np.ascontiguousarray(vector, dtype=">f4").tobytes()


def encode_rows(corpus: str, space_id: int, ids: Sequence[str],
                matrix: npt.NDArray[np.float32]) -> Iterator[bytes]:
    """The binary COPY stream of rows ``(corpus, space_id, ids[i], matrix[i])``, in chunks
    (header first, trailer last)."""
    dim = int(matrix.shape[1])
    key = corpus.encode()
    # Field count 4; corpus; space_id as an 8-byte bigint; then each row's own fields.
    head = struct.pack(">hi", 4, len(key)) + key + struct.pack(">iq", 8, space_id)
    vec_head = struct.pack(">ihh", 4 + 4 * dim, dim, 0)
    big = np.ascontiguousarray(matrix, dtype=">f4")
    parts: list[bytes] = [_SIGNATURE]
    for i, entry_id in enumerate(ids):
        raw_id = entry_id.encode()
        parts.append(head + struct.pack(">i", len(raw_id)) + raw_id + vec_head)
        parts.append(big[i].tobytes())
        if len(parts) >= 2 * _CHUNK_ROWS:
            yield b"".join(parts)
            parts = []
    parts.append(_TRAILER)
    yield b"".join(parts)


#: A select-list item telling whether row-level security applies to this session's writes
#: of ``embeddings`` (then COPY FROM into it is refused): a statement the write sends anyway
#: carries it, and its answer is passed to :func:`copy_vectors` as ``row_security``.
#: The table is named by a regclass constant, not by text resolved where the call runs: on
#: Citus the statement runs on a worker, whose search path does not lead to the table.
ROW_SECURITY_ACTIVE = "(SELECT row_security_active(CAST('embeddings' AS regclass)))"  # an InitPlan: evaluated once


def copy_vectors(conn: Connection, corpus: str, space_id: int, ids: Sequence[str],
                 matrix: npt.NDArray[np.float32], *, row_security: bool | None = None) -> None:
    """COPY rows ``(corpus, space_id, ids[i], matrix[i])`` into ``embeddings`` on ``conn``'s
    transaction (nothing for no ids). ``row_security``: :data:`ROW_SECURITY_ACTIVE` as read
    in this transaction (None: asked here, one round trip)."""
    if not ids:
        return
    raw = conn.driver
    assert raw is not None
    # PostgreSQL refuses COPY FROM into a table whose row-level security applies to the
    # session (a tenant role, see tnsrag_db.tenancy): stage the rows, then one INSERT,
    # which the policy checks. Asked in every write's own transaction (never cached), so
    # tenancy switched on under a running process is seen by its next write.
    staged = row_security if row_security is not None else bool(
        conn.execute(f"SELECT {ROW_SECURITY_ACTIVE}").scalar_one())
    if staged:
        conn.execute(VECTOR_STAGE_DDL)
    with raw.cursor() as cur, cur.copy(_STAGED_COPY_SQL if staged else COPY_SQL) as copy:
        for chunk in encode_rows(corpus, space_id, ids, matrix):
            copy.write(chunk)
    if staged:
        conn.execute(("INSERT INTO embeddings (corpus, space_id, entry_id, embedding) "
                             "SELECT :c, space_id, entry_id, embedding FROM tnsrag_stage_vectors"), {"c": corpus})
