"""Embedding-space ids come from the identity sequence only: tenants can no longer choose one.

The HNSW index of a space is the partial index ``ix_embeddings_hnsw_<space_id> ... WHERE
space_id = <space_id>``: it holds one corpus's vectors only as long as no two corpora
share a space id. Revision 0003 dropped the unique constraint on ``space_id`` alone
(Citus needs every unique key to include ``corpus``), leaving the identity column to keep
ids apart; but a tenant role (revisions 0005/0006) was granted INSERT and UPDATE on every
column of ``embedding_spaces`` and read access to the identity sequence, so it could
insert a space of its own corpus under any id, among them another tenant's id or the
next one the sequence would hand out. Its vectors then entered the other tenant's index
(that tenant's writes failed on the index's dimension, its searches fell back to exact
scans, and ``EXPLAIN`` of the planting tenant's own queries counted the other tenant's
rows).

This revision:

* gives every tenant role of ``tenant_grants`` INSERT on ``(corpus, provider,
  dimension)`` only, takes away its UPDATE on ``embedding_spaces`` and every privilege on
  the schema's sequences (an identity default draws its value without them): a tenant
  can create its spaces, never pick their ids;
* moves the sequence past every id in use and every HNSW index name on the table, so
  that no id it hands out meets a planted row or an index left behind;
* gives a new id to every space that shares its id with a space of another corpus (the
  oldest keeps it) and moves its vectors along, in one statement, and drops the HNSW
  index of every shared id: it held more than one corpus's vectors, perhaps at another
  dimension. Those spaces are searched exactly until the owner's ``tnsrag db
  build-indexes`` builds their indexes again.

A database no tenant wrote into has nothing to move: the revision then only changes
privileges, which takes no table lock that waits for writers. The index drops (only
for shared ids) take ``embeddings``' lock briefly, under the upgrade's ``lock_timeout``
and retries like any revision's DDL.

The downgrade gives tenant roles the earlier privileges back; ids stay as they are.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-03
"""
from __future__ import annotations

from collections.abc import Sequence

from alembic import context, op

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _schema() -> str:
    return str(context.config.attributes["tnsrag_schema"])


#: Runs server-side (also in ``tnsrag db sql``'s offline script). ``{s}``: the validated schema.
_UPGRADE = r"""
DO $tnsrag$
DECLARE
  seq regclass := pg_get_serial_sequence('{s}.embedding_spaces', 'space_id');
  top bigint;
  current bigint;
  r record;
BEGIN
  FOR r IN SELECT DISTINCT g.role_name FROM {s}.tenant_grants g JOIN pg_roles o ON o.rolname = g.role_name LOOP
    EXECUTE format('REVOKE INSERT, UPDATE ON {s}.embedding_spaces FROM %I', r.role_name);
    EXECUTE format('GRANT INSERT (corpus, provider, dimension) ON {s}.embedding_spaces TO %I', r.role_name);
    EXECUTE format('REVOKE ALL ON ALL SEQUENCES IN SCHEMA {s} FROM %I', r.role_name);
  END LOOP;

  SELECT greatest(
    (SELECT max(space_id) FROM {s}.embedding_spaces),
    (SELECT max(substring(c.relname FROM '^ix_embeddings_hnsw_([0-9]{{1,18}})$')::bigint)
       FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
      WHERE n.nspname = '{s}' AND c.relname ~ '^ix_embeddings_hnsw_[0-9]{{1,18}}$')) INTO top;
  EXECUTE format('SELECT CASE WHEN is_called THEN last_value ELSE last_value - 1 END FROM %s', seq) INTO current;
  IF top > current THEN
    PERFORM setval(seq, top);
  END IF;

  FOR r IN SELECT space_id FROM {s}.embedding_spaces GROUP BY space_id HAVING count(*) > 1 LOOP
    EXECUTE format('DROP INDEX IF EXISTS {s}.%I', 'ix_embeddings_hnsw_' || r.space_id);
    UPDATE {s}.embedding_spaces SET index_name = NULL WHERE space_id = r.space_id;
  END LOOP;

  -- The referencing rows move in the same statement: the foreign key is checked at its end.
  WITH ranked AS (
    SELECT corpus, space_id, row_number() OVER (PARTITION BY space_id ORDER BY created_at, corpus) AS n
    FROM {s}.embedding_spaces
  ), moves AS MATERIALIZED (
    SELECT corpus, space_id AS old_id, nextval(seq) AS new_id FROM ranked WHERE n > 1
  ), spaces AS (
    UPDATE {s}.embedding_spaces e SET space_id = m.new_id FROM moves m
    WHERE e.corpus = m.corpus AND e.space_id = m.old_id RETURNING e.corpus
  ), vectors AS (
    UPDATE {s}.embeddings x SET space_id = m.new_id FROM moves m
    WHERE x.corpus = m.corpus AND x.space_id = m.old_id RETURNING x.corpus
  )
  SELECT count(*) INTO top FROM (SELECT corpus FROM spaces UNION ALL SELECT corpus FROM vectors) moved;
  IF top > 0 THEN
    RAISE NOTICE 'tnsrag_db: gave new ids to embedding spaces sharing another corpus''s id; '
                 'run tnsrag db build-indexes to rebuild their HNSW indexes';
  END IF;
END
$tnsrag$
"""

_DOWNGRADE = r"""
DO $tnsrag$
DECLARE
  r record;
BEGIN
  FOR r IN SELECT DISTINCT g.role_name FROM {s}.tenant_grants g JOIN pg_roles o ON o.rolname = g.role_name LOOP
    EXECUTE format('GRANT INSERT, UPDATE ON {s}.embedding_spaces TO %I', r.role_name);
    EXECUTE format('GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA {s} TO %I', r.role_name);
  END LOOP;
END
$tnsrag$
"""


def upgrade() -> None:
    op.execute(_UPGRADE.format(s=_schema()))


def downgrade() -> None:
    op.execute(_DOWNGRADE.format(s=_schema()))
