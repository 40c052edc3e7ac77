"""The binary COPY encoding of vectors, checked against pgvector's own decoder and encoder."""

from __future__ import annotations

import struct

import numpy as np
import pytest
from pgvector import Vector

from tnsrag_db._indexes.vector.copy import encode_rows, encode_vector

_SIGNATURE = b"PGCOPY\n\xff\r\n\x00"

_CASES = [
    np.array([1.0, -0.5, 0.25], dtype=np.float32),
    np.array([-0.0, 0.0, np.float32(1e-45), np.float32(3.4e38), np.float32(-3.4e38)], dtype=np.float32),
    np.random.default_rng(7).standard_normal(384).astype(np.float32),
    np.array([0.1], dtype=np.float32),
]


@pytest.mark.parametrize("vector", _CASES, ids=["small", "extremes", "384-d", "one"])
def test_vector_field_is_pgvectors_binary_format(vector: np.ndarray) -> None:
    encoded = encode_vector(vector)
    assert encoded == Vector(vector).to_binary()
    decoded = Vector.from_binary(encoded).to_numpy()
    assert decoded.dtype == np.float32 and decoded.tobytes() == vector.tobytes()  # bit for bit, -0.0 included


def _parse(stream: bytes) -> list[tuple[str, int, str, bytes]]:
    """A reader of PostgreSQL's binary COPY format, for the four columns COPY_SQL names."""
    assert stream.startswith(_SIGNATURE)
    flags, extension = struct.unpack_from(">ii", stream, len(_SIGNATURE))
    assert (flags, extension) == (0, 0)
    pos = len(_SIGNATURE) + 8
    rows = []
    while True:
        (fields,) = struct.unpack_from(">h", stream, pos)
        pos += 2
        if fields == -1:
            assert pos == len(stream)  # the trailer ends the stream
            return rows
        assert fields == 4
        values = []
        for _ in range(fields):
            (size,) = struct.unpack_from(">i", stream, pos)
            pos += 4
            values.append(stream[pos:pos + size])
            pos += size
        rows.append((values[0].decode(), struct.unpack(">q", values[1])[0], values[2].decode(), values[3]))


def test_copy_stream_round_trips_rows() -> None:
    rng = np.random.default_rng(3)
    matrix = rng.standard_normal((9000, 4)).astype(np.float32)  # more rows than one chunk
    ids = [f"id-{i}-é" for i in range(len(matrix))]
    chunks = list(encode_rows("corpus ü", 2**40 + 5, ids, matrix))
    assert len(chunks) > 1
    rows = _parse(b"".join(chunks))
    assert [r[2] for r in rows] == ids
    assert {(r[0], r[1]) for r in rows} == {("corpus ü", 2**40 + 5)}
    for (_, _, _, field), vector in zip(rows, matrix, strict=True):
        assert Vector.from_binary(field).to_numpy().tobytes() == vector.tobytes()
        assert field == Vector(vector).to_binary()


def test_copy_stream_without_rows_is_header_and_trailer() -> None:
    assert _parse(b"".join(encode_rows("c", 1, [], np.zeros((0, 3), dtype=np.float32)))) == []
