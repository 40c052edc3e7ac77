"""Retrieval quality of every strategy *by name*, as users get them, on two judged collections.

Users build strategies by name (``tnsrag query --strategy NAME``, MCP ``search``,
``TnsragRetriever(store, strategy=NAME)``): :func:`tnsrag_db._strategies.registry.build_strategy`.
This benchmark evaluates each of the eight that way, next to the parts they are
assembled from (BM25 alone and the two-stream hybrid of BM25 and vector search, by the
default fusion rule and by the SPI's RRF), with the shipped embedding model.

Collections:

* ``cranfield``: ``../shared/data/cranfield`` (1,400 aeronautics abstracts, 225 queries,
  graded judgements), each abstract one flat entry (title and text);
* ``stdlib``: a known-item collection over real source files nobody here wrote: the
  Python standard library's ``json``, ``email``, ``asyncio``, ``http``, ``logging`` and
  ``urllib`` packages, ingested as a user would (:class:`~tnsrag_db._loaders.FileLoader`,
  one folder tree). Each query is the first sentence of a public function's or class's
  docstring; the relevant entry is the chunk holding its ``def`` / ``class`` line (the
  name itself is removed from the query). 200 queries, chosen deterministically.
* ``debian``: a known-item collection of natural-language paraphrases: the installed
  Debian packages' long descriptions (``/var/lib/dpkg/status``; those whose text is
  unique and at least 15 words) are the entries, each package's one-line synopsis is a
  query, its long description the relevant entry. The synopsis says in a few words what
  the long text explains (``commandline package manager`` for apt's paragraph about
  apt-get, apt-cache...), so the words differ more than in ``stdlib``. The set depends
  on what the machine has installed (639 entries, 300 queries on the one measured).

With ``--multi-query-bases`` it also ranks RM3 expansion over vector search and over
BM25 alone, the alternatives to the hybrid base that multi_query by name uses.

* ``cacm``: ``../shared/data/cacm`` (3,204 Communications of the ACM abstracts, 52 judged
  queries), each record one flat entry (title, abstract and authors);
* ``manpages``: a known-item collection over the installed section-1 manual pages
  (``/usr/share/man/man1``): each page's DESCRIPTION section (roff markup stripped, at
  most 300 words; pages whose text is unique and at least 15 words, 2,000 chosen
  deterministically) is an entry, its NAME line's one-line summary (``list directory
  contents``) the query, the page the relevant entry (300 queries). Like ``debian``, the
  summary paraphrases what the text explains, in other words and other registers.

Per row: nDCG@10, recall@100 and MRR@10 with 95 % bootstrap intervals, and against
``keyword`` the difference and a paired randomisation test
(:func:`tnsrag_db.evaluation.evaluate_strategies`).

Usage::

    python -m bench.by_name [--url URL] [--collection cranfield|stdlib|debian|cacm|manpages|all] [--reuse] [--context] [--weights K:V ...] [--corpus-prefix P] [--json]

Without ``--url`` (or ``TNSRAG_DATABASE_URL``) the embedded server of ``connect()`` is
used, with the corpora ``bench_byname_<collection>``.
"""

from __future__ import annotations

import argparse
import ast
import gzip
import json
import os
import random
import re
import sysconfig
from pathlib import Path

from bench._common import fusion_weights
from bench.cranfield import DEFAULT_DATA, load_documents, load_judgements, load_queries, shipped_model
from tnsrag_db import evaluation
from tnsrag_db._indexes.bm25 import BM25Index
from tnsrag_db._indexes.vector import VectorMemoryStore
from tnsrag_db._loaders import FileLoader
from tnsrag_db._store.store import Store, connect
from tnsrag_db._strategies.base import RAGStrategy
from tnsrag_db._strategies.compose import STRATEGY_NAMES
from tnsrag_db._strategies.hybrid import HybridRAGStrategy
from tnsrag_db._strategies.registry import build_strategy
from tnsrag_db._types import MemoryEntry
from tnsrag_db.embeddings import ContextualEmbedding
from tnsrag_db.evaluation import Query

STDLIB_PACKAGES = ("json", "email", "asyncio", "http", "logging", "urllib")
#: The judged collections' folder: ``../shared/data`` beside the checkout, or ``TNSRAG_BENCH_DATA``.
DATA_ROOT = Path(os.environ.get("TNSRAG_BENCH_DATA", DEFAULT_DATA.parent))
CRANFIELD_DATA = DATA_ROOT / "cranfield"
CACM_DATA = DATA_ROOT / "cacm"
MAN_DIR = Path("/usr/share/man/man1")
MAN_PAGES = 2_000
MAN_QUERIES = 300
COLLECTIONS = ("cranfield", "stdlib", "debian", "cacm", "manpages")
DPKG_STATUS = "/var/lib/dpkg/status"
DEBIAN_QUERIES = 300
STDLIB_QUERIES = 200


def _refresh(store: Store) -> None:
    with store.session.autocommit() as conn:
        conn.execute("ANALYZE entries")
        conn.execute("ANALYZE bm25_postings")


def load_cranfield(store: Store, reuse: bool) -> tuple[list[Query], dict[str, dict[str, int]]]:
    data = CRANFIELD_DATA
    documents = load_documents(data)
    if not (reuse and store.count() == len(documents)):
        store.clear()
        store.add_all(documents)
        _refresh(store)
    return load_queries(data), load_judgements(data)


def _stdlib_root() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


def _first_sentence(doc: str) -> str:
    text = " ".join(doc.strip().split("\n\n")[0].split())
    match = re.match(r"(.+?[.!?])(\s|$)", text)
    return match.group(1) if match else text


def stdlib_queries(entries: list[MemoryEntry]) -> tuple[list[Query], dict[str, dict[str, int]]]:
    """Known-item queries: a public definition's docstring sentence -> the chunk defining it."""
    root = _stdlib_root()
    by_path: dict[str, list[MemoryEntry]] = {}
    for entry in entries:
        by_path.setdefault(entry.id.split("#", 1)[0], []).append(entry)
    candidates: list[tuple[str, str, str]] = []  # (query text, relevant id, key)
    for rel, chunks in sorted(by_path.items()):
        path = root / rel
        if path.suffix != ".py" or not path.is_file():
            continue
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"))
        except (SyntaxError, UnicodeDecodeError):
            continue
        lines = path.read_text(encoding="utf-8").splitlines()
        for node in ast.walk(tree):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                continue
            if node.name.startswith("_"):
                continue
            doc = ast.get_docstring(node)
            if not doc:
                continue
            sentence = _first_sentence(doc)
            sentence = re.sub(rf"\b{re.escape(node.name)}\b", " ", sentence)
            if len(sentence.split()) < 5:
                continue
            header = lines[node.lineno - 1].strip()
            holders = [c.id for c in chunks if header in c.content]
            if len(holders) != 1:
                continue
            candidates.append((" ".join(sentence.split()), holders[0], f"{rel}:{node.name}"))
    rng = random.Random(7)
    rng.shuffle(candidates)
    seen: set[str] = set()
    queries: list[Query] = []
    qrels: dict[str, dict[str, int]] = {}
    for text, relevant, _ in candidates:
        if text in seen:
            continue
        seen.add(text)
        qid = str(len(queries) + 1)
        queries.append(Query(qid, text, "stdlib"))
        qrels[qid] = {relevant: 1}
        if len(queries) == STDLIB_QUERIES:
            break
    return queries, qrels


def load_stdlib(store: Store, reuse: bool) -> tuple[list[Query], dict[str, dict[str, int]]]:
    root = _stdlib_root()
    loader = FileLoader(*(root / p for p in STDLIB_PACKAGES), base_dir=root)
    entries = list(loader.load())
    if not (reuse and store.count() == len(entries)):
        store.clear()
        store.add_all(entries)
        _refresh(store)
    return stdlib_queries(entries)


def dpkg_descriptions() -> list[tuple[str, str, str]]:
    """``(package, synopsis, long description)`` of every installed package with a description,
    in the order of dpkg's status file."""
    text = Path(DPKG_STATUS).read_text(encoding="utf-8", errors="replace")
    found: list[tuple[str, str, str]] = []
    for block in text.split("\n\n"):
        name = re.search(r"^Package: (.+)$", block, re.M)
        desc = re.search(r"^Description: (.*)\n((?: .*\n?)*)", block, re.M)
        if not name or not desc:
            continue
        lines = [line[1:] for line in desc.group(2).splitlines()]
        body = " ".join("" if line.strip() == "." else line.strip() for line in lines).strip()
        found.append((name.group(1).strip(), desc.group(1).strip(), body))
    return found


def debian_packages() -> list[tuple[str, str, str]]:
    """``(package, synopsis, long description)`` of the installed packages whose long text is
    unique and at least 15 words."""
    found = dpkg_descriptions()
    counts: dict[str, int] = {}
    for _, _, body in found:
        counts[body] = counts.get(body, 0) + 1
    return [p for p in found if p[2] and counts[p[2]] == 1 and len(p[2].split()) >= 15]


def load_debian(store: Store, reuse: bool) -> tuple[list[Query], dict[str, dict[str, int]]]:
    packages = debian_packages()
    entries = [MemoryEntry(name, body) for name, _, body in packages]
    if not (reuse and store.count() == len(entries)):
        store.clear()
        store.add_all(entries)
        _refresh(store)
    chosen = [p for p in packages if len(p[1].split()) >= 3]
    random.Random(7).shuffle(chosen)
    queries = [Query(str(n), synopsis, DPKG_STATUS) for n, (_, synopsis, _) in enumerate(chosen[:DEBIAN_QUERIES], 1)]
    qrels = {str(n): {name: 1} for n, (name, _, _) in enumerate(chosen[:DEBIAN_QUERIES], 1)}
    return queries, qrels


def _cacm_records(path: Path) -> list[tuple[str, dict[str, str]]]:
    """``(number, {field letter: text})`` of each ``.I`` record of a SMART file."""
    records: list[tuple[str, dict[str, str]]] = []
    for block in re.split(r"^\.I ", path.read_text(encoding="utf-8", errors="replace"), flags=re.M)[1:]:
        number, _, rest = block.partition("\n")
        fields: dict[str, str] = {}
        for part in re.split(r"^\.(?=[A-Z]\s*$)", rest, flags=re.M):
            letter, _, text = part.partition("\n")
            if letter.strip():
                fields[letter.strip()] = " ".join(text.split())
        records.append((str(int(number.strip())), fields))
    return records


def cacm_documents() -> list[MemoryEntry]:
    """The CACM records as entries ``<number>``: title, abstract and authors."""
    return [MemoryEntry(n, "\n".join(f[k] for k in ("T", "W", "A") if f.get(k)))
            for n, f in _cacm_records(CACM_DATA / "cacm.all")]


def load_cacm(store: Store, reuse: bool) -> tuple[list[Query], dict[str, dict[str, int]]]:
    documents = cacm_documents()
    if not (reuse and store.count() == len(documents)):
        store.clear()
        store.add_all(documents)
        _refresh(store)
    qrels: dict[str, dict[str, int]] = {}
    for line in (CACM_DATA / "qrels.text").read_text(encoding="utf-8").splitlines():
        parts = line.split()
        if len(parts) >= 2:
            qrels.setdefault(str(int(parts[0])), {})[str(int(parts[1]))] = 1
    queries = [Query(n, f["W"], str(CACM_DATA / "query.text")) for n, f in _cacm_records(CACM_DATA / "query.text")
               if n != "0" and f.get("W") and n in qrels]
    return queries, qrels


_ROFF_TEXT_MACROS = {"B", "I", "BR", "IR", "RB", "BI", "IB", "RI", "SM", "SB", "IP", "TP", "HP", "Nm", "Nd", "Ar",
                     "Fl", "Xr", "Pa", "Em", "Sy", "Op", "Dq", "Qq", "Ql"}


def _roff_text(lines: list[str]) -> str:
    """The words of roff source lines: text lines and the text macros' arguments, escapes removed."""
    out: list[str] = []
    for line in lines:
        if line.startswith((".\\\"", "'\\\"")):
            continue
        if line.startswith((".", "'")):
            macro, _, args = line[1:].partition(" ")
            if macro.strip() not in _ROFF_TEXT_MACROS:
                continue
            line = args.replace('"', " ")
        line = re.sub(r"\\f(\[[^]]*\]|\(..|.)", "", line)
        line = re.sub(r"\\[(*](\(..|\[[^]]*\]|..)", " ", line)
        line = line.replace("\\-", "-").replace("\\e", "\\").replace("\\&", "")
        line = re.sub(r"\\.", " ", line)
        out.append(line)
    return " ".join(" ".join(out).split())


def man_pages() -> list[tuple[str, str, str]]:
    """``(page, summary, description)`` of the section-1 manual pages with a NAME summary of
    at least 3 words and a unique DESCRIPTION of at least 15 words (at most 300 kept),
    :data:`MAN_PAGES` of them chosen deterministically."""
    found: list[tuple[str, str, str]] = []
    for path in sorted(MAN_DIR.glob("*.gz")):
        try:
            source = gzip.decompress(path.read_bytes()).decode("utf-8", errors="replace")
        except (OSError, EOFError):
            continue
        sections: dict[str, list[str]] = {}
        current = ""
        for line in source.splitlines():
            head = re.match(r'^\.(?:SH|Sh)\s+"?([^"]*)"?\s*$', line)
            if head:
                current = head.group(1).strip().upper()
                continue
            if current:
                sections.setdefault(current, []).append(line)
        name = _roff_text(sections.get("NAME", []))
        summary = re.split(r"\s+-+\s+", name, maxsplit=1)
        description = _roff_text(sections.get("DESCRIPTION", [])).split()
        if len(summary) != 2 or len(summary[1].split()) < 3 or len(description) < 15:
            continue
        found.append((path.name.removesuffix(".gz"), summary[1].strip(), " ".join(description[:300])))
    counts: dict[str, int] = {}
    for _, _, text in found:
        counts[text] = counts.get(text, 0) + 1
    unique = [p for p in found if counts[p[2]] == 1]
    random.Random(7).shuffle(unique)
    return sorted(unique[:MAN_PAGES])


def load_manpages(store: Store, reuse: bool) -> tuple[list[Query], dict[str, dict[str, int]]]:
    pages = man_pages()
    entries = [MemoryEntry(name, text) for name, _, text in pages]
    if not (reuse and store.count() == len(entries)):
        store.clear()
        store.add_all(entries)
        _refresh(store)
    chosen = list(pages)
    random.Random(7).shuffle(chosen)
    chosen = chosen[:MAN_QUERIES]
    queries = [Query(str(n), summary, str(MAN_DIR)) for n, (_, summary, _) in enumerate(chosen, 1)]
    qrels = {str(n): {name: 1} for n, (name, _, _) in enumerate(chosen, 1)}
    return queries, qrels


def load_collection(store: Store, name: str, reuse: bool) -> tuple[list[Query], dict[str, dict[str, int]],
                                                                    list[MemoryEntry]]:
    """Load collection ``name`` into ``store`` (unless ``reuse`` finds it complete): its
    queries, judgements and entries."""
    if name == "cranfield":
        queries, qrels = load_cranfield(store, reuse)
        return queries, qrels, load_documents(CRANFIELD_DATA)
    if name == "debian":
        queries, qrels = load_debian(store, reuse)
        return queries, qrels, [MemoryEntry(n, body) for n, _, body in debian_packages()]
    if name == "cacm":
        queries, qrels = load_cacm(store, reuse)
        return queries, qrels, cacm_documents()
    if name == "manpages":
        queries, qrels = load_manpages(store, reuse)
        return queries, qrels, [MemoryEntry(n, text) for n, _, text in man_pages()]
    queries, qrels = load_stdlib(store, reuse)
    root = _stdlib_root()
    return queries, qrels, list(FileLoader(*(root / p for p in STDLIB_PACKAGES), base_dir=root).load())


def embed_all(store: Store, entries_of: list[MemoryEntry], context: bool = False) -> None:
    """Fill the shipped model's plain space, then with ``context`` its contextual one
    (which by-name strategies then search: the newest complete space)."""
    model, why = shipped_model()
    if model is None:
        raise SystemExit(f"this benchmark needs the shipped model: {why}")
    VectorMemoryStore(store, model).add_all(entries_of)
    if context:
        VectorMemoryStore(store, ContextualEmbedding(model)).add_all(entries_of)


def run_collection(url: str | None, name: str, args: argparse.Namespace) -> evaluation.EvaluationReport:
    with connect(url, corpus=f"{args.corpus_prefix}{name}", auto_migrate=True if url else None) as store:
        queries, qrels, entries = load_collection(store, name, args.reuse)
        embed_all(store, entries, args.context)
        model, _ = shipped_model()
        assert model is not None
        strategies: dict[str, RAGStrategy] = {
            "keyword": build_strategy("keyword", store),
            "hybrid (two streams)": HybridRAGStrategy(BM25Index(store), VectorMemoryStore(store, model)),
        }
        if args.context:
            strategies["hybrid (two streams, context)"] = HybridRAGStrategy(
                BM25Index(store), VectorMemoryStore(store, ContextualEmbedding(model)))
        for keyword_weight, vector_weight in args.weights:  # the fusion's weights, measured
            label = f"{keyword_weight:g}:{vector_weight:g}"
            strategies[f"hybrid (two streams, {label})"] = HybridRAGStrategy(
                BM25Index(store), VectorMemoryStore(store, model), weights=(keyword_weight, vector_weight))
            if args.context:
                strategies[f"hybrid (two streams, context, {label})"] = HybridRAGStrategy(
                    BM25Index(store), VectorMemoryStore(store, ContextualEmbedding(model)),
                    weights=(keyword_weight, vector_weight))
        strategies |= {
            "hybrid (two streams, RRF)": HybridRAGStrategy(BM25Index(store), VectorMemoryStore(store, model),
                                                           fusion="rrf"),
        }
        for strategy in STRATEGY_NAMES:
            if strategy != "keyword" and (not args.only or strategy in args.only):
                strategies[strategy] = build_strategy(strategy, store)
        if args.multi_query_bases:  # the choice of multi_query's base, measured
            from tnsrag_db._strategies.expansion import QueryExpansion, load_expander
            from tnsrag_db._strategies.multi_query import MultiQueryRAGStrategy

            for base in ("vector", "keyword"):
                strategies[f"multi_query over {base}"] = MultiQueryRAGStrategy(
                    build_strategy(base, store), load_expander("rm3", store=store), QueryExpansion.RM3, "rm3", 3)
        report = evaluation.evaluate_strategies(strategies, queries, qrels, baseline="keyword",
                                                resamples=args.resamples, permutations=args.resamples)
        if args.json:
            print(json.dumps({"collection": name, **report.to_dict(per_query=False)}, indent=2))
        else:
            print(f"{name}: {store.count()} entries, {len(queries)} queries, {report.queries} judged")
            print(report.table())
        return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", default=os.environ.get("TNSRAG_DATABASE_URL"))
    parser.add_argument("--collection", choices=(*COLLECTIONS, "all"), default="all")
    parser.add_argument("--only", nargs="*", default=None, help="strategies by name to run (default: all)")
    parser.add_argument("--reuse", action="store_true", help="reuse loaded corpora of the same size")
    parser.add_argument("--multi-query-bases", action="store_true",
                        help="also rank multi_query (RM3) over vector and over keyword search")
    parser.add_argument("--corpus-prefix", default="bench_byname_", help="corpus names: PREFIX<collection>")
    parser.add_argument("--context", action="store_true",
                        help="also fill the contextual space (<model>+context1), which by-name strategies then use")
    parser.add_argument("--weights", nargs="*", default=[], metavar="K:V", type=fusion_weights,
                        help="also rank the two-stream hybrid (and with --context the contextual one) with these "
                             "keyword:vector weights of its score fusion")
    parser.add_argument("--resamples", type=int, default=2_000)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    names = COLLECTIONS if args.collection == "all" else (args.collection,)
    for name in names:
        run_collection(args.url, name, args)


if __name__ == "__main__":
    main()
