"""The embedded server, as scripts see it: :func:`keep_running` makes the server a script's
``connect()`` starts outlive the script, as the ``tnsrag`` command's does."""

from __future__ import annotations

from tnsrag_db._store.embedded.resolve import keep_running as keep_running

__all__ = ["keep_running"]
