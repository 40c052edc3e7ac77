"""The advisory lock keys of a corpus: hashes of a name and the corpus's secret salt.

PostgreSQL checks no privilege on advisory locks: any session may take any key. A key
hashed from the schema and corpus names alone can be computed, and held, by any role,
which under tenancy let one tenant stall another's writes and merges. Each key here mixes
in ``corpora.lock_salt`` (revision 0013), a random uuid drawn when the corpus row is
created and hidden by row-level security from every role the corpus is not granted to.

Until the schema's floor of served releases reaches :data:`SALTED_KEYS_REVISION` (``tnsrag
db upgrade --finish``), processes of earlier releases may still take the unsalted keys, so
:func:`corpus_keys` returns both, unsalted first (every process takes them in that order).
"""

from __future__ import annotations

import textwrap

from tnsrag_db._db.pool import Connection
from tnsrag_db._db.revisions import COMPAT_FUNCTION, serves_releases_before

__all__ = ["ROW_AFTER_LOCK_SQL", "SALTED_KEYS_REVISION", "corpus_keys", "serves_unsalted"]

#: The first revision whose releases take the salted keys.
SALTED_KEYS_REVISION = "0013"

#: The salted and unsalted key of name ``:k`` for corpus ``:c`` (the salted one NULL in a
#: schema before revision 0013, which has no salt: read through ``to_jsonb`` of the row,
#: so that the statement is valid there too; the library still writes to such a schema
#: between the revisions of an upgrade).
_KEYS_SQL = textwrap.dedent("""\
    SELECT hashtextextended(CAST(:k AS text) || ':' || (to_jsonb(c) ->> 'lock_salt'), 0) AS salted,
           hashtextextended(CAST(:k AS text), 0) AS unsalted
    FROM corpora c WHERE c.corpus = :c""")
#: The schema's floor of served releases (revision 0012 on).
_FLOOR_SQL = f"SELECT f.serves_from FROM {COMPAT_FUNCTION}() f"


def serves_unsalted(floor: str) -> bool:
    """Whether a schema whose oldest served release is ``floor`` serves releases that take
    the unsalted keys."""
    return serves_releases_before(floor, SALTED_KEYS_REVISION)


def corpus_keys(conn: Connection, name: str, corpus: str) -> tuple[int, ...] | None:
    """The keys of lock ``name`` (a text naming the lock, its schema and corpus) for
    ``corpus`` on ``conn``'s search path, to be taken in order, the salted one last; None
    when the corpus has no row (visible to ``conn``'s role). A schema without salts (before
    revision 0013) has the unsalted key only."""
    row = conn.execute(_KEYS_SQL, {"k": name, "c": corpus}).first()
    if row is None:
        return None
    if row.salted is None:
        return (int(row.unsalted),)
    floor = conn.execute(_FLOOR_SQL).scalar_one()
    return (int(row.unsalted), int(row.salted)) if serves_unsalted(str(floor)) else (int(row.salted),)


#: The corpus row's configuration (and its default expiry, NULL before revision 0014) and
#: the last of its keys (as :func:`corpus_keys` orders them), to check after a wait that the
#: keys taken still belong to the row: a drop may have deleted it, and a write re-created it
#: with another salt, meanwhile.
ROW_AFTER_LOCK_SQL = textwrap.dedent("""\
    SELECT c.text_config, to_jsonb(c) -> 'expiry' AS expiry, to_jsonb(c) -> 'history' AS history,
           coalesce(hashtextextended(CAST(:k AS text) || ':' || (to_jsonb(c) ->> 'lock_salt'), 0),
                    hashtextextended(CAST(:k AS text), 0)) AS last_key
    FROM corpora c WHERE c.corpus = :c""")
