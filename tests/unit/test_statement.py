"""The I/O-free plan drivers: the same plan runs under run_plan and arun_plan."""

from __future__ import annotations

import asyncio

import pytest

from tnsrag_db._db.statement import Plan, Rows, Statement, arun_plan, hidden_corpus, one, run_plan


def _two_rounds(seed: int) -> Plan[list[int]]:
    first = yield Statement("SELECT :x AS x", {"x": seed}, ("x",))
    second = yield Statement("SELECT :y AS y", {"y": first[0] + 1}, ("y",))
    return [first[0], second[0]]


def _echo(statement: Statement) -> Rows:
    return [next(iter(statement.params.values())) * 10]


def test_run_plan_sends_each_statements_rows_back() -> None:
    seen: list[Statement] = []

    def execute(statement: Statement) -> Rows:
        seen.append(statement)
        return _echo(statement)

    assert run_plan(_two_rounds(1), execute) == [10, 110]
    assert [s.params for s in seen] == [{"x": 1}, {"y": 11}]


def test_async_driver_runs_the_same_statements() -> None:
    seen: list[Statement] = []

    async def execute(statement: Statement) -> Rows:
        seen.append(statement)
        return _echo(statement)

    assert asyncio.run(arun_plan(_two_rounds(1), execute)) == run_plan(_two_rounds(1), _echo)
    assert [s.sql for s in seen] == ["SELECT :x AS x", "SELECT :y AS y"]


def test_errors_are_thrown_into_the_plan() -> None:
    def recovering() -> Plan[str]:
        try:
            yield Statement("SELECT broken")
        except LookupError as exc:
            return f"recovered from {exc}"
        return "not reached"

    def failing(statement: Statement) -> Rows:
        raise LookupError(statement.sql)

    assert run_plan(recovering(), failing) == "recovered from SELECT broken"
    with pytest.raises(LookupError, match="SELECT 1"):
        run_plan(one(Statement("SELECT 1")), failing)


def test_a_plan_is_closed_when_the_driver_stops() -> None:
    closed: list[bool] = []

    def plan() -> Plan[None]:
        try:
            yield Statement("SELECT 1")
            yield Statement("SELECT 2")
        finally:
            closed.append(True)

    def failing(statement: Statement) -> Rows:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_plan(plan(), failing)
    assert closed == [True]


def test_the_corpus_is_hidden_unless_a_column_filter_value_shows() -> None:
    sql = "SELECT 1 FROM entries e WHERE e.corpus = :k_c AND e.id = ANY(:k_chunks) AND x = :c AND y = a::c"
    hidden = hidden_corpus(sql)
    assert hidden == ("SELECT 1 FROM entries e WHERE e.corpus = (SELECT CAST(:k_c AS text)) AND e.id = ANY(:k_chunks) "
                      "AND x = (SELECT CAST(:c AS text)) AND y = a::c")
    assert hidden_corpus(hidden) == hidden  # a statement embedding a hidden one
    assert hidden_corpus("SELECT 1 FROM entries e WHERE e.corpus = :k_f_c") == (
        "SELECT 1 FROM entries e WHERE e.corpus = (SELECT CAST(:k_f_c AS text))")
    for shown in (":k_f_tier", ":k_f_source", ":hk_f_id"):  # planned for that value at every run anyway
        filtered = f"SELECT 1 FROM entries e WHERE e.corpus = :k_c AND e.tier = {shown}"
        assert hidden_corpus(filtered) == filtered
