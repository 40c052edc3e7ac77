"""One agent process of the concurrency test: its own ``tnsrag mcp`` server over stdio,
written to and searched through the SDK's client. Run as a script; prints JSON.

Not collected by pytest (the name does not start with ``test_``).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import jsonschema
from mcp import Client, StdioServerParameters

#: The published input schemas seen by each client (the server publishes them once).
_SCHEMAS: dict[int, tuple[Client, dict[str, dict[str, Any]]]] = {}


def server_parameters(url: str, corpus: str, *extra: str) -> StdioServerParameters:
    """``tnsrag mcp`` on ``url``/``corpus`` as a subprocess of this interpreter."""
    return StdioServerParameters(
        command=sys.executable,
        args=["-c", "from tnsrag_db._cli import main; main()", "mcp", "--url", url, "--corpus", corpus, *extra],
        env=dict(os.environ))


async def conforms(client: Client, tool: str, args: dict[str, Any]) -> bool:
    """Whether ``args`` conform to ``tool``'s input schema as ``client``'s server publishes it."""
    held = _SCHEMAS.get(id(client))
    if held is None or held[0] is not client:
        held = (client, {t.name: t.input_schema for t in (await client.list_tools()).tools})
        _SCHEMAS[id(client)] = held
    schema = held[1][tool] if tool in held[1] else {}
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema).is_valid(args)


async def _call(client: Client, tool: str, args: dict[str, Any]) -> Any:
    if not await conforms(client, tool, args):
        raise RuntimeError(f"{tool}({args}) does not conform to the published schema")
    result = await client.call_tool(tool, args)
    if result.is_error:
        raise RuntimeError(f"{tool} failed: {result.content}")
    return result.structured_content


async def _agent(url: str, corpus: str, worker: int, writers: int, per_writer: int, barrier: Path) -> dict[str, Any]:
    async with Client(server_parameters(url, corpus), read_timeout_seconds=120) as client:
        (barrier / f"ready-{worker}").touch()
        while len(list(barrier.glob("ready-*"))) < writers:  # start writing together
            await asyncio.sleep(0.05)
        ids = []
        for n in range(per_writer):
            out = await _call(client, "remember", {
                "content": f"note {n} from writer{worker} about shared agent memory",
                "metadata": {"writer": f"w{worker}"}, "id": f"w{worker}-{n}" if n % 2 else None})
            ids.append(out["id"])
            # Searches interleave with the other writers' writes.
            await _call(client, "search", {"query": "shared agent memory", "top_k": 3})
        for a, b in zip(ids, ids[1:]):
            await _call(client, "link", {"src": a, "dst": b, "relation": "next"})
        # The same id from every writer: one entry, last write wins.
        await _call(client, "remember", {"content": f"shared note by writer{worker}", "id": "shared-note"})
        (barrier / f"done-{worker}").touch()
        deadline = time.monotonic() + 120
        while len(list(barrier.glob("done-*"))) < writers:
            if time.monotonic() > deadline:
                raise TimeoutError("other writers did not finish")
            await asyncio.sleep(0.05)
        stats = await _call(client, "stats", {})
        seen = {}
        for other in range(writers):
            found = await _call(client, "search", {"query": "shared agent memory", "strategy": "keyword",
                                                    "top_k": 100, "filters": {"writer": f"w{other}"}})
            seen[f"w{other}"] = sorted(d["id"] for d in found["documents"])
        return {"worker": worker, "ids": ids, "stats": stats, "seen": seen}


def main() -> None:
    url, corpus, worker, writers, per_writer, barrier = sys.argv[1:7]
    result = asyncio.run(_agent(url, corpus, int(worker), int(writers), int(per_writer), Path(barrier)))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
