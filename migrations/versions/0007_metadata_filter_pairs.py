"""Metadata filter pairs: an entry's string metadata as (key, value) rows a tenant's filter can index.

A metadata filter is ``metadata @> '{"k": "v"}'`` (``jsonb_contains``), which is not
LEAKPROOF: under a row-level security policy PostgreSQL evaluates it only after the
policy, so a tenant role's filtered query reads its whole corpus and filters afterwards
(4-8x slower at 1 % selectivity, ``bench/bench_tenancy.py``). ``entry_filter_pairs``
holds one row ``(corpus, key, value, entry_id)`` per top-level string value of an
entry's metadata (filter values are strings, so these are exactly the pairs ``@>`` can
match); :func:`tnsrag_db._store.filters.filter_sql` looks the ids up with text equality
(``texteq``, LEAKPROOF), which stays an index condition below the policy.

The pairs are a tenancy-only mechanism: this revision creates the table, its index, its
policy and the trigger function, attaches no trigger and copies nothing, so a deployment
without tenancy pays nothing for them (no trigger on its writes, no foreign key, its
filtered statements unchanged). :func:`tnsrag_db.tenancy.enable` (``tnsrag db upgrade
--tenancy rls``) attaches the statement-level triggers on ``entries`` (transition tables:
one statement per write statement, not a call per row; deletes included, there is no
foreign key) and fills the table in one INSERT ... SELECT; :func:`tnsrag_db.tenancy.disable`
leaves them in place (a store opened while tenancy was on keeps using the pairs). The trigger function is SECURITY DEFINER (the owner, fixed
search_path): it copies only rows of the statement's own transition tables, which passed
the writer's policy, so tenant roles need (and get) no write privilege on the pairs, and
cannot plant or remove one. A trigger function cannot be called as a plain function. The
table carries a policy of its own (``tenant_filter_pairs``, the same grant lookup),
switched on and off with the other tables' by :mod:`tnsrag_db.tenancy`.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-02
"""
from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import context, op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

#: The pairs of the entries in ``{src}`` (an alias of entries' rows): top-level string values only.
_PAIRS = ("SELECT n.corpus, m.key, m.value #>> '{{}}', n.id FROM {src} n CROSS JOIN LATERAL jsonb_each(n.metadata) m "
          "WHERE jsonb_typeof(m.value) = 'string'")


def _schema() -> str:
    return str(context.config.attributes["tnsrag_schema"])


def upgrade() -> None:
    s = _schema()
    op.create_table(
        "entry_filter_pairs",
        sa.Column("corpus", sa.Text(), nullable=False),
        sa.Column("key", sa.Text(), nullable=False),
        sa.Column("value", sa.Text(), nullable=False),
        sa.Column("entry_id", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("corpus", "key", "value", "entry_id", name="pk_entry_filter_pairs"),
        schema=s,
    )
    # The delete and update triggers find an entry's pairs through this index.
    op.create_index("ix_entry_filter_pairs_corpus_entry_id", "entry_filter_pairs", ["corpus", "entry_id"], schema=s)
    op.execute(f"""
CREATE FUNCTION {s}.tnsrag_filter_pairs_sync() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
BEGIN
    -- The delete and update statements run through EXECUTE, planned at every call for the
    -- transition tables' actual sizes: a plan cached by the function's first call (an
    -- INSERT ... ON CONFLICT fires the UPDATE trigger with no rows) stayed a nested loop
    -- over the whole pairs table per row, seconds for a write of 1,000 changed entries.
    IF TG_OP = 'DELETE' THEN
        EXECUTE $q$DELETE FROM {s}.entry_filter_pairs p USING old_rows o
                   WHERE p.corpus = o.corpus AND p.entry_id = o.id$q$;
    ELSIF TG_OP = 'UPDATE' THEN
        -- Rows whose metadata changed: the old pairs go, the new ones come. Old and new
        -- rows are matched on the key (corpus, id), an equality join PostgreSQL can hash,
        -- and their metadata compared afterwards.
        EXECUTE $q$DELETE FROM {s}.entry_filter_pairs p
                   USING old_rows o LEFT JOIN new_rows n ON n.corpus = o.corpus AND n.id = o.id
                   WHERE p.corpus = o.corpus AND p.entry_id = o.id
                     AND n.metadata IS DISTINCT FROM o.metadata$q$;
        EXECUTE $q$INSERT INTO {s}.entry_filter_pairs (corpus, key, value, entry_id)
                   SELECT n.corpus, m.key, m.value #>> '{{}}', n.id
                   FROM new_rows n LEFT JOIN old_rows o ON o.corpus = n.corpus AND o.id = n.id
                   CROSS JOIN LATERAL jsonb_each(n.metadata) m
                   WHERE jsonb_typeof(m.value) = 'string' AND o.metadata IS DISTINCT FROM n.metadata
                   ON CONFLICT DO NOTHING$q$;
    ELSE
        INSERT INTO {s}.entry_filter_pairs (corpus, key, value, entry_id)
        {_PAIRS.format(src="new_rows")}
        ON CONFLICT DO NOTHING;
    END IF;
    RETURN NULL;
END
$fn$""")
    op.execute(f"REVOKE ALL ON FUNCTION {s}.tnsrag_filter_pairs_sync() FROM PUBLIC")
    # No trigger here: tnsrag_db.tenancy.enable attaches them (and fills the table).
    granted = f"corpus = ANY (ARRAY(SELECT g.corpus FROM {s}.tenant_grants g WHERE g.role_name = current_user::text))"
    op.execute(f"CREATE POLICY tenant_filter_pairs ON {s}.entry_filter_pairs USING ({granted}) WITH CHECK ({granted})")
    # Row-level security on the pairs follows the other tables' (tnsrag db upgrade --tenancy rls).
    # (A DO block, so that the offline SQL of ``tnsrag db sql`` decides it when it runs.)
    op.execute(f"""
DO $do$ BEGIN
    IF (SELECT relrowsecurity FROM pg_class WHERE oid = '{s}.entries'::regclass) THEN
        ALTER TABLE {s}.entry_filter_pairs ENABLE ROW LEVEL SECURITY;
    END IF;
END $do$""")


def downgrade() -> None:
    s = _schema()
    op.execute(f"DROP TRIGGER IF EXISTS tnsrag_filter_pairs_insert ON {s}.entries")
    op.execute(f"DROP TRIGGER IF EXISTS tnsrag_filter_pairs_update ON {s}.entries")
    op.execute(f"DROP TRIGGER IF EXISTS tnsrag_filter_pairs_delete ON {s}.entries")
    op.execute(f"DROP FUNCTION IF EXISTS {s}.tnsrag_filter_pairs_sync()")
    op.drop_table("entry_filter_pairs", schema=s)
