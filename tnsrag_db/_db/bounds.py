"""The condition that an entry row has a bound in time, as SQL: read by the table
declarations (:mod:`~tnsrag_db._db.schema`, the predicate of a partial index) and by the
reads' checks (:mod:`~tnsrag_db._store.expiry`), which must not import SQLAlchemy to get it."""

from __future__ import annotations

__all__ = ["BOUNDED"]

#: The condition that an entry row has a bound in time (an expiry, a validity or the end of
#: its recording): the predicate of the partial index ``ix_entries_corpus_bounded`` (revision
#: 0018), whose one empty probe tells the reads that no entry of a corpus needs a check
#: (:func:`tnsrag_db._store.expiry.none_excluded`). Column names alone, so it reads the same in
#: the index and in a query of one ``entries`` row source; a change is a new revision.
BOUNDED = ("expires_at IS NOT NULL OR valid_from IS NOT NULL OR valid_until IS NOT NULL "
           "OR recorded_until IS NOT NULL")
