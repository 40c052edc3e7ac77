"""The read runner's own Python work per plan, without a database: a two-statement plan
driven by :class:`~tnsrag_db._db.runner.PlanRunner` on a stub connection (checkout,
autocommit, the statement timeout, two statements, the hand-back), the statements' send
replaced by a function returning no rows.

Usage::

    python -m bench.bench_runner_work [--plans 20000] [--repeats 7]

It prints the median and the lowest of the repetitions' time per plan, in microseconds.
Run it on two trees in alternation (``PYTHONPATH=<tree>``) to compare their runners: the
database's own time, the same for both, is left out.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

from psycopg.pq import TransactionStatus

from tnsrag_db._db import runner
from tnsrag_db._db.statement import Plan, Rows, Statement


class _Info:
    transaction_status = TransactionStatus.IDLE


class _Driver:
    closed = False
    broken = False
    autocommit = False
    info = _Info()

    def set_autocommit(self, value: bool) -> None:
        self.autocommit = value

    def execute(self, sql: str) -> None:
        return None

    def commit(self) -> None:
        return None


class _Checkout:
    def __init__(self) -> None:
        self.driver = _Driver()
        self.info: dict[Any, Any] = {}

    def release(self) -> None:
        return None

    def discard(self) -> None:
        return None


class _Source:
    def checkout(self, *, snapshot: bool) -> _Checkout:
        return _Checkout()

    def failed(self, checkout: object) -> bool:
        return False


_STATEMENT = Statement("SELECT e.id FROM entries e WHERE e.corpus = :c AND e.id = :i", {"c": "bench", "i": "x"})


def _plan() -> Plan[tuple[Rows, Rows]]:
    first = yield _STATEMENT
    second = yield _STATEMENT
    return first, second


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--plans", type=int, default=20_000)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    runner._send = lambda driver, text, values: []  # no database
    plan_runner = runner.PlanRunner(_Source(), what="bench", timeout_ms=lambda: 5000)  # type: ignore[arg-type]
    times = []
    for _ in range(args.repeats):
        start = time.perf_counter()
        for _ in range(args.plans):
            plan_runner.run(_plan())
        times.append((time.perf_counter() - start) / args.plans * 1e6)
    print(f"two-statement plan: median {statistics.median(times):.2f} us, lowest {min(times):.2f} us per plan")


if __name__ == "__main__":
    main()
