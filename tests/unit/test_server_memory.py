"""The embedded server's memory settings: sizing from RAM, CPUs and a budget, where the
budget comes from, and the files that carry them into PostgreSQL (no server needed)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tnsrag_db._errors import ValidationError
from tnsrag_db._store.embedded import memory
from tnsrag_db._store.embedded.memory import (
    GiB,
    MiB,
    parse_size,
    plan,
    prewarm_available,
    server_settings,
    write_config,
)


def _bytes(value: str) -> int:
    number, unit = int(value[:-2]), value[-2:]
    return number * {"MB": MiB, "GB": GiB}[unit]


@pytest.mark.parametrize(("ram_gib", "shared", "cache"), [
    (4, "1GB", "2GB"),        # a small laptop: a quarter of RAM
    (16, "4GB", "8GB"),
    (24, "6GB", "12GB"),
    (64, "8GB", "32GB"),      # capped: the embedded server shares the machine with its user
    (512, "8GB", "256GB"),
])
def test_the_automatic_budget_is_a_quarter_of_ram_capped(ram_gib: int, shared: str, cache: str) -> None:
    s = server_settings(ram_gib * GiB, 8)
    assert s["shared_buffers"] == shared and s["effective_cache_size"] == cache


def test_a_tiny_machine_gets_the_smallest_budget() -> None:
    s = server_settings(128 * MiB, 1)
    assert s["shared_buffers"] == "64MB"
    assert s["work_mem"] == "4MB" and s["maintenance_work_mem"] == "64MB" and s["max_wal_size"] == "1GB"


def test_working_memory_and_wal_follow_the_budget_within_bounds() -> None:
    small = server_settings(24 * GiB, 2, 256 * MiB)
    big = server_settings(24 * GiB, 2, 16 * GiB)
    assert (small["work_mem"], big["work_mem"]) == ("4MB", "64MB")
    assert (small["maintenance_work_mem"], big["maintenance_work_mem"]) == ("64MB", "1GB")
    assert (small["autovacuum_work_mem"], big["autovacuum_work_mem"]) == ("64MB", "256MB")
    assert (small["max_wal_size"], big["max_wal_size"]) == ("1GB", "4GB")
    mid = server_settings(24 * GiB, 2, 2 * GiB)
    assert mid["work_mem"] == "16MB" and mid["maintenance_work_mem"] == "256MB" and mid["max_wal_size"] == "2GB"
    for s in (small, mid, big):
        assert s["checkpoint_timeout"] == "15min" and s["wal_compression"] == "on"
        # Every value PostgreSQL reads as memory is a whole number of MB or GB.
        for name in ("shared_buffers", "effective_cache_size", "work_mem", "maintenance_work_mem", "max_wal_size"):
            assert _bytes(s[name]) % MiB == 0


@pytest.mark.parametrize(("cpus", "workers"), [(1, "1"), (2, "1"), (4, "2"), (8, "4"), (64, "4")])
def test_parallel_maintenance_workers_follow_the_cpus(cpus: int, workers: str) -> None:
    assert server_settings(16 * GiB, cpus)["max_parallel_maintenance_workers"] == workers


def test_the_page_cache_is_kept_across_restarts_when_the_installation_has_pg_prewarm(tmp_path: Path) -> None:
    assert server_settings(16 * GiB, 2)["shared_preload_libraries"] == "pg_prewarm"
    assert "shared_preload_libraries" not in server_settings(16 * GiB, 2, prewarm=False)
    # A library that is missing would stop the server from starting: only what is installed is named.
    without = plan(tmp_path, environ={}, hardware=(16 * GiB, 2), prewarm=False)
    assert "shared_preload_libraries" not in without.settings
    assert prewarm_available()  # the wheel of the test environment ships the module
    assert plan(tmp_path, environ={}, hardware=(16 * GiB, 2)).settings["shared_preload_libraries"] == "pg_prewarm"


def test_an_explicit_budget_out_of_range_is_an_error() -> None:
    with pytest.raises(ValidationError, match="below the smallest"):
        server_settings(16 * GiB, 2, 10 * MiB)
    with pytest.raises(ValidationError, match="exceeds the machine's RAM"):
        server_settings(4 * GiB, 2, 8 * GiB)


@pytest.mark.parametrize(("text", "size"), [("4GB", 4 * GiB), ("4gib", 4 * GiB), ("512MB", 512 * MiB),
                                            ("1.5g", 3 * GiB // 2), (" 2 GB ", 2 * GiB), ("134217728", 128 * MiB),
                                            ("auto", None), ("AUTO", None)])
def test_sizes_parse(text: str, size: int | None) -> None:
    assert parse_size(text) == size


@pytest.mark.parametrize("text", ["", "lots", "4 GBs", "-1GB", "4XB", "1MB"])
def test_a_malformed_size_names_the_option(text: str) -> None:
    with pytest.raises(ValidationError, match="--memory"):
        parse_size(text)


def test_the_budget_comes_from_the_option_then_the_environment_then_the_remembered_choice(tmp_path: Path) -> None:
    hw = (24 * GiB, 2)
    assert plan(tmp_path, environ={}, hardware=hw).origin == "auto"
    assert plan(tmp_path, environ={}, hardware=hw).budget == 6 * GiB
    (tmp_path / memory.CHOICE_FILE).write_text(json.dumps({"memory": GiB}))
    assert (plan(tmp_path, environ={}, hardware=hw).budget, plan(tmp_path, environ={}, hardware=hw).origin) == (
        GiB, "tnsrag.json")
    env = {"TNSRAG_SERVER_MEMORY": "512MB"}
    assert (plan(tmp_path, environ=env, hardware=hw).budget, plan(tmp_path, environ=env, hardware=hw).origin) == (
        512 * MiB, "TNSRAG_SERVER_MEMORY")
    chosen = plan(tmp_path, "2GB", environ=env, hardware=hw)
    assert (chosen.budget, chosen.origin, chosen.remember) == (2 * GiB, "--memory", 2 * GiB)
    back = plan(tmp_path, "auto", environ=env, hardware=hw)
    assert (back.budget, back.origin, back.remember) == (6 * GiB, "auto", 0)
    with pytest.raises(ValidationError, match="TNSRAG_SERVER_MEMORY"):
        plan(tmp_path, environ={"TNSRAG_SERVER_MEMORY": "much"}, hardware=hw)
    with pytest.raises(ValidationError, match="--memory: 32GB exceeds the machine's RAM"):
        plan(tmp_path, "32GB", environ={}, hardware=hw)


_INITDB_CONF = """# -----------------------------
shared_buffers = 128MB\t\t\t# min 128kB
#work_mem = 4MB
max_wal_size = 1GB
min_wal_size = 80MB
"""


def test_the_settings_file_is_included_first_so_the_users_own_settings_win(tmp_path: Path) -> None:
    (tmp_path / "postgresql.conf").write_text(_INITDB_CONF)
    chosen = plan(tmp_path, "1GB", environ={}, hardware=(24 * GiB, 4))
    assert write_config(tmp_path, chosen) is True
    main = (tmp_path / "postgresql.conf").read_text()
    lines = [line for line in main.splitlines() if line and not line.startswith("#")]
    # The include comes before every setting of postgresql.conf; initdb's own lines for the
    # sizes it sets are commented out, others (min_wal_size) stay.
    assert lines[0] == "include_if_exists = 'tnsrag.conf'"
    assert lines[1:] == ["min_wal_size = 80MB"]
    conf = (tmp_path / memory.CONF_FILE).read_text()
    assert "shared_buffers = '1GB'" in conf and "max_parallel_maintenance_workers = '2'" in conf
    assert memory.configured(tmp_path) == {"budget": GiB, "budget_from": "--memory", "ram": 24 * GiB, "cpus": 4}
    assert json.loads((tmp_path / memory.CHOICE_FILE).read_text()) == {"memory": GiB}
    # Written again from the remembered budget: no setting changed, the include is not added twice.
    assert write_config(tmp_path, plan(tmp_path, environ={}, hardware=(24 * GiB, 4))) is False
    assert (tmp_path / "postgresql.conf").read_text() == main
    # --memory auto forgets the remembered budget.
    write_config(tmp_path, plan(tmp_path, "auto", environ={}, hardware=(24 * GiB, 4)))
    assert json.loads((tmp_path / memory.CHOICE_FILE).read_text()) == {"memory": "auto"}
    assert plan(tmp_path, environ={}, hardware=(24 * GiB, 4)).origin == "auto"
    assert "shared_buffers = '6GB'" in (tmp_path / memory.CONF_FILE).read_text()


def test_an_hnsw_build_borrows_up_to_half_of_a_large_page_cache_for_its_graph() -> None:
    from tnsrag_db._indexes.vector.hnsw import build_memory_mb

    # A graph that fits the session's setting builds with that setting (an operator's larger one stays).
    assert build_memory_mb(50, current_mb=64, shared_buffers_mb=128) == 64
    assert build_memory_mb(2600, current_mb=4096, shared_buffers_mb=128) == 4096
    # Stock server (128 MB cache): raised to the graph's need, at most 2 GB.
    assert build_memory_mb(900, current_mb=64, shared_buffers_mb=128) == 900
    assert build_memory_mb(2523, current_mb=64, shared_buffers_mb=128) == 2048
    # A sized server (6 GB cache, the embedded server on a 24 GiB machine) holds a 1M x 384-d graph.
    assert build_memory_mb(2523, current_mb=753, shared_buffers_mb=6026) == 2523
    assert build_memory_mb(9000, current_mb=753, shared_buffers_mb=6026) == 3013
