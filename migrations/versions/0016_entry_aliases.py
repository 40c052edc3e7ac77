"""Entry aliases: the ids of entries merged into another, so reads of them find the survivor.

A consolidation (``Store.consolidate(mode="merge")``, ``tnsrag db consolidate``) keeps one
entry of a group of duplicates and deletes the others through the normal delete path; each
deleted id becomes a row here, ``(corpus, alias) -> entry_id``, which ``get``, ``get_many``
and the graph's edge writes and neighbour reads resolve when no entry has that id. The
foreign key to the survivor cascades: deleting (or forgetting) the survivor deletes its
aliases. A second merge of the survivor moves its aliases to the new survivor.

Additive and online: a new, empty table (its creation and its foreign key's check on an
empty table take their locks for an instant), keyed by corpus, with the ``tenant_isolation``
policy, row-level security when ``entries`` has it on, and the tenant roles' privileges,
as every table keyed by corpus. Processes of earlier releases never read it (they do not
resolve aliases); nothing waits for ``tnsrag db upgrade --finish``.

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-07
"""
from __future__ import annotations

from collections.abc import Sequence

from alembic import context, op

revision: str = "0016"
down_revision: str | None = "0015"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

#: The table this revision adds, keyed by corpus.
TABLE = "entry_aliases"


def _schema() -> str:
    return str(context.config.attributes["tnsrag_schema"])


_TABLE_SQL = """
CREATE TABLE IF NOT EXISTS {s}.entry_aliases (
  corpus text NOT NULL,
  alias text NOT NULL,
  entry_id text NOT NULL,
  created_at timestamptz NOT NULL DEFAULT now(),
  CONSTRAINT pk_entry_aliases PRIMARY KEY (corpus, alias) INCLUDE (entry_id),
  CONSTRAINT fk_entry_aliases_corpus_entry_id_entries FOREIGN KEY (corpus, entry_id)
    REFERENCES {s}.entries (corpus, id) ON DELETE CASCADE
);
CREATE INDEX IF NOT EXISTS ix_entry_aliases_corpus_entry_id ON {s}.entry_aliases (corpus, entry_id)
"""

#: Policy, row-level security and tenant privileges, as the tables of revision 0005 have them.
_TENANCY_SQL = """
DO $tnsrag$
DECLARE
  r record;
  rls boolean := coalesce((SELECT c.relrowsecurity FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                           WHERE n.nspname = '{s}' AND c.relname = 'entries'), false);
BEGIN
  IF NOT EXISTS (SELECT 1 FROM pg_policies WHERE schemaname = '{s}' AND tablename = '{t}'
                 AND policyname = 'tenant_isolation') THEN
    EXECUTE 'CREATE POLICY tenant_isolation ON {s}.{t} USING ({granted}) WITH CHECK ({granted})';
  END IF;
  IF rls THEN
    EXECUTE 'ALTER TABLE {s}.{t} ENABLE ROW LEVEL SECURITY';
  END IF;
  FOR r IN SELECT DISTINCT g.role_name FROM {s}.tenant_grants g JOIN pg_roles o ON o.rolname = g.role_name LOOP
    EXECUTE format('GRANT SELECT, INSERT, UPDATE, DELETE ON {s}.{t} TO %I', r.role_name);
  END LOOP;
END
$tnsrag$
"""


def upgrade() -> None:
    s = _schema()
    op.execute(_TABLE_SQL.format(s=s))
    granted = f"corpus = ANY (CAST((SELECT {s}.tnsrag_tenant_corpora()) AS text[]))"
    op.execute(_TENANCY_SQL.format(s=s, t=TABLE, granted=granted))


def downgrade() -> None:
    s = _schema()
    op.execute(f"DROP TABLE IF EXISTS {s}.{TABLE}")
