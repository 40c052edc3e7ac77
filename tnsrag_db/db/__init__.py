"""The database layer: engines and their connection hooks (:mod:`~tnsrag_db.db.engine`),
migrations (:mod:`~tnsrag_db.db.migrate`), the tables (:mod:`~tnsrag_db.db.schema`), the
session (:mod:`~tnsrag_db.db.session`: transactions, locks, timeouts, and the store's
connections for reads), the one read runner every read plan goes through, sync or async
(:mod:`~tnsrag_db.db.runner`), driver-error mapping (:mod:`~tnsrag_db.db.driver_errors`),
and statements built without I/O (:mod:`~tnsrag_db.db.statement`). It imports nothing of the layers above it."""
