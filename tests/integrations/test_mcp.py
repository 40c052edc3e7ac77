"""The MCP server: every tool through the SDK's own client, in-process and over stdio.

Bad arguments must come back as tool errors naming the argument, and the server must
keep serving afterwards.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest
from mcp import Client
from mcp.types import CallToolResult
from sqlalchemy.engine import URL

from tests.integrations._mcp_client import server_parameters
from tnsrag_db.integrations.mcp import READ_TOOLS, WRITE_TOOLS, create_server
from tnsrag_db.store.store import Store

T = TypeVar("T")
ALL_TOOLS = set(READ_TOOLS) | set(WRITE_TOOLS)


def run(session: Callable[[Client], Awaitable[T]], server: Any) -> T:
    async def main() -> T:
        async with Client(server, read_timeout_seconds=120) as client:
            return await session(client)
    return asyncio.run(main())


def text(result: CallToolResult) -> str:
    return " ".join(getattr(c, "text", "") for c in result.content)


async def ok(client: Client, tool: str, args: dict[str, Any]) -> Any:
    result = await client.call_tool(tool, args)
    assert not result.is_error, text(result)
    return result.structured_content


async def error(client: Client, tool: str, args: dict[str, Any]) -> str:
    result = await client.call_tool(tool, args)
    assert result.is_error, f"{tool}({args}) succeeded: {result.structured_content}"
    return text(result)


def test_every_tool_in_process(store: Store) -> None:
    async def session(client: Client) -> None:
        assert {t.name for t in (await client.list_tools()).tools} == ALL_TOOLS
        a = await ok(client, "remember", {"content": "Agents keep shared memory in PostgreSQL.", "id": "a",
                                          "metadata": {"team": "red"}, "source": "notes.md", "tier": "EPISODIC",
                                          "timestamp": "2026-01-31T12:00:00Z"})
        assert a == {"id": "a", "status": "inserted"}
        assert (await ok(client, "remember", {"content": "Agents keep shared memory in PostgreSQL.", "id": "a",
                                              "metadata": {"team": "red"}, "source": "notes.md", "tier": "EPISODIC",
                                              "timestamp": "2026-01-31T12:00:00Z"}))["status"] == "unchanged"
        generated = await ok(client, "remember", {"content": "Vectors live in pgvector.", "parent_id": "a"})
        assert len(generated["id"]) == 36 and generated["status"] == "inserted"  # a UUID
        assert store.get(generated["id"]).parent_id == "a"  # type: ignore[union-attr]
        assert await ok(client, "link", {"src": "a", "dst": generated["id"], "relation": "see-also",
                                         "weight": 2.0}) == {"src": "a", "dst": generated["id"],
                                                             "relation": "see-also", "status": "inserted"}
        found = await ok(client, "search", {"query": "shared memory", "strategy": "keyword", "top_k": 5,
                                            "filters": {"team": "red"}})
        assert found["strategy"] == "keyword"
        [doc] = found["documents"]
        assert doc["id"] == "a" and doc["tier"] == "EPISODIC" and doc["source"] == "notes.md"
        assert doc["metadata"] == {"team": "red"} and doc["score"] > 0
        for strategy in ("vector", "hybrid", "graph", "hierarchical", "temporal", "reasoning", "multi_query"):
            docs = (await ok(client, "search", {"query": "memory", "strategy": strategy}))["documents"]
            assert all(d["id"] in {"a", generated["id"]} for d in docs), strategy
        assert (await ok(client, "search", {"query": "memory", "min_score": 1e9}))["documents"] == []
        stats = await ok(client, "stats", {})
        assert (stats["corpus"], stats["entries"], stats["edges"]) == (store.corpus, 2, 1)
        assert stats["by_tier"] == {"EPISODIC": 1, "SEMANTIC": 1}
        corpora = (await ok(client, "corpora", {}))["corpora"]
        assert {"name": store.corpus, "entries": 2} in [{k: c[k] for k in ("name", "entries")} for c in corpora]
        assert await ok(client, "forget", {"filters": {"team": "red"}}) == {"deleted": 1}
        assert await ok(client, "forget", {"id": generated["id"]}) == {"deleted": 1}
        assert await ok(client, "forget", {"id": generated["id"]}) == {"deleted": 0}
        assert store.count() == 0

    run(session, create_server(store))


BAD_SEARCHES = [
    ({"query": 3}, "query"),                                    # wrong type (the SDK's schema)
    ({"query": "   "}, "query"),                                # blank (the library)
    ({"query": "x\x00y"}, "query"),                             # NUL (the library's message)
    ({"query": "x", "strategy": "nearest"}, "strategy"),        # unknown strategy: the registry's message
    ({"query": "x", "filters": "tier=SEMANTIC"}, "filters"),    # not a map
    ({"query": "x", "filters": {"tier": 1}}, "filters"),        # not a string map
    ({"query": "x", "filters": {"tier": " "}}, "filters"),      # blank value (the library)
    ({"query": "x", "top_k": 101}, "top_k"),                    # over the cap
    ({"query": "x", "top_k": 0}, "top_k"),
    ({"query": "x", "min_score": "high"}, "min_score"),
]


def test_bad_arguments_are_tool_errors_naming_the_argument(store: Store) -> None:
    async def session(client: Client) -> None:
        await ok(client, "remember", {"content": "kept", "id": "kept"})
        for args, name in BAD_SEARCHES:
            message = await error(client, "search", args)
            assert name in message, (args, message)
        assert "unknown strategy 'nearest'; available: vector, keyword" in await error(
            client, "search", {"query": "x", "strategy": "nearest"})
        assert "metadata filter value for 'tier' must be a non-blank string" in await error(
            client, "search", {"query": "x", "filters": {"tier": " "}})
        for args, name in [({"content": "x", "tier": "LONG"}, "tier"), ({"content": " "}, "content"),
                           ({"content": "x", "metadata": {"tier": "x"}}, "metadata"),
                           ({"content": "x", "metadata": {"n": 1}}, "metadata"),
                           ({"content": "x", "timestamp": "yesterday"}, "timestamp"),
                           ({"content": "x", "timestamp": "2999-01-01T00:00:00Z"}, "timestamp"),
                           ({"content": "x", "parent_id": "missing"}, "parent_id"),
                           ({"content": "x", "id": " "}, "id")]:
            message = await error(client, "remember", args)
            assert f"'{name}'" in message or name in message, (args, message)
        assert "unknown memory tier 'LONG'" in await error(client, "remember", {"content": "x", "tier": "LONG"})
        assert "missing" in await error(client, "link", {"src": "kept", "dst": "missing"})
        assert "weight" in await error(client, "link", {"src": "kept", "dst": "kept2", "weight": "heavy"})
        assert "exactly one" in await error(client, "forget", {})
        assert "exactly one" in await error(client, "forget", {"id": "kept", "filters": {"a": "b"}})
        # Nothing was written by the failed calls, and the server still serves.
        assert store.count() == 1
        assert [d["id"] for d in (await ok(client, "search", {"query": "kept"}))["documents"]] == ["kept"]

    run(session, create_server(store))


def test_read_only_server_registers_no_write_tool(store: Store) -> None:
    async def session(client: Client) -> None:
        assert {t.name for t in (await client.list_tools()).tools} == set(READ_TOOLS)
        assert "remember" in await error(client, "remember", {"content": "x"})
        # Nothing created the corpus (reads never do): stats says so instead of inventing zeros.
        assert "does not exist" in await error(client, "stats", {})

    run(session, create_server(store, read_only=True))


def test_max_top_k_is_in_the_schema(store: Store) -> None:
    async def session(client: Client) -> dict[str, Any]:
        [search] = [t for t in (await client.list_tools()).tools if t.name == "search"]
        assert "top_k" in await error(client, "search", {"query": "x", "top_k": 8})
        return search.input_schema

    schema = run(session, create_server(store, max_top_k=7))
    assert schema["properties"]["top_k"]["maximum"] == 7
    assert schema["properties"]["strategy"]["enum"][:3] == ["vector", "keyword", "hybrid"]
    assert schema["required"] == ["query"]
    with pytest.raises(ValueError, match="max_top_k"):
        create_server(store, max_top_k=0)


def test_stdio_server_spawned_by_the_cli(store: Store, db_url: URL) -> None:
    """``tnsrag mcp --url ...`` as a subprocess, through the SDK's stdio client: list, call each tool."""
    url = db_url.render_as_string(hide_password=False)

    async def session(client: Client) -> None:
        assert {t.name for t in (await client.list_tools()).tools} == ALL_TOOLS
        first = await ok(client, "remember", {"content": "Agents share one corpus over MCP.", "id": "m1",
                                              "metadata": {"kind": "fact"}})
        second = await ok(client, "remember", {"content": "The corpus lives in PostgreSQL."})
        assert first["status"] == second["status"] == "inserted"
        assert (await ok(client, "link", {"src": "m1", "dst": second["id"]}))["status"] == "inserted"
        docs = (await ok(client, "search", {"query": "corpus", "strategy": "hybrid",
                                            "filters": {"kind": "fact"}}))["documents"]
        assert [(d["id"], d["metadata"]) for d in docs] == [("m1", {"kind": "fact"})]
        assert (await ok(client, "stats", {}))["entries"] == 2
        assert store.corpus in [c["name"] for c in (await ok(client, "corpora", {}))["corpora"]]
        for args, name in BAD_SEARCHES[:6]:
            assert name in await error(client, "search", args)
        assert await ok(client, "forget", {"id": "m1"}) == {"deleted": 1}
        assert (await ok(client, "stats", {}))["entries"] == 1

    run(session, server_parameters(url, store.corpus))
    assert [e.id for e in store.iter_entries()] != ["m1"] and store.count() == 1


def test_stdio_read_only(store: Store, db_url: URL) -> None:
    url = db_url.render_as_string(hide_password=False)

    async def session(client: Client) -> list[str]:
        return sorted(t.name for t in (await client.list_tools()).tools)

    assert run(session, server_parameters(url, store.corpus, "--read-only")) == sorted(READ_TOOLS)


@pytest.mark.slow
def test_four_agents_through_their_own_servers(store: Store, db_url: URL, tmp_path: Path) -> None:
    """4 client processes, each with its own server process, write and search one corpus at
    once; afterwards every client sees every write, and the counts are exact."""
    writers, per_writer = 4, 12
    url = db_url.render_as_string(hide_password=False)
    script = Path(__file__).with_name("_mcp_client.py")
    procs = [subprocess.Popen([sys.executable, str(script), url, store.corpus, str(w), str(writers),
                               str(per_writer), str(tmp_path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, cwd=Path(__file__).parents[2]) for w in range(writers)]
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err[-3000:]
        results.append(json.loads(out.strip().splitlines()[-1]))
    ids = {r["worker"]: sorted(r["ids"]) for r in results}
    assert all(len(set(v)) == per_writer for v in ids.values())
    for r in results:
        assert r["stats"]["entries"] == writers * per_writer + 1  # plus the one shared id
        assert r["stats"]["edges"] == writers * (per_writer - 1)
        assert r["seen"] == {f"w{w}": ids[w] for w in range(writers)}  # every write of every writer
    assert store.count() == writers * per_writer + 1
    assert store.get("shared-note") is not None


def test_http_transport(store: Store, db_url: URL) -> None:
    """``tnsrag mcp --transport http``: Streamable HTTP on a loopback port, through the SDK's client."""
    import socket
    import time

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    url = db_url.render_as_string(hide_password=False)
    params = server_parameters(url, store.corpus, "--transport", "http", "--port", str(port))
    server = subprocess.Popen([params.command, *params.args], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                              text=True)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert server.poll() is None, server.communicate()[1][-2000:]
                assert time.monotonic() < deadline, "the http server did not start"
                time.sleep(0.2)

        async def session(client: Client) -> None:
            assert {t.name for t in (await client.list_tools()).tools} == ALL_TOOLS
            assert (await ok(client, "remember", {"content": "Served over HTTP.", "id": "h1"}))["id"] == "h1"
            assert [d["id"] for d in (await ok(client, "search", {"query": "HTTP"}))["documents"]] == ["h1"]
            assert "query" in await error(client, "search", {"query": ""})

        run(session, f"http://127.0.0.1:{port}/mcp")
    finally:
        server.terminate()
        server.wait(timeout=30)
    assert store.count() == 1
