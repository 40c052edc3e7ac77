"""The Citus script: every table distributed by corpus, co-located, in foreign-key order,
and a schema whose keys Citus accepts (tests/db/test_citus_cluster.py runs it on a cluster)."""

from __future__ import annotations

import re

import sqlglot
from click.testing import CliRunner
from sqlalchemy import Column, ForeignKeyConstraint, Integer, MetaData, Table, Text, UniqueConstraint

from tnsrag_db._cli import main_group
from tnsrag_db._db.schema import metadata
from tnsrag_db._store.citus import citus_problems, citus_script

CALL = re.compile(r"SELECT create_distributed_table\('(\w+)\.(\w+)', 'corpus'(?:, colocate_with => '(\w+)\.(\w+)')?\);")


def test_every_table_is_distributed_by_corpus_colocated_and_after_what_it_references() -> None:
    script = citus_script(schema="app_mem")
    calls = [m.groups() for m in CALL.finditer(script)]
    order = [table for _, table, _, _ in calls]
    assert sorted(order) == sorted(t.name for t in metadata.sorted_tables)
    assert {schema for schema, _, _, _ in calls} == {"app_mem"}
    lead = order[0]
    assert calls[0][2] is None and all(c[2:] == ("app_mem", lead) for c in calls[1:])
    for table in metadata.sorted_tables:
        for fk in table.foreign_key_constraints:
            assert order.index(fk.referred_table.name) < order.index(table.name), (table.name, fk.referred_table.name)
    assert lead == "corpora"
    assert script.index("CREATE EXTENSION IF NOT EXISTS citus;") < script.index("create_distributed_table")
    # what Citus refuses goes first: subqueries in policies, triggers on a table to distribute
    first = script.index("create_distributed_table")
    assert script.index("ALTER POLICY %I ON %I.%I USING (corpus = ANY (app_mem.tnsrag_tenant_corpora()))") < first
    for trigger in ("tnsrag_bm25_retire_deleted", "tnsrag_bm25_retire_rewritten"):
        assert script.index(f"DROP TRIGGER IF EXISTS {trigger} ON app_mem.entries;") < first
    for statement in sqlglot.parse(script, read="postgres"):  # valid SQL as a whole
        assert statement is not None


def test_the_schema_keeps_every_key_and_foreign_key_on_corpus() -> None:
    assert citus_problems() == []


def test_keys_without_corpus_are_named() -> None:
    md = MetaData()
    parent = Table("p", md, Column("corpus", Text, primary_key=True), Column("n", Integer), UniqueConstraint("n"))
    child = Table("c", md, Column("corpus", Text, primary_key=True), Column("n", Integer),
                  ForeignKeyConstraint(["n"], ["p.n"]))
    problems = citus_problems([parent, child])
    assert any("p: unique constraint (n)" in p for p in problems)
    assert any("c: foreign key (n) to p" in p for p in problems)


def test_cli_prints_the_script() -> None:
    res = CliRunner().invoke(main_group, ["db", "sql", "--citus", "--schema", "mem"])
    assert res.exit_code == 0, res.output
    assert res.output == citus_script(schema="mem")
    bad = CliRunner().invoke(main_group, ["db", "sql", "--citus", "--schema", "Bad-Name"])
    assert bad.exit_code != 0
