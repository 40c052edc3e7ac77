"""Tenant policies read the grants through one function, which the planner plans in microseconds.

The policies of revisions 0005 and 0007 compare ``corpus`` with ``ARRAY(SELECT g.corpus
FROM tenant_grants g WHERE g.role_name = current_user)``. PostgreSQL adds a policy's
condition to every reference of its table in a statement and plans its subquery each
time: a BM25 statement names the corpus-keyed tables six or more times and a hybrid one a
dozen, and BM25 statements are planned afresh at every execution, so tenant queries
spent 1.25-1.55x as long in planning as the same queries without the policy
(``bench/bench_tenancy.py --server-time``).

This revision adds ``tnsrag_tenant_corpora()``, the grant lookup as a STABLE plpgsql
function (the caller's own grants, read as the caller: not SECURITY DEFINER), and
rewrites both policies (``tenant_isolation`` on every corpus-keyed table,
``tenant_filter_pairs`` on the filter pairs) as ``corpus = ANY (CAST((SELECT
tnsrag_tenant_corpora()) AS text[]))``. The scalar subquery is an InitPlan over no table
(nothing to plan but a function call), run once per statement, and ``corpus = ANY($n)``
still serves the corpus-led indexes. Which rows a role sees and may write is unchanged.

A plpgsql body is parsed when it first runs, under the caller's ``search_path``: every
name in it is therefore qualified (the table by its schema, the operator as
``OPERATOR(pg_catalog.=)``, the cast's type), so no object of a schema the caller
controls can stand in for the ones it uses (and ``tenant_grants``' own policy shows a
role its own grants only, whatever the lookup asks). A ``SET search_path`` clause would
do the same, but it costs every call a change and a restore of the setting: measured,
0.3-0.9 ms more per tenant keyword query, while the qualified body costs nothing.

The policies are rewritten wherever they exist (a table re-created without its policy
gets it back from :func:`tnsrag_db.tenancy.enable`); ``ALTER POLICY`` takes each table's
ACCESS EXCLUSIVE lock briefly, under env.py's ``lock_timeout`` and retries.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-02
"""
from __future__ import annotations

from collections.abc import Sequence

from alembic import context, op

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_POLICIES = ("tenant_isolation", "tenant_filter_pairs")


def _schema() -> str:
    return str(context.config.attributes["tnsrag_schema"])


def _alter_policies(s: str, granted: str) -> None:
    # A DO block, so that the offline SQL of ``tnsrag db sql`` finds the policies when it runs.
    names = ", ".join(f"'{p}'" for p in _POLICIES)
    op.execute(f"""
DO $do$
DECLARE r record;
BEGIN
    FOR r IN SELECT tablename, policyname FROM pg_policies
             WHERE schemaname = '{s}' AND policyname IN ({names}) LOOP
        EXECUTE format('ALTER POLICY %I ON %I.%I USING (%s) WITH CHECK (%s)',
                       r.policyname, '{s}', r.tablename, $g${granted}$g$, $g${granted}$g$);
    END LOOP;
END $do$""")


def upgrade() -> None:
    s = _schema()
    op.execute(f"""
CREATE FUNCTION {s}.tnsrag_tenant_corpora() RETURNS text[]
LANGUAGE plpgsql STABLE PARALLEL SAFE
AS $fn$
BEGIN
    RETURN ARRAY(SELECT g.corpus FROM {s}.tenant_grants g
                 WHERE g.role_name OPERATOR(pg_catalog.=) current_user::pg_catalog.text);
END
$fn$""")
    _alter_policies(s, f"corpus = ANY (CAST((SELECT {s}.tnsrag_tenant_corpora()) AS text[]))")


def downgrade() -> None:
    s = _schema()
    _alter_policies(s, f"corpus = ANY (ARRAY(SELECT g.corpus FROM {s}.tenant_grants g "
                       "WHERE g.role_name = current_user::text))")
    op.execute(f"DROP FUNCTION IF EXISTS {s}.tnsrag_tenant_corpora()")
