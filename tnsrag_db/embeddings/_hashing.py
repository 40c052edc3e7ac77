"""``HashingEmbedding``: the offline, deterministic fallback embedding.

A text is lower-cased and split into runs of Unicode letters and digits; each token is
hashed with BLAKE2b (stable across processes and platforms, unlike ``hash()``) to one
slot and a sign, the signed counts are added, and the vector is L2-normalised. Cosine
similarity between two such vectors therefore mostly measures token overlap; it knows
nothing of synonyms or paraphrases.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections import Counter
from collections.abc import Sequence

from tnsrag_db._errors import ConfigurationError
from tnsrag_db._validate import is_int

__all__ = ["DEFAULT_HASH_DIMENSION", "HashingEmbedding"]

#: The dimension of the declarative fallback (the SPI's 128 slots).
DEFAULT_HASH_DIMENSION = 128

# Letters and digits of any script; "_" is excluded so snake_case splits into words.
_TOKEN = re.compile(r"[^\W_]+")

# Changing the personalisation changes every stored vector, so it is versioned.
_PERSON = b"tnsrag-hash-v1"

_MAX_DIMENSION = 16_000  # pgvector's limit (and the schema's check)


class HashingEmbedding:
    """Token-hash embedding of ``dimension`` slots (default 128); name ``tnsrag-hash-<dimension>``.

    Returns L2-normalised vectors (all zeros for a text without tokens). Raises
    :class:`ConfigurationError` when ``dimension`` is not an int from 1 to 16,000.
    """

    #: Computed here: a batch may be cut into calls of any size at no cost (see the protocol).
    local_compute = True

    def __init__(self, dimension: int = DEFAULT_HASH_DIMENSION) -> None:
        if not is_int(dimension) or not 1 <= dimension <= _MAX_DIMENSION:
            raise ConfigurationError(f"hash embedding dimension must be an int from 1 to {_MAX_DIMENSION}, "
                                     f"got {dimension!r}")
        self._dimension = dimension

    @property
    def name(self) -> str:
        """The provider name, ``tnsrag-hash-<dimension>``."""
        return f"tnsrag-hash-{self._dimension}"

    @property
    def dimension(self) -> int:
        """The number of slots in every vector."""
        return self._dimension

    def __repr__(self) -> str:
        return f"HashingEmbedding({self._dimension})"

    def __call__(self, text: str) -> list[float]:
        """Embed ``text`` as ``dimension`` floats, unit length or all zero."""
        slots = [0] * self._dimension
        for token, count in Counter(_TOKEN.findall(text.lower())).items():
            digest = int.from_bytes(hashlib.blake2b(token.encode("utf-8"), digest_size=8, person=_PERSON).digest(),
                                    "little")
            slot = digest % self._dimension
            # The top bit is independent of the low bits that pick the slot.
            sign = -1 if digest >> 63 else 1
            slots[slot] += sign * count
        # Integer counts make the squared norm exact, so the result is bit-identical on
        # every platform (no order-dependent float summation).
        squared = sum(c * c for c in slots)
        if squared == 0:
            return [0.0] * self._dimension
        norm = math.sqrt(squared)
        return [c / norm for c in slots]

    def embed_batch(self, texts: Sequence[str]) -> list[list[float]]:
        """Embed each text in order; same result as calling the embedding once per text."""
        return [self(text) for text in texts]
