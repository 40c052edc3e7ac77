"""Helpers shared by the ``bench/`` scripts."""

from __future__ import annotations

import argparse
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import psycopg

if TYPE_CHECKING:
    from sqlalchemy.engine import URL

__all__ = ["database_url", "scratch_database"]


@contextmanager
def database_url(url: str | None) -> Iterator[str]:
    """Yield ``url``, or, when it is None, the URL of an embedded server started for the block.

    The embedded server lives in a fresh temporary directory (``tnsrag-bench-*``), is started
    the way ``connect()`` starts the default one (memory sized for this machine, so a bench
    measures what a user gets), and is stopped and deleted when the block exits.
    """
    if url is not None:
        yield url
        return
    from tnsrag_db._store.embedded.server import start_with_wheel

    root = Path(tempfile.mkdtemp(prefix="tnsrag-bench-"))
    handle, uri = start_with_wheel(root / "data")
    try:
        yield uri
    finally:
        handle.cleanup()  # the only handle: the wheel stops the server
        shutil.rmtree(root, ignore_errors=True)


@contextmanager
def scratch_database(url: str | None, prefix: str, *, role_password: str | None = None
                     ) -> Iterator[tuple[URL, str | None]]:
    """A database of its own (``<prefix>_<random>``) on ``url``'s server (a superuser URL;
    None: an embedded server, see :func:`database_url`), and with ``role_password`` a
    login role of its own too: yields the database's URL and the role's name (None
    without a password). Both are dropped when the block exits."""
    import uuid

    from psycopg import sql
    from sqlalchemy.engine import make_url  # the bench edits URLs with it

    with database_url(url) as server:
        base = make_url(str(server)).set(drivername="postgresql+psycopg")
        admin = base.set(drivername="postgresql").render_as_string(hide_password=False)
        name = f"{prefix}_{uuid.uuid4().hex[:8]}"
        role = f"{prefix}_{uuid.uuid4().hex[:8]}" if role_password is not None else None
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
            if role is not None:
                conn.execute(sql.SQL("CREATE ROLE {} LOGIN PASSWORD {}").format(sql.Identifier(role),
                                                                                sql.Literal(role_password)))
        try:
            yield base.set(database=name), role
        finally:
            with psycopg.connect(admin, autocommit=True) as conn:
                conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
                if role is not None:
                    conn.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(role)))


def fusion_weights(text: str) -> tuple[float, float]:
    """``K:V`` on a command line: a hybrid score fusion's keyword and vector weights."""
    keyword, _, vector = text.partition(":")
    try:
        return float(keyword), float(vector)
    except ValueError:
        raise argparse.ArgumentTypeError(f"weights are K:V, two numbers (9:5), got {text!r}") from None
