"""The MCP server: every tool through the SDK's own client, in-process and over stdio.

Bad arguments must come back as tool errors naming the argument, and the server must
keep serving afterwards. Every call a test makes is checked against the tool's published
input schema (jsonschema): a call the schema accepts must not fail on its types, and one
it refuses must be refused.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import psycopg
import pytest
from mcp import Client
from mcp.types import CallToolResult
from sqlalchemy.engine import URL

from tests.integrations._mcp_client import conforms, server_parameters
from tnsrag_db._indexes.graph import GraphStore
from tnsrag_db._store.store import Store
from tnsrag_db.integrations.mcp import READ_TOOLS, WRITE_TOOLS, create_server

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
    assert await conforms(client, tool, args), f"{tool}({args}) does not conform to the published schema"
    result = await client.call_tool(tool, args)
    assert not result.is_error, text(result)
    if result.structured_content is not None:  # the text block is the same JSON (the MCP specification's compatibility copy)
        assert [json.loads(text(result))] == [result.structured_content]
    return result.structured_content


async def error(client: Client, tool: str, args: dict[str, Any]) -> str:
    await conforms(client, tool, args)  # the schema itself must be valid JSON Schema
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


def test_link_states_the_edges_validity_and_search_follows_it_then_only(store: Store) -> None:
    """An edge ``link`` bounds is walked by a graph search only at the instants it is valid
    (``as_of`` included); an empty interval or a bound without a zone is an error naming its
    argument, and writes nothing."""
    async def session(client: Client) -> None:
        for entry_id, content in (("a", "zebra stripes"), ("b", "a horse in a stable")):
            await ok(client, "remember", {"content": content, "id": entry_id})
        assert (await ok(client, "link", {"src": "a", "dst": "b", "valid_until": "2020-01-01T00:00:00Z"}))[
            "status"] == "inserted"
        search = {"query": "zebra", "strategy": "graph"}
        assert [d["id"] for d in (await ok(client, "search", search))["documents"]] == ["a"]
        assert (await ok(client, "link", {"src": "a", "dst": "b", "valid_from": "2020-01-01T00:00:00Z"}))[
            "status"] == "updated"
        assert [d["id"] for d in (await ok(client, "search", search))["documents"]] == ["a", "b"]
        later = {**search, "as_of": "2999-01-01T00:00:00Z"}
        assert [d["id"] for d in (await ok(client, "search", later))["documents"]] == ["a", "b"]
        assert "'valid_until'" in await error(client, "link", {"src": "b", "dst": "a", "valid_from": "2030-01-01T00:00:00Z",
                                                                "valid_until": "2020-01-01T00:00:00Z"})
        assert "'valid_from'" in await error(client, "link", {"src": "b", "dst": "a", "valid_from": "2030-01-01"})
        assert GraphStore(store).count() == 1

    run(session, create_server(store))


def test_consolidate_merges_duplicates_and_their_ids_keep_answering(store: Store) -> None:
    async def session(client: Client) -> None:
        for key in ("a", "b", "c"):
            text_ = "The build server is in room 4." if key != "c" else "Lunch is at noon."
            await ok(client, "remember", {"content": text_, "id": key, "tier": "WORKING"})
        await ok(client, "link", {"src": "c", "dst": "b"})
        dry = await ok(client, "consolidate", {"tier": "WORKING", "dry_run": True})
        assert dry == {"pairs": 1, "merged": 0, "linked": 0, "dry_run": True, "more_groups": 0,
                       "groups": [{"survivor": "a", "others": ["b"], "similarity": 1.0}]}
        assert store.count() == 3
        done = await ok(client, "consolidate", {"tier": "WORKING", "threshold": 0.99})
        assert (done["merged"], done["dry_run"]) == (1, False) and store.count() == 2
        assert store.get("b").id == "a"  # type: ignore[union-attr]
        # The alias still names the entry for a link; a second call finds nothing.
        assert (await ok(client, "link", {"src": "b", "dst": "c"}))["status"] == "inserted"
        assert (await ok(client, "consolidate", {"tier": "WORKING"}))["groups"] == []
        assert "threshold" in await error(client, "consolidate", {"tier": "WORKING", "threshold": 1.5})
        assert "tier" in await error(client, "consolidate", {"tier": "LONG"})

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
        assert "invalid argument 'strategy': \"nearest\" is not one of: vector, keyword, hybrid" in await error(
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
        assert "invalid argument 'tier': \"LONG\" is not one of: WORKING, EPISODIC" in await error(
            client, "remember", {"content": "x", "tier": "LONG"})
        assert "missing" in await error(client, "link", {"src": "kept", "dst": "missing"})
        assert "weight" in await error(client, "link", {"src": "kept", "dst": "kept2", "weight": "heavy"})
        assert "exactly one" in await error(client, "forget", {})
        assert "exactly one" in await error(client, "forget", {"id": "kept", "filters": {"a": "b"}})
        # Nothing was written by the failed calls, and the server still serves.
        assert store.count() == 1
        assert [d["id"] for d in (await ok(client, "search", {"query": "kept"}))["documents"]] == ["kept"]

    run(session, create_server(store))


def test_remember_cannot_close_a_parent_loop(store: Store) -> None:
    """remember checks the hierarchy as the hierarchy index does: a parent that is the
    entry's own descendant is refused, naming parent_id, and nothing changes. (Before, only
    the parent's existence was checked, and the loop was written.)"""
    async def session(client: Client) -> None:
        await ok(client, "remember", {"content": "the root note", "id": "root"})
        await ok(client, "remember", {"content": "a child note", "id": "child", "parent_id": "root"})
        message = await error(client, "remember", {"content": "the root note", "id": "root", "parent_id": "child"})
        assert "parent_id" in message and "cycle" in message and "root" in message, message
        assert store.get("root").parent_id is None  # type: ignore[union-attr]
        assert (await ok(client, "remember", {"content": "a second child", "id": "child2",
                                              "parent_id": "child"}))["status"] == "inserted"

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


def test_remember_without_id_is_idempotent_as_declared(store: Store) -> None:
    """remember declares idempotentHint: the same call twice (a host's retry) stores one entry."""
    note = {"content": "The build cache lives on the second disk.", "metadata": {"team": "ops"}, "tier": "EPISODIC",
            "timestamp": "2026-01-31T12:00:00Z"}

    async def session(client: Client) -> None:
        [remember] = [t for t in (await client.list_tools()).tools if t.name == "remember"]
        assert remember.annotations is not None and remember.annotations.idempotent_hint is True
        first = await ok(client, "remember", note)
        again = await ok(client, "remember", note)
        assert again == {"id": first["id"], "status": "unchanged"}
        # The same instant in another zone is the same call; no timestamp at all, too, twice.
        same = await ok(client, "remember", {**note, "timestamp": "2026-01-31T13:00:00+01:00"})
        assert same["id"] == first["id"]
        bare = await ok(client, "remember", {"content": "No timestamp."})
        assert await ok(client, "remember", {"content": "No timestamp."}) == {"id": bare["id"], "status": "unchanged"}
        # Anything else that differs is another memory.
        other = await ok(client, "remember", {**note, "metadata": {"team": "dev"}})
        assert other["id"] not in (first["id"], bare["id"])
        assert len(first["id"]) == 36  # a UUID, as before

    run(session, create_server(store))
    assert store.count() == 3


STRICT_REFUSALS = [  # the SDK's pydantic validation would coerce or ignore each of these
    ("search", {"query": "x", "top_k": True}, "top_k"),
    ("search", {"query": "x", "top_k": "3"}, "top_k"),
    ("search", {"query": "x", "top_k": 2.5}, "top_k"),
    ("search", {"query": "x", "min_score": True}, "min_score"),
    ("search", {"query": "x", "min_score": "0.5"}, "min_score"),
    ("search", {"query": "x", "filters": '{"team": "red"}'}, "filters"),  # JSON in a string
    ("search", {"query": "x", "topk": 3}, "topk"),                         # misspelled: unknown
    ("search", {"top_k": 3}, "query"),                                     # missing
    ("stats", {"verbose": True}, "verbose"),
    ("corpora", {"all": True}, "all"),
    ("remember", {"content": "x", "metadata": '{"a": "b"}'}, "metadata"),
    ("remember", {"content": "x", "ids": "a"}, "ids"),
    ("remember", {"content": True}, "content"),
    ("forget", {"id": 7}, "id"),
    ("link", {"src": "a", "dst": "b", "weight": True}, "weight"),
    ("link", {"src": "a", "dst": "b", "weight": "2"}, "weight"),
]


def test_tool_schemas_are_strict(store: Store) -> None:
    """No coercion and no unknown argument: the server refuses what its published schema refuses."""
    async def session(client: Client) -> None:
        await ok(client, "remember", {"content": "kept memory", "id": "a", "metadata": {"team": "red"}})
        for tool in (await client.list_tools()).tools:
            assert tool.input_schema["additionalProperties"] is False, tool.name
        for tool, args, name in STRICT_REFUSALS:
            assert not await conforms(client, tool, args), (tool, args)
            message = await error(client, tool, args)
            assert repr(name) in message, (tool, args, message)
        assert "unknown argument 'topk' (arguments: query, strategy, top_k, filters, min_score, as_of)" in await error(
            client, "search", {"query": "x", "topk": 3})
        assert "invalid argument 'top_k': true is not of type 'integer'" in await error(
            client, "search", {"query": "x", "top_k": True})
        assert "invalid argument 'filters'['team']: 1 is not of type 'string'" in await error(
            client, "search", {"query": "x", "filters": {"team": 1}})
        # What JSON Schema accepts still works: an integral number is an integer, an int a number.
        assert [d["id"] for d in (await ok(client, "search", {"query": "kept", "top_k": 3.0, "min_score": 0,
                                                              "strategy": "keyword"}))["documents"]] == ["a"]
        assert store.count() == 1

    run(session, create_server(store))


def test_missing_corpus_is_a_tool_error_for_search_and_stats(make_store: Callable[..., Store]) -> None:
    """A corpus that does not exist: search and stats both say so, naming it; an existing empty
    one answers an empty list and zeros. Other corpora are named only with all_corpora."""
    other = make_store()
    other.add(__import__("tnsrag_db").MemoryEntry("o1", "another team's memory"))
    missing = make_store()

    async def session(client: Client) -> list[str]:
        messages = [await error(client, "search", {"query": "memory"}), await error(client, "stats", {})]
        assert missing.corpus not in [c["name"] for c in (await ok(client, "corpora", {}))["corpora"]]
        return messages

    for message in run(session, create_server(missing, read_only=True)):
        assert f"corpus {missing.corpus!r} does not exist" in message
        assert other.corpus not in message and "which this server does not name" in message
    for message in run(session, create_server(missing, read_only=True, all_corpora=True)):
        assert f"corpus {missing.corpus!r} does not exist (corpora here: " in message and other.corpus in message
    assert "`remember` creates it" in run(session, create_server(missing))[0]

    other.delete("o1")  # exists, empty

    async def empty(client: Client) -> None:
        assert (await ok(client, "search", {"query": "memory"}))["documents"] == []
        assert (await ok(client, "stats", {}))["entries"] == 0

    run(empty, create_server(other, read_only=True))


def test_corpora_names_only_the_served_corpus_unless_asked(make_store: Callable[..., Store]) -> None:
    import tnsrag_db

    mine, theirs = make_store(), make_store()
    mine.add(tnsrag_db.MemoryEntry("m", "mine"))
    theirs.add(tnsrag_db.MemoryEntry("t", "theirs"))

    async def session(client: Client) -> tuple[list[str], str]:
        [tool] = [t for t in (await client.list_tools()).tools if t.name == "corpora"]
        return [c["name"] for c in (await ok(client, "corpora", {}))["corpora"]], tool.description or ""

    names, description = run(session, create_server(mine, read_only=True))
    assert names == [mine.corpus] and "This server's corpus" in description
    names, description = run(session, create_server(mine, read_only=True, all_corpora=True))
    assert {mine.corpus, theirs.corpus} <= set(names) and "Every corpus" in description


def test_server_reports_the_package_version(store: Store) -> None:
    from importlib.metadata import version

    async def session(client: Client) -> str | None:
        return None if client.server_info is None else client.server_info.version

    assert run(session, create_server(store)) == version("tnsrag-db") != ""


def test_search_content_is_bounded_and_marked_truncated(store: Store) -> None:
    long_text = "Archive notes. " + "x" * 60_000

    async def session(client: Client) -> dict[str, Any]:
        await ok(client, "remember", {"content": long_text, "id": "long"})
        await ok(client, "remember", {"content": "Archive notes, short.", "id": "short"})
        found = await client.call_tool("search", {"query": "archive notes", "strategy": "keyword"})
        assert not found.is_error and found.structured_content is not None
        # One text block: the structured content's JSON (the MCP specification's compatibility copy), nothing more.
        assert len(found.content) == 1 and json.loads(text(found)) == found.structured_content
        assert len(text(found)) < 2 * 100 + 2000
        return {d["id"]: d for d in found.structured_content["documents"]}

    docs = run(session, create_server(store, max_content_chars=100))
    assert docs["long"]["content"] == long_text[:100] and docs["long"]["truncated"] is True
    assert docs["short"]["content"] == "Archive notes, short." and docs["short"]["truncated"] is False

    async def unbounded(client: Client) -> list[Any]:
        return (await ok(client, "search", {"query": "archive notes", "strategy": "keyword"}))["documents"]  # type: ignore[no-any-return]

    assert {d["id"]: len(d["content"]) for d in run(unbounded, create_server(store, max_content_chars=None))} == {
        "long": len(long_text), "short": 21}
    assert {d["id"]: len(d["content"]) for d in run(unbounded, create_server(store))} == {"long": 4000, "short": 21}
    for bad in (0, -1, True, 2.5):
        with pytest.raises(ValueError, match="max_content_chars"):
            create_server(store, max_content_chars=bad)  # type: ignore[arg-type]


def _spawn(url: str, corpus: str, *extra: str) -> subprocess.Popen[bytes]:
    params = server_parameters(url, corpus, *extra)
    return subprocess.Popen([params.command, *params.args], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=params.env)


def test_stdio_answers_an_unparsable_line_with_a_parse_error(store: Store, db_url: URL) -> None:
    """Raw lines on the server's stdin (the SDK's client cannot send broken ones): each bad line
    gets a JSON-RPC error with id null, and the server goes on serving."""
    url = db_url.render_as_string(hide_password=False)
    ping = b'{"jsonrpc": "2.0", "id": 9, "method": "ping"}\n'
    lines = [b'{"jsonrpc": "2.0", "id": 1, "method": "ping"\n',                    # malformed JSON
             b'{"jsonrpc": "2.0", "id": 2, "method": "ping", "params": {"x": "\\ud800"}}\n',  # lone surrogate
             b'"\\ud800"\n',
             b'\xff\xfe\n',                                                          # not UTF-8
             b'\n',                                                                  # blank: skipped
             b'{"jsonrpc": "2.0", "id": 3, "method": 5}\n',                         # JSON, not a message
             b'[1, 2]\n',
             ping]
    server = _spawn(url, store.corpus, "--read-only")
    try:
        out, err = server.communicate(b"".join(lines), timeout=120)
    finally:
        if server.poll() is None:
            server.kill()
    answers = [json.loads(line) for line in out.decode().splitlines()]
    assert [(a["id"], a.get("error", {}).get("code")) for a in answers] == [
        (None, -32700), (None, -32700), (None, -32700), (None, -32700), (3, -32600), (None, -32600), (9, None)], err
    assert answers[-1]["result"] == {}
    assert "Parse error" in answers[0]["error"]["message"] and "UTF-8" in answers[3]["error"]["message"]


def test_stdio_first_stderr_line_names_database_and_corpus(store: Store, db_url: URL,
                                                            monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from tnsrag_db._cli.mcp import database_line

    secret = db_url.set(password="s3cret-pw")
    server = _spawn(secret.render_as_string(hide_password=False), store.corpus, "--read-only")
    try:
        _out, err = server.communicate(b"", timeout=120)
    finally:
        if server.poll() is None:
            server.kill()
    first = err.decode().splitlines()[0]
    assert first.startswith(f"tnsrag mcp: corpus {store.corpus!r} (read-only), schema 'tnsrag', database "
                            f"postgresql://"), first
    assert f"/{db_url.database}" in first and "s3cret-pw" not in first
    assert "s3cret-pw" not in database_line("postgresql://u:pw1@h/db?password=pw2&sslmode=require", "s", "c", False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    assert database_line(None, "tnsrag", "team", False) == (
        f"tnsrag mcp: corpus 'team' (read-write), schema 'tnsrag', database the embedded server at "
        f"{tmp_path / 'tnsrag_db' / 'pg18'}")


def test_stdio_embedding_on_a_new_corpus_creates_its_space(make_store: Callable[..., Store], db_url: URL) -> None:
    """`tnsrag mcp --embedding hash` on a corpus that does not exist yet: the server starts, creates
    the corpus and the hash space, and a later server without --embedding uses that space."""
    from tnsrag_db._indexes.vector.spaces import list_spaces

    fresh = make_store()
    url = db_url.render_as_string(hide_password=False)

    async def session(client: Client) -> None:
        assert (await ok(client, "search", {"query": "anything"}))["documents"] == []
        assert (await ok(client, "stats", {}))["entries"] == 0
        await ok(client, "remember", {"content": "Hash vectors are enough here.", "id": "h"})
        found = await ok(client, "search", {"query": "hash vectors", "strategy": "vector"})
        assert [d["id"] for d in found["documents"]] == ["h"]

    run(session, server_parameters(url, fresh.corpus, "--embedding", "hash"))
    assert [(s.provider, s.vectors) for s in list_spaces(fresh)] == [("tnsrag-hash-128", 1)]

    async def later(client: Client) -> list[str]:
        found = await ok(client, "search", {"query": "hash vectors", "strategy": "vector"})
        return [d["id"] for d in found["documents"]]

    assert run(later, server_parameters(url, fresh.corpus, "--read-only")) == ["h"]


def test_stdio_content_and_corpora_options(make_store: Callable[..., Store], db_url: URL) -> None:
    import tnsrag_db

    mine, theirs = make_store(), make_store()
    mine.add(tnsrag_db.MemoryEntry("long", "Archive notes. " + "y" * 500))
    theirs.add(tnsrag_db.MemoryEntry("t", "theirs"))
    url = db_url.render_as_string(hide_password=False)

    async def session(client: Client) -> tuple[dict[str, Any], list[str]]:
        [doc] = (await ok(client, "search", {"query": "archive", "strategy": "keyword"}))["documents"]
        return doc, [c["name"] for c in (await ok(client, "corpora", {}))["corpora"]]

    doc, names = run(session, server_parameters(url, mine.corpus, "--read-only", "--max-content-chars", "50"))
    assert (len(doc["content"]), doc["truncated"], names) == (50, True, [mine.corpus])
    doc, names = run(session, server_parameters(url, mine.corpus, "--read-only", "--max-content-chars", "0",
                                                "--all-corpora"))
    assert (len(doc["content"]), doc["truncated"]) == (515, False) and theirs.corpus in names


#: ``tnsrag mcp`` in a child whose import system reports the modules named in argv[1] (comma
#: separated) as not installed, as in an installation without the [mcp] extra.
_WITHOUT_MODULES = """
import sys

class Missing:
    def __init__(self, names):
        self.names = names

    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in self.names:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, Missing(set(sys.argv.pop(1).split(","))))
from tnsrag_db._cli import main
main()
"""


@pytest.mark.parametrize("missing", ["mcp", "jsonschema", "jsonschema,mcp"])
def test_cli_without_the_extra_says_what_to_install_in_one_line(missing: str) -> None:
    run = subprocess.run([sys.executable, "-c", _WITHOUT_MODULES, missing, "mcp", "--read-only"],
                         capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert run.returncode == 1, run.stderr
    assert run.stdout == ""
    [line] = run.stderr.splitlines()  # no traceback, no database line: nothing was opened
    assert line.startswith("error: tnsrag mcp needs the [mcp] extra") and "pip install 'tnsrag-db[mcp]'" in line
    assert f"module {missing.split(',')[0]!r} is not installed" in line  # the integration imports jsonschema first


def _bare_environment(home: Path, **extra: str) -> dict[str, str]:
    """What the SDK's stdio client passes to a server it starts (HOME, PATH and a few more),
    with ``home`` as HOME and this checkout importable."""
    from mcp.client.stdio import get_default_environment

    env = {**get_default_environment(), "HOME": str(home), **extra}
    if "PYTHONPATH" in os.environ:
        env["PYTHONPATH"] = os.environ["PYTHONPATH"]
    return env


def test_read_only_without_a_database_creates_nothing(tmp_path: Path) -> None:
    """An MCP host's stripped environment (no TNSRAG_DATABASE_URL, no XDG_DATA_HOME) and a HOME
    without a cluster: `--read-only` fails saying where it looked and how to point it elsewhere,
    and leaves no data directory, cluster or keeper behind."""
    home = tmp_path / "home"
    home.mkdir()
    run = subprocess.run([sys.executable, "-c", "from tnsrag_db._cli import main; main()", "mcp", "--read-only"],
                         env=_bare_environment(home), capture_output=True, text=True, timeout=120,
                         stdin=subprocess.DEVNULL)
    assert run.returncode == 1, run.stderr
    where = home / ".local" / "share" / "tnsrag_db" / "pg18"
    first, error_line = run.stderr.splitlines()
    assert first.endswith(f"database the embedded server at {where}")
    assert error_line.startswith(f"error: no embedded database at {where} (HOME={home}, XDG_DATA_HOME unset), "
                                 "and --read-only creates none"), error_line
    assert "--url" in error_line and "TNSRAG_DATABASE_URL" in error_line and "XDG_DATA_HOME=DIR" in error_line
    assert list(home.iterdir()) == []  # no data directory, no keeper files


@pytest.mark.slow
def test_read_only_on_an_embedded_cluster_without_the_schema_creates_none(tmp_path: Path) -> None:
    """A cluster that is there but holds no tnsrag schema: `--read-only` starts the server
    (that creates nothing) and fails naming the missing schema, which it does not create."""

    from tnsrag_db._store.embedded import keeper

    share = tmp_path / "share"
    data_dir = share / "tnsrag_db" / "pg18"
    env = {**_bare_environment(tmp_path), "XDG_DATA_HOME": str(share)}
    if os.environ.get("TNSRAG_SERVER_MEMORY"):
        env["TNSRAG_SERVER_MEMORY"] = os.environ["TNSRAG_SERVER_MEMORY"]
    cli = [sys.executable, "-c", "from tnsrag_db._cli import main; main()"]
    try:
        started = subprocess.run([*cli, "server", "start", "--json"], env=env, capture_output=True, text=True,
                                 timeout=300)
        assert started.returncode == 0, started.stderr
        url = json.loads(started.stdout)["url"]
        run = subprocess.run([*cli, "mcp", "--read-only"], env=env, capture_output=True, text=True, timeout=120,
                             stdin=subprocess.DEVNULL)
        assert run.returncode == 1, run.stderr
        assert run.stderr.splitlines()[-1].startswith(
            "error: schema 'tnsrag' does not exist in this database (a read creates none)"), run.stderr
        with psycopg.connect(url, autocommit=True) as conn:
            assert conn.execute("SELECT count(*) FROM pg_namespace WHERE nspname = 'tnsrag'").fetchone() == (0,)
    finally:
        keeper.stop(data_dir, force=True)


def test_host_config_names_the_database_through_args_or_env(store: Store, db_url: URL, tmp_path: Path) -> None:
    """What docs/integrations.md tells an MCP host to do: the SDK's StdioServerParameters with
    --url in args, or TNSRAG_DATABASE_URL in env (merged over the SDK's bare environment)."""
    from mcp import StdioServerParameters

    import tnsrag_db

    store.add(tnsrag_db.MemoryEntry("cfg", "Hosts pass the database URL in their server config."))
    url = db_url.render_as_string(hide_password=False)
    home = tmp_path / "home"
    home.mkdir()
    cli = ["-c", "from tnsrag_db._cli import main; main()", "mcp", "--read-only", "--corpus", store.corpus]
    path_only = {k: v for k, v in _bare_environment(home).items() if k == "PYTHONPATH"}

    async def session(client: Client) -> list[str]:
        assert sorted(t.name for t in (await client.list_tools()).tools) == sorted(READ_TOOLS)
        found = await ok(client, "search", {"query": "server config", "strategy": "keyword"})
        return [d["id"] for d in found["documents"]]

    with pytest.MonkeyPatch.context() as env:  # the SDK copies HOME from this process: an empty one
        env.setenv("HOME", str(home))
        env.delenv("XDG_DATA_HOME")
        by_args = StdioServerParameters(command=sys.executable, args=[*cli, "--url", url], env=path_only)
        by_env = StdioServerParameters(command=sys.executable, args=cli,
                                       env={**path_only, "TNSRAG_DATABASE_URL": url})
        assert run(session, by_args) == run(session, by_env) == ["cfg"]
    assert not (home / ".local").exists()  # no embedded cluster (onnxruntime leaves its ~/.cache/Microsoft)


def test_remember_with_an_expiry_and_search_leaves_the_expired_out(store: Store) -> None:
    async def session(client: Client) -> None:
        live = await ok(client, "remember", {"content": "the zebra memo that lasts", "ttl_seconds": 3600})
        await ok(client, "remember", {"content": "the zebra memo that expired", "expires_at": "2020-01-01T00:00:00Z"})
        for strategy in ("keyword", "hybrid", "vector"):
            found = await ok(client, "search", {"query": "zebra memo", "strategy": strategy})
            assert [d["id"] for d in found["documents"]] == [live["id"]], strategy
        assert "ttl_seconds" in await error(client, "remember", {"content": "x", "ttl_seconds": -1})
        assert "expires_at" in await error(client, "remember", {"content": "x", "expires_at": "tomorrow"})
        assert "not both" in await error(client, "remember", {"content": "x", "ttl_seconds": 5,
                                                              "expires_at": "2999-01-01T00:00:00Z"})

    run(session, create_server(store))


def test_remember_with_a_validity_and_search_as_of(store: Store) -> None:
    store.set_history()

    async def session(client: Client) -> None:
        first = await ok(client, "remember", {"content": "the zebra memo, first draft", "id": "memo",
                                              "valid_from": "2020-01-01T00:00:00Z"})
        await ok(client, "remember", {"content": "the zebra memo that was", "valid_until": "2020-01-01T00:00:00Z"})
        between = store.read("SELECT clock_timestamp() AS t", {})[0].t.isoformat()
        await ok(client, "remember", {"content": "the zebra memo, second draft", "id": "memo"})
        for strategy in ("keyword", "hybrid", "vector"):
            now = await ok(client, "search", {"query": "zebra memo", "strategy": strategy})
            assert [d["content"] for d in now["documents"]] == ["the zebra memo, second draft"], strategy
            then = await ok(client, "search", {"query": "zebra memo", "strategy": strategy, "as_of": between})
            assert [d["content"] for d in then["documents"]] == ["the zebra memo, first draft"], strategy
        assert first["id"] == "memo"
        assert "as_of" in await error(client, "search", {"query": "zebra", "as_of": "yesterday"})
        assert "valid_from" in await error(client, "remember", {"content": "x", "valid_from": "soon"})
        assert "valid_until" in await error(client, "remember", {"content": "x", "valid_from": "2030-01-01T00:00:00Z",
                                                                  "valid_until": "2020-01-01T00:00:00Z"})

    run(session, create_server(store))
