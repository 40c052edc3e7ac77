"""pytest plugin: every statement the library sends during the test session stays in one corpus.

A statement listener (:func:`tnsrag_db._db.runner.add_statement_listener`: every statement
the read runners and the library's connections send, sync and async alike) records the
statements whose sender is library code (the first frame outside psycopg and the standard
library lies inside the ``tnsrag_db`` package; statements the tests type themselves are
not the library's).
At the end of the session each distinct statement is checked with
:func:`tests._corpus_scope.corpus_violations`, and the session fails, listing the
statements and where the library sent them, when any shared table is read or written
without a corpus equality or two corpora meet in one statement. This is what lets the
tables be distributed by ``corpus`` (Citus) with every query routed to one shard.

``TNSRAG_CORPUS_SCOPE=off`` turns the check off (for a quick local run of a test file).
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Mapping
from pathlib import Path
from types import FrameType
from typing import Any

import pytest

import tnsrag_db
from tests._corpus_scope import corpus_violations
from tnsrag_db._db import runner

_PACKAGE = str(Path(tnsrag_db.__file__).resolve().parent) + os.sep
_SKIP = ("sqlalchemy", "psycopg", "contextlib", "threading", "concurrent", "functools")
#: The library's modules that send statements for others: the sender is their caller.
_SENDING = ("tnsrag_db._db.runner", "tnsrag_db._db.pool", "tnsrag_db._db.statement")
#: statement text -> (file:line of the library frame that sent it, its parameters)
_SEEN: dict[str, tuple[str, dict[str, object]]] = {}


def _sender(frame: FrameType | None) -> str | None:
    while frame is not None:
        module = frame.f_globals.get("__name__", "")
        if module.split(".")[0] not in _SKIP and module not in (__name__, *_SENDING):
            filename = os.path.abspath(frame.f_code.co_filename)
            return f"{filename}:{frame.f_lineno}" if filename.startswith(_PACKAGE) else None
        frame = frame.f_back
    return None


def _record(statement: Any, parameters: Any) -> None:
    if not isinstance(statement, str) or statement in _SEEN:
        return
    where = _sender(sys._getframe(1))
    if where is not None:
        _SEEN[statement] = (where, dict(parameters) if isinstance(parameters, Mapping) else {})


_NUMBERED = re.compile(r"\$(\d+)")


def pyformat(statement: str, values: Any) -> tuple[str, dict[str, object]]:
    """A statement with PostgreSQL's ``$n`` parameters (the read runner's) in the
    ``%(p<n>)s`` form the checker reads, with its values by those names."""
    named = {f"p{i}": v for i, v in enumerate(values or (), 1)}
    return _NUMBERED.sub(lambda m: f"%(p{m.group(1)})s", statement), named


def _record_read(text: str, values: Any) -> None:
    """A statement the library sends (``$n`` parameters), as the checker reads it."""
    _record(*pyformat(text, values))


def pytest_configure(config: pytest.Config) -> None:
    if os.environ.get("TNSRAG_CORPUS_SCOPE", "on") != "off":
        runner.add_statement_listener(_record_read)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if os.environ.get("TNSRAG_CORPUS_SCOPE", "on") == "off" or not _SEEN:
        return
    found = [(where, statement, problems) for statement, (where, params) in sorted(_SEEN.items(), key=lambda i: i[1][0])
             if (problems := corpus_violations(statement, params))]
    if not found:
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    lines = [f"{len(found)} library statement(s) are not confined to one corpus (tests/fix_corpus_scope.py):"]
    for where, statement, problems in found:
        lines.append(f"- {Path(where).relative_to(Path(_PACKAGE).parent)}: {'; '.join(problems)}")
        lines.append("    " + " ".join(statement.split())[:400])
    text = "\n".join(lines)
    if reporter is not None:
        reporter.write_sep("=", "corpus scope")
        reporter.write_line(text)
    else:  # pragma: no cover - no terminal reporter (e.g. -p no:terminal)
        print(text, file=sys.stderr)
    session.exitstatus = pytest.ExitCode.TESTS_FAILED
