"""The inputs of an evaluation: TREC qrels, queries as TSV or JSONL, and the checks that
queries, judgements and the corpus belong together."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from tnsrag_db._errors import EvaluationDataError
from tnsrag_db._validate import is_int

if TYPE_CHECKING:
    from tnsrag_db._store.store import Store

__all__ = ["Qrels", "Query", "check_corpus", "check_judged", "load_qrels", "load_queries"]

#: ``{query id: {document id: grade}}``; grades ≤ 0 are judged not relevant.
Qrels = Mapping[str, Mapping[str, int]]


@dataclass(frozen=True, slots=True)
class Query:
    """A query: its ``id``, ``text`` and where it was read (``path`` and 1-based ``line``,
    ``None`` when built in code)."""

    id: str
    text: str
    path: str | None = None
    line: int | None = None

    @property
    def where(self) -> str:
        """``path:line``, or ``query <id>`` for a query built in code."""
        return f"{self.path}:{self.line}" if self.path is not None else f"query {self.id!r}"


def _read_lines(path: str | Path) -> list[str]:
    p = Path(path)
    try:
        return p.read_text(encoding="utf-8-sig").splitlines()
    except FileNotFoundError:
        raise EvaluationDataError(f"{p}: no such file", path=str(p)) from None
    except IsADirectoryError:
        raise EvaluationDataError(f"{p}: is a directory, not a file", path=str(p)) from None
    except UnicodeDecodeError as exc:
        raise EvaluationDataError(f"{p}: not UTF-8 text ({exc.reason} at byte {exc.start})", path=str(p)) from None
    except OSError as exc:
        raise EvaluationDataError(f"{p}: cannot read ({exc.strerror})", path=str(p)) from None


def load_qrels(path: str | Path) -> dict[str, dict[str, int]]:
    """Read TREC qrels: ``query-id iteration doc-id grade`` per line (blank lines and
    lines starting with ``#`` are skipped).

    Raises :class:`EvaluationDataError` naming ``path:line`` for a line without exactly
    four fields, a grade that is not an integer or a document judged twice for one query
    with different grades, and for a file without any judgement.
    """
    qrels: dict[str, dict[str, int]] = {}
    for n, line in enumerate(_read_lines(path), start=1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        parts = line.split()
        if len(parts) != 4:
            raise EvaluationDataError(
                f"{path}:{n}: expected 4 fields 'query-id iteration doc-id grade', got {len(parts)}: {line.strip()!r}",
                path=str(path), line=n)
        qid, _, doc, grade_text = parts
        try:
            grade = int(grade_text)
        except ValueError:
            raise EvaluationDataError(f"{path}:{n}: grade {grade_text!r} is not an integer",
                                      path=str(path), line=n) from None
        grades = qrels.setdefault(qid, {})
        if doc in grades and grades[doc] != grade:
            raise EvaluationDataError(f"{path}:{n}: document {doc!r} judged again for query {qid!r} "
                                      f"with another grade ({grades[doc]} before, {grade} here)",
                                      path=str(path), line=n)
        grades[doc] = grade
    if not qrels:
        raise EvaluationDataError(f"{path}: no judgements", path=str(path))
    return qrels


_ID_KEYS = ("id", "_id", "query_id", "qid")
_TEXT_KEYS = ("text", "query")


def load_queries(path: str | Path) -> list[Query]:
    """Read queries as TSV (``query-id<TAB>text``) or JSONL (an object per line with an
    id under ``id``, ``_id``, ``query_id`` or ``qid`` and the text under ``text`` or
    ``query``); JSONL when the first non-blank line starts with ``{``. Blank lines are
    skipped.

    Raises :class:`EvaluationDataError` naming ``path:line`` for a line that does not
    parse, a missing or blank id or text, a repeated id, and for a file without queries.
    """
    lines = _read_lines(path)
    first = next((line.lstrip() for line in lines if line.strip()), "")
    jsonl = first.startswith("{")
    queries: list[Query] = []
    seen: dict[str, int] = {}
    for n, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        where = f"{path}:{n}"
        if jsonl:
            qid, text = _jsonl_query(line, str(path), n)
        else:
            qid, sep, text = line.partition("\t")
            if not sep:
                raise EvaluationDataError(f"{where}: expected 'query-id<TAB>text' (no tab found)",
                                          path=str(path), line=n)
            qid, text = qid.strip(), " ".join(text.split())
        if not qid:
            raise EvaluationDataError(f"{where}: blank query id", path=str(path), line=n)
        if not text:
            raise EvaluationDataError(f"{where}: query {qid!r} has no text", path=str(path), line=n)
        if qid in seen:
            raise EvaluationDataError(f"{where}: query id {qid!r} repeated (first at line {seen[qid]})",
                                      path=str(path), line=n)
        seen[qid] = n
        queries.append(Query(qid, text, str(path), n))
    if not queries:
        raise EvaluationDataError(f"{path}: no queries", path=str(path))
    return queries


def _jsonl_query(line: str, path: str, n: int) -> tuple[str, str]:
    where = f"{path}:{n}"
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as exc:
        raise EvaluationDataError(f"{where}: invalid JSON ({exc.msg})", path=path, line=n) from None
    if not isinstance(obj, dict):
        raise EvaluationDataError(f"{where}: expected a JSON object", path=path, line=n)
    qid = next((obj[k] for k in _ID_KEYS if k in obj), None)
    text = next((obj[k] for k in _TEXT_KEYS if k in obj), None)
    if not (isinstance(qid, str) or is_int(qid)):
        raise EvaluationDataError(f"{where}: no query id (a string or integer under {', '.join(_ID_KEYS)})",
                                  path=path, line=n)
    if not isinstance(text, str):
        raise EvaluationDataError(f"{where}: no query text (a string under {' or '.join(_TEXT_KEYS)})",
                                  path=path, line=n)
    return str(qid).strip(), " ".join(text.split())


def check_judged(queries: Sequence[Query], qrels: Qrels) -> None:
    """Raise :class:`EvaluationDataError` at the first query without any judgement in ``qrels``
    (query ids numbered differently from the qrels are the usual cause), saying how many lack one."""
    missing = [q for q in queries if q.id not in qrels]
    if missing:
        first = missing[0]
        raise EvaluationDataError(
            f"{first.where}: query {first.id!r} has no judgements in the qrels "
            f"({len(missing)} of {len(queries)} queries have none; do the query ids match the qrels'?)",
            path=first.path, line=first.line)


def check_corpus(store: Store, qrels: Qrels, queries: Sequence[Query]) -> int:
    """How many of the documents judged relevant for ``queries`` are entries of ``store``'s
    corpus; raises :class:`EvaluationDataError` when none is (the wrong corpus, or
    document ids that differ from the entry ids)."""
    wanted = sorted({d for q in queries for d, g in qrels.get(q.id, {}).items() if g > 0})
    found = 0
    for start in range(0, len(wanted), 1000):
        found += len(store.get_many(wanted[start:start + 1000]))
    if wanted and not found:
        raise EvaluationDataError(
            f"none of the {len(wanted)} documents judged relevant is an entry of corpus {store.corpus!r} "
            f"(e.g. {wanted[0]!r}); ingest the collection with its document ids as entry ids")
    return found
