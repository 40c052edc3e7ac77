"""Upgrades of several schemas of one database at once: every one succeeds."""

from __future__ import annotations

import multiprocessing as mp
from collections.abc import Callable

import pytest
from sqlalchemy.engine import URL

from tests.db._helpers import run_processes
from tnsrag_db._db import migrate
from tnsrag_db._db.pool import Pool


def _upgrade_schema(url: str, schema: str, barrier: mp.synchronize.Barrier) -> None:  # type: ignore[name-defined]
    pool = Pool(url, schema=schema, pool_size=1)
    try:
        barrier.wait()
        migrate.upgrade(pool, schema=schema)
    finally:
        pool.close()


@pytest.mark.slow
def test_simultaneous_upgrades_of_different_schemas_all_succeed(make_database: Callable[[], URL]) -> None:
    ctx = mp.get_context("spawn")
    processes = 6
    for _ in range(2):  # two fresh databases: the extensions are created during the race
        url = make_database()
        barrier = ctx.Barrier(processes)
        args = [(url.render_as_string(hide_password=False), f"tenant_{n}", barrier) for n in range(processes)]
        assert run_processes(_upgrade_schema, args, 180) == [0] * processes
        for n in range(processes):
            pool = Pool(url, schema=f"tenant_{n}", pool_size=1)
            try:
                assert migrate.current_revision(pool, schema=f"tenant_{n}") == migrate.head_revision()
            finally:
                pool.close()
