"""The CACM collection: 3,204 abstracts, 52 judged queries and the citation links between them.

Data: ``<repo>/../shared/data/cacm`` (the SMART files ``cacm.all``, ``query.text``,
``qrels.text``). :func:`load_cacm` returns what a benchmark needs:

* entries ``<n>`` (the ``.I`` number) with content ``title`` + newline + abstract (``.T``
  and ``.W``; about half the records have a title only);
* edges: the direct citation links of the ``.X`` lines (type 4). Each link is listed in
  both records' ``.X`` sections without a direction, so each becomes two edges, one
  each way (relation ``cites``, weight 1); a record's links to itself are dropped.
  6,165 links, 12,330 edges;
* the 52 queries (of 64; ``.W``) that have judgements, and the judgements
  ``{query: {entry: 1}}`` (the numbers in ``qrels.text`` are zero-padded: read as
  integers).

Bibliographic coupling and co-citation (``.X`` types 5 and 6) are derived from the
same citations and are not edges here.
"""

from __future__ import annotations

from pathlib import Path

from tnsrag_db._indexes.graph import Edge
from tnsrag_db._types import MemoryEntry
from tnsrag_db.evaluation import Query

DEFAULT_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "cacm"
#: The relation of the citation edges.
RELATION = "cites"
_DIRECT_LINK = "4"


def _records(path: Path) -> list[tuple[str, dict[str, list[str]]]]:
    """``(number, {field: lines})`` per ``.I`` record of a SMART file."""
    records: list[tuple[str, dict[str, list[str]]]] = []
    field = ""
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        if line.startswith(".I "):
            records.append((line[3:].strip(), {}))
            field = ""
        elif len(line) == 2 and line.startswith("."):
            field = line[1]
            records[-1][1].setdefault(field, [])
        elif records and field:
            records[-1][1][field].append(line)
    return records


def _text(fields: dict[str, list[str]], name: str) -> str:
    return " ".join(" ".join(fields.get(name, [])).split())


def load_cacm(data: Path = DEFAULT_DATA) -> tuple[list[MemoryEntry], list[Edge], list[Query],
                                                   dict[str, dict[str, int]]]:
    """``(entries, edges, queries, qrels)`` of the collection in ``data`` (see the module doc)."""
    entries: list[MemoryEntry] = []
    links: set[tuple[str, str]] = set()
    for number, fields in _records(data / "cacm.all"):
        title, abstract = _text(fields, "T"), _text(fields, "W")
        entries.append(MemoryEntry(number, f"{title}\n{abstract}" if abstract else title))
        for line in fields.get("X", []):
            parts = line.split()
            if len(parts) == 3 and parts[1] == _DIRECT_LINK and parts[0] != number:
                links.add((min(parts[0], number, key=int), max(parts[0], number, key=int)))
    edges = [Edge(a, b, RELATION) for pair in sorted(links, key=lambda p: (int(p[0]), int(p[1])))
             for a, b in (pair, pair[::-1])]
    path = data / "query.text"
    queries = [Query(number, _text(fields, "W"), str(path)) for number, fields in _records(path)
               if number != "0" and _text(fields, "W")]
    qrels: dict[str, dict[str, int]] = {}
    for line in (data / "qrels.text").read_text(encoding="utf-8").splitlines():
        parts = line.split()
        if len(parts) >= 2:
            qrels.setdefault(str(int(parts[0])), {})[str(int(parts[1]))] = 1
    judged = [q for q in queries if q.id in qrels]
    return entries, edges, judged, qrels
