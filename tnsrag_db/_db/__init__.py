"""The database layer: connection pools (:mod:`~tnsrag_db._db.pool`) and their hooks
(:mod:`~tnsrag_db._db.hooks`),
migrations (:mod:`~tnsrag_db._db.migrate`), the tables (:mod:`~tnsrag_db._db.schema`), the
session (:mod:`~tnsrag_db._db.session`: transactions, locks, timeouts, and the store's
connections for reads), the one read runner every read plan goes through, sync or async
(:mod:`~tnsrag_db._db.runner`), driver-error mapping (:mod:`~tnsrag_db._db.driver_errors`),
and statements built without I/O (:mod:`~tnsrag_db._db.statement`). It imports nothing of the layers above it."""
