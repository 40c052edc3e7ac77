"""Declarative retrieval against the real database: every mode, loader metadata filtered
before top-K, reserved keys, de-duplication, on_failure, ingestion across processes, the
example role, and each embedding-provider discovery case through real entry points.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import multiprocessing
import sys
import threading
import uuid
from collections.abc import Callable, Iterator, Sequence
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.engine import URL

from tests._entrypoints import Installer, installer
from tnsrag_db._counts import IngestCounts
from tnsrag_db._db.pool import Pool
from tnsrag_db._errors import (
    ConfigurationError,
    DatabaseError,
    EmbeddingValidationError,
    ExecutionError,
    HierarchyError,
    ProviderBusyError,
    ProviderConfigurationError,
    ProviderTransportError,
    StrategyUnavailableError,
    TemporalValidationError,
)
from tnsrag_db._indexes.graph import GraphStore
from tnsrag_db._store.store import Store
from tnsrag_db._strategies.expansion import EXPANDER_ENTRY_POINT_GROUP
from tnsrag_db._strategies.navigation import NAVIGATOR_ENTRY_POINT_GROUP
from tnsrag_db._types import MemoryEntry, RetrievedDocument
from tnsrag_db.declarative import (
    OnFailure,
    RetrievalResult,
    RetrievalStrategy,
    bind_store,
    configure,
    ingest_sources,
    knowledge_source,
    reset_runtime,
    resolve_store,
    retrieval,
    retrieval_filters,
)
from tnsrag_db.embeddings import get_process_embedding, reset_process_embedding

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "support_agent.py"


@pytest.fixture(autouse=True)
def _fresh_runtime() -> Iterator[None]:
    reset_runtime()
    reset_process_embedding()
    yield
    reset_runtime()
    reset_process_embedding()


class ListLoader:
    """A custom SourceLoader over a fixed list; counts its loads."""

    def __init__(self, entries: Sequence[MemoryEntry], name: str = "list") -> None:
        self.entries = list(entries)
        self.name = name
        self.loads = 0

    def load(self) -> Iterator[MemoryEntry]:
        self.loads += 1
        yield from self.entries


def ids(result: RetrievalResult) -> list[str]:
    return [d.metadata["entryId"] for d in result.documents]


def echo_role(loader: ListLoader, store: Store, **options: Any) -> Any:
    """A role with one source and one action returning its RetrievalResult."""

    @knowledge_source(loader=loader)
    class Role:
        @retrieval(**options)
        def ask(self, question: str, *, retrieved: RetrievalResult) -> RetrievalResult:
            return retrieved

    bind_store(Role, store)
    return Role()


# -- the eight modes -------------------------------------------------------------------

DOCS = [
    MemoryEntry("manual", "Product manual", source="manual"),
    MemoryEntry("refunds", "Refunds: customers get a refund within 30 days of purchase.", source="manual",
                parent_id="manual"),
    MemoryEntry("refund-damaged", "A damaged item qualifies for a refund even after 30 days.", source="manual",
                parent_id="refunds"),
    MemoryEntry("passwords", "Reset a forgotten password from the sign-in page.", source="manual",
                parent_id="manual"),
    MemoryEntry("shipping", "Shipping takes three to five business days.", source="manual", parent_id="manual"),
]


@pytest.mark.parametrize("mode", [m for m in RetrievalStrategy if m not in (
    RetrievalStrategy.REASONING, RetrievalStrategy.MULTI_QUERY)])
def test_each_mode_retrieves_the_relevant_entry(store: Store, mode: RetrievalStrategy) -> None:
    if mode is RetrievalStrategy.GRAPH:
        # Ingest first, then relate the refund policy to its damaged-item exception.
        ingest_sources(echo_role(ListLoader(DOCS), store, strategy=mode).__class__)
    role = echo_role(ListLoader(DOCS), store, strategy=mode, top_k=2)
    if mode is RetrievalStrategy.GRAPH:
        GraphStore(store).add_edge("refunds", "refund-damaged")
    result = role.ask("refund within 30 days")
    assert result.ok and result.strategy is mode
    assert ids(result)[0] == "refunds"
    assert result.context.startswith("[1] Refunds: customers get a refund")
    if mode is RetrievalStrategy.HIERARCHICAL:
        # The hit, then its parent one level up (score decayed by 0.85).
        assert [(d.metadata["entryId"], d.metadata["depth"]) for d in result.documents] == [
            ("refunds", "0"), ("manual", "1")]
        assert result.documents[1].score == pytest.approx(result.documents[0].score * 0.85)
    if mode is RetrievalStrategy.GRAPH:
        assert "refund-damaged" in ids(result)


def test_reasoning_mode_descends_with_the_navigator(store: Store) -> None:
    role = echo_role(ListLoader(DOCS), store, strategy=RetrievalStrategy.REASONING, navigator="lexical",
                     navigator_model="lexical-bm25", top_k=1)
    result = role.ask("damaged item refund")
    assert ids(result) == ["refund-damaged"]
    assert json.loads(result.documents[0].metadata["path"]) == ["manual", "refunds", "refund-damaged"]


def test_multi_query_mode_expands_with_rm3(store: Store) -> None:
    role = echo_role(ListLoader(DOCS), store, strategy=RetrievalStrategy.MULTI_QUERY, expansion_mode="RM3",
                     expansion_model="rm3", max_expansions=1, top_k=3)
    result = role.ask("refund")
    assert result.ok and result.strategy is RetrievalStrategy.MULTI_QUERY
    assert {"refunds", "refund-damaged"} <= set(ids(result))


def test_temporal_mode_prefers_fresh_entries(store: Store) -> None:
    now = datetime.now(timezone.utc)
    docs = [MemoryEntry("old", "Refund policy for returns.", timestamp=now - timedelta(days=365)),
            MemoryEntry("new", "Refund policy for returns.", timestamp=now - timedelta(days=1))]
    role = echo_role(ListLoader(docs), store, strategy=RetrievalStrategy.TEMPORAL, deduplicate=False, top_k=2)
    assert ids(role.ask("refund policy")) == ["new", "old"]


def _vector_count(store: Store) -> int:
    with store.session.transaction() as conn:
        return int(conn.execute("SELECT count(*) FROM embeddings WHERE corpus = :c",
                                {"c": store.corpus}).scalar_one())


def test_hierarchical_mode_rejects_a_broken_hierarchy(store: Store) -> None:
    docs = [MemoryEntry("root", "refund root"), MemoryEntry("child", "refund text", parent_id="missing-parent")]
    role = echo_role(ListLoader(docs), store, strategy=RetrievalStrategy.HIERARCHICAL,
                     on_failure=OnFailure.CONTINUE_EMPTY)
    with pytest.raises(HierarchyError) as info:
        role.ask("refund")
    assert info.value.ids == ("child",) and "'child' -> 'missing-parent'" in str(info.value)
    # Checked inside the write's transaction: neither entries nor vectors were kept.
    assert store.count() == 0 and _vector_count(store) == 0


CYCLE = [MemoryEntry("root", "refund root"), MemoryEntry("a", "refund a", parent_id="b"),
         MemoryEntry("b", "refund b", parent_id="a")]


@pytest.mark.parametrize("mode", [RetrievalStrategy.HIERARCHICAL, RetrievalStrategy.REASONING])
@pytest.mark.parametrize(("docs", "bad"), [
    ([MemoryEntry("root", "refund root"), MemoryEntry("orphan", "refund", parent_id="nowhere")], ("orphan",)),
    (CYCLE, ("a", "b")),
], ids=["missing-parent", "cycle"])
def test_hierarchy_modes_write_nothing_for_a_broken_hierarchy(store: Store, mode: RetrievalStrategy,
                                                              docs: list[MemoryEntry], bad: tuple[str, ...]) -> None:
    loader = ListLoader(docs)
    role = echo_role(loader, store, strategy=mode, navigator_model="lexical-bm25")
    with pytest.raises(HierarchyError) as info:
        role.ask("refund")
    assert info.value.ids == bad
    assert store.count() == 0 and _vector_count(store) == 0
    # Not cached as done: the next call loads and checks again.
    with pytest.raises(HierarchyError):
        role.ask("refund")
    assert loader.loads == 2 and store.count() == 0


def test_a_hierarchy_action_checks_the_ingestion_of_the_whole_role(store: Store) -> None:
    @knowledge_source(loader=ListLoader(CYCLE))
    class Role:
        @retrieval(RetrievalStrategy.KEYWORD)
        def find(self, question: str, *, retrieved: RetrievalResult) -> RetrievalResult:
            return retrieved

        @retrieval(RetrievalStrategy.REASONING, navigator_model="lexical-bm25")
        def browse(self, question: str, *, retrieved: RetrievalResult) -> RetrievalResult:
            return retrieved

    bind_store(Role, store)
    # The KEYWORD action shares the role's ingestion, so it is checked for REASONING too.
    with pytest.raises(HierarchyError):
        Role().find("refund")
    with pytest.raises(HierarchyError):
        ingest_sources(Role)
    with pytest.raises(HierarchyError):
        ingest_sources(Role, embed=True)
    assert store.count() == 0 and _vector_count(store) == 0


def test_a_role_without_hierarchy_modes_ingests_a_broken_hierarchy(store: Store) -> None:
    role = echo_role(ListLoader(CYCLE), store, strategy=RetrievalStrategy.KEYWORD, top_k=3)
    assert set(ids(role.ask("refund"))) == {"root", "a", "b"}


def _dated(offset: timedelta) -> list[MemoryEntry]:
    now = datetime.now(timezone.utc)
    return [MemoryEntry("past", "Refund policy for returns.", timestamp=now - timedelta(days=2)),
            MemoryEntry("ahead", "Refund policy for exchanges.", timestamp=now + offset)]


def test_temporal_mode_rejects_a_future_timestamp_at_ingestion(store: Store) -> None:
    loader = ListLoader(_dated(timedelta(days=3)))
    role = echo_role(loader, store, strategy=RetrievalStrategy.TEMPORAL, on_failure=OnFailure.CONTINUE_EMPTY)
    with pytest.raises(TemporalValidationError, match=r"entry 'ahead': timestamp .* is more than 0:05:00 ahead"):
        role.ask("refund policy")
    assert store.count() == 0 and _vector_count(store) == 0
    with pytest.raises(TemporalValidationError):
        ingest_sources(type(role), embed=True)
    assert loader.loads == 2 and store.count() == 0


def test_temporal_mode_accepts_a_timestamp_within_the_default_skew(store: Store) -> None:
    role = echo_role(ListLoader(_dated(timedelta(minutes=2))), store, strategy=RetrievalStrategy.TEMPORAL,
                     deduplicate=False, top_k=2)
    assert ids(role.ask("refund policy")) == ["ahead", "past"]
    assert store.count() == 2


def test_a_temporal_action_checks_the_ingestion_of_the_whole_role(store: Store) -> None:
    class Base:
        @retrieval(RetrievalStrategy.TEMPORAL)
        def recent(self, question: str, *, retrieved: RetrievalResult) -> RetrievalResult:
            return retrieved

    @knowledge_source(loader=ListLoader(_dated(timedelta(days=3))))
    class Role(Base):  # the TEMPORAL action is inherited
        @retrieval(RetrievalStrategy.KEYWORD)
        def find(self, question: str, *, retrieved: RetrievalResult) -> RetrievalResult:
            return retrieved

    bind_store(Role, store)
    with pytest.raises(TemporalValidationError, match="entry 'ahead'"):
        Role().find("refund")
    with pytest.raises(TemporalValidationError):
        ingest_sources(Role)
    assert store.count() == 0
    # Without a TEMPORAL action the same entries are written as they are.
    plain = echo_role(ListLoader(_dated(timedelta(days=3))), store, strategy=RetrievalStrategy.KEYWORD)
    assert ingest_sources(type(plain)) == IngestCounts(inserted=2)


@pytest.mark.parametrize(("mode", "module", "options"), [
    (RetrievalStrategy.REASONING, "tnsrag_db._strategies.reasoning", {"navigator_model": "m"}),
    (RetrievalStrategy.SEMANTIC, "tnsrag_db._indexes.vector", {}),
    (RetrievalStrategy.GRAPH, "tnsrag_db._strategies.graph", {}),
])
def test_a_missing_strategy_module_is_not_available_never_a_fallback(
        store: Store, monkeypatch: pytest.MonkeyPatch, mode: RetrievalStrategy, module: str,
        options: dict[str, Any]) -> None:
    monkeypatch.setitem(sys.modules, module, None)  # makes "import module" raise ImportError
    role = echo_role(ListLoader(DOCS), store, strategy=mode, on_failure=OnFailure.CONTINUE_EMPTY, **options)
    with pytest.raises(StrategyUnavailableError, match=f"retrieval mode {mode.name} is not available"):
        role.ask("refund")


# -- loader metadata: filtered after attribution, before top-K --------------------------

TENANT_DOCS = [
    MemoryEntry("acme-1", "refund refund refund policy for acme", metadata={"tenant": "acme"}),
    MemoryEntry("globex-1", "refund policy for globex customers and more words here", metadata={"tenant": "globex"}),
    MemoryEntry("plain", "shipping times"),
]


@pytest.mark.parametrize("mode", [RetrievalStrategy.KEYWORD, RetrievalStrategy.SEMANTIC, RetrievalStrategy.HYBRID])
def test_loader_metadata_is_filtered_before_top_k(store: Store, mode: RetrievalStrategy) -> None:
    loader = ListLoader(TENANT_DOCS, name="tickets")
    unfiltered = echo_role(loader, store, strategy=mode, top_k=1, deduplicate=False).ask("refund policy")
    assert ids(unfiltered) == ["acme-1"]
    filtered = echo_role(loader, store, strategy=mode, top_k=1, deduplicate=False,
                         metadata_filters={"tenant": "globex"}).ask("refund policy")
    assert ids(filtered) == ["globex-1"]
    doc = filtered.documents[0]
    assert dict(doc.metadata) == {"tenant": "globex", "tier": "SEMANTIC", "entryId": "globex-1", "source": "tickets"}
    # A key no entry carries excludes everything; source attribution is filterable too.
    assert echo_role(loader, store, strategy=mode, metadata_filters={"region": "eu"}).ask("refund").documents == ()
    by_source = echo_role(loader, store, strategy=mode, top_k=5, metadata_filters={"source": "tickets"})
    assert set(ids(by_source.ask("refund policy"))) <= {"acme-1", "globex-1", "plain"}


def test_knowledge_source_metadata_is_attributed_and_filterable(store: Store) -> None:
    @knowledge_source(loader=ListLoader(TENANT_DOCS[:1], name="a"), metadata={"origin": "crm"})
    @knowledge_source(loader=ListLoader(TENANT_DOCS[1:], name="b"), metadata={"origin": "wiki"})
    class Role:
        @retrieval(RetrievalStrategy.KEYWORD, top_k=1, metadata_filters={"origin": "wiki"})
        def ask(self, question: str, *, retrieved: RetrievalResult) -> RetrievalResult:
            return retrieved

    bind_store(Role, store)
    result = Role().ask("refund policy")
    assert ids(result) == ["globex-1"] and result.documents[0].metadata["origin"] == "wiki"
    assert result.documents[0].source == "b"


def test_reserved_chat_keys_are_removed_before_filtering(store: Store) -> None:
    loader = ListLoader(TENANT_DOCS)
    role = echo_role(loader, store, strategy=RetrievalStrategy.KEYWORD, top_k=1, deduplicate=False,
                     metadata_filters={"tenant": "globex", "tnsai.chat.sessionId": "s-1"})
    assert ids(role.ask("refund policy")) == ["globex-1"]
    with retrieval_filters({"tnsai.chat.conversationId": "c-9", "tnsai.chat.turn": "4"}):
        assert ids(role.ask("refund policy")) == ["globex-1"]
    # Request filters are merged (and win) over the action's own.
    with retrieval_filters({"tenant": "acme", "tnsai.chat.turn": "5"}):
        assert ids(role.ask("refund policy")) == ["acme-1"]


def test_rerank_sees_top_n_after_filtering(store: Store) -> None:
    seen: list[list[str]] = []

    def reverse(query: str, docs: list[RetrievedDocument]) -> list[RetrievedDocument]:
        seen.append([d.metadata["entryId"] for d in docs])
        return list(reversed(docs))

    docs = [MemoryEntry(f"d{i}", "refund " * (5 - i) + f"tenant text {i}", metadata={"tenant": "t" if i % 2 else "u"})
            for i in range(5)]
    role = echo_role(ListLoader(docs), store, strategy=RetrievalStrategy.KEYWORD, top_k=1, rerank_top_n=3,
                     reranker=reverse, deduplicate=False, metadata_filters={"tenant": "t"})
    assert ids(role.ask("refund")) == ["d3"]
    assert seen == [["d1", "d3"]]


# -- de-duplication ----------------------------------------------------------------------

def test_near_duplicates_collapse_to_the_best_scoring_one(store: Store) -> None:
    docs = [MemoryEntry("dup-a", "Refund policy: refunds within 30 days."),
            MemoryEntry("dup-b", "Refund policy - refunds within 30 days!"),
            MemoryEntry("other", "Refund exceptions for damaged goods.")]
    plain = echo_role(ListLoader(docs), store, strategy=RetrievalStrategy.KEYWORD, top_k=2, deduplicate=False)
    both = ids(plain.ask("refund policy 30 days"))
    assert set(both) == {"dup-a", "dup-b"}
    deduped = echo_role(ListLoader(docs), store, strategy=RetrievalStrategy.KEYWORD, top_k=2)
    assert ids(deduped.ask("refund policy 30 days")) == [both[0], "other"]


# -- on_failure --------------------------------------------------------------------------

def test_continue_empty_applies_to_a_database_failure(store: Store, db_url: URL) -> None:
    role = echo_role(ListLoader(DOCS), store, strategy=RetrievalStrategy.KEYWORD,
                     on_failure=OnFailure.CONTINUE_EMPTY)
    assert ids(role.ask("refund"))  # ingested and working
    missing = Pool(db_url.set(database=f"missing_{uuid.uuid4().hex[:8]}"), schema="tnsrag", pool_size=1)
    try:
        bind_store(role, Store(missing, corpus=store.corpus))  # the instance binding wins over the class's
        result = role.ask("refund")
        assert result.documents == () and result.context == ""
        assert isinstance(result.failure, DatabaseError)
        raising = echo_role(ListLoader(DOCS), store, strategy=RetrievalStrategy.KEYWORD)
        bind_store(raising, Store(missing, corpus=store.corpus))
        with pytest.raises(DatabaseError):
            raising.ask("refund")
    finally:
        missing.close()


# -- stores and ingestion -----------------------------------------------------------------

def test_sources_are_ingested_once_per_process(store: Store) -> None:
    loader = ListLoader(DOCS)
    role = echo_role(loader, store, strategy=RetrievalStrategy.KEYWORD)
    role.ask("refund")
    role.ask("password")
    type(role)().ask("shipping")
    assert loader.loads == 1
    assert ingest_sources(type(role)) == IngestCounts(inserted=len(DOCS))
    assert store.count() == len(DOCS)
    # A new process (simulated by forgetting the cache) finds everything unchanged.
    reset_runtime()
    assert ingest_sources(type(role), store=store) == IngestCounts(unchanged=len(DOCS))
    assert loader.loads == 2


def test_corpus_of_the_sources_and_store_resolution(store: Store, make_store: Callable[..., Store]) -> None:
    corpus = f"test_{uuid.uuid4().hex[:12]}"
    make_store(corpus)  # registers the corpus for clean-up

    @knowledge_source(loader=ListLoader(DOCS), corpus=corpus)
    class Role:
        @retrieval(RetrievalStrategy.KEYWORD, top_k=1)
        def ask(self, question: str, *, retrieved: RetrievalResult) -> RetrievalResult:
            return retrieved

    configure(store=store)
    try:
        assert resolve_store(Role).corpus == corpus
        assert ids(Role().ask("password")) == ["passwords"]
        assert store.count() == 0 and store.with_corpus(corpus).count() == len(DOCS)
    finally:
        configure(store=None)


SHARED_ENTRIES = [MemoryEntry(f"shared-{i}", f"shared document number {i} about topic {i % 7}") for i in range(40)]


@knowledge_source(loader=ListLoader(SHARED_ENTRIES, name="shared"))
class SharedRole:
    """A module-level role, importable by spawned processes."""

    @retrieval(RetrievalStrategy.SEMANTIC, top_k=3)
    def ask(self, question: str, *, retrieved: RetrievalResult) -> RetrievalResult:
        return retrieved


def _ingest_in_child(url: str, corpus: str, embed: bool, barrier: Any, out: Any) -> None:
    pool = Pool(url, schema="tnsrag", pool_size=2)
    try:
        barrier.wait(30)
        counts = ingest_sources(SharedRole, store=Store(pool, corpus=corpus), embed=embed)
        out.put((counts.inserted, counts.updated, counts.unchanged))
    except BaseException as exc:  # report instead of dying silently
        out.put(repr(exc))
    finally:
        pool.close()


@pytest.mark.slow
@pytest.mark.parametrize("embed", [False, True], ids=["entries", "with-vectors"])
def test_three_processes_starting_together_ingest_once(db_url: URL, store: Store, pool: Pool,
                                                       embed: bool) -> None:
    ctx = multiprocessing.get_context("spawn")
    barrier, out = ctx.Barrier(3), ctx.Queue()
    url = db_url.render_as_string(hide_password=False)
    procs = [ctx.Process(target=_ingest_in_child, args=(url, store.corpus, embed, barrier, out)) for _ in range(3)]
    for p in procs:
        p.start()
    results = [out.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(60)
    assert all(isinstance(r, tuple) for r in results), results
    n = len(SHARED_ENTRIES)
    assert sorted(results) == [(0, 0, n), (0, 0, n), (n, 0, 0)]
    assert store.count() == n
    with pool.connect() as conn:
        vectors = conn.execute("SELECT count(*) FROM embeddings WHERE corpus = :c",
                               {"c": store.corpus}).scalar_one()
    assert vectors == (n if embed else 0)


# -- the example role -------------------------------------------------------------------

def test_the_example_support_agent_runs(store: Store, capsys: pytest.CaptureFixture[str]) -> None:
    spec = importlib.util.spec_from_file_location("support_agent_example", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    try:
        spec.loader.exec_module(module)
        bind_store(module.SupportAgent, store)
        agent = module.SupportAgent()
        answer = agent.answer("How do I get a refund for a damaged item?")
        assert answer.startswith("Q: How do I get a refund") and "[1] " in answer and "refund" in answer.lower()
        assert agent.explain_error("Ada", "AUTH-401").startswith("Ada, about AUTH-401: ## Reset a password")
        assert agent.customer_faq("refund") == ["faq-refund-time", "faq-password"]
        sections = agent.section_with_context("reset password link expired")
        assert sections[0] == "docs/accounts.md#2"
        assert "docs/accounts.md#1" in sections  # its parent section
        module.main(store=store)  # in the example's own corpus on the test database, dropped afterwards
        printed = capsys.readouterr().out
        assert "AUTH-401" in printed and "customer FAQ: ['faq-refund-time', 'faq-password']" in printed
    finally:
        sys.modules.pop(spec.name, None)


# -- embedding providers through the declarative path (real entry points) ---------------

@pytest.fixture
def install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Installer]:
    """``install(dist, source, {name: attr})``: a module and a ``*.dist-info`` with an
    ``entry_points.txt`` in the embedding group, in a directory put on ``sys.path``."""
    yield from installer(tmp_path, monkeypatch, "tnsrag_decl")


PROVIDER = """
    import math
    import threading

    from tnsrag_db._errors import ProviderTransportError

    entered = threading.Event()
    release = threading.Event()
    init_entered = threading.Event()
    init_release = threading.Event()
    texts = []
    VOCABULARY = ("refund", "password", "shipping")


    class Provider:
        name = "decl-fake-model"

        def __call__(self, text):
            texts.append(text)
            if text == "nan":
                return [math.nan, 1.0, 0.0, 0.0]
            if text == "three":
                return [1.0, 0.0, 0.0]
            if text == "long":
                return [0.0] * 16385
            if text == "transport":
                raise ProviderTransportError("embedding endpoint unreachable")
            if text == "crash":
                raise ZeroDivisionError("division by zero in provider")
            if text == "block":
                entered.set()
                release.wait(10)
            words = text.lower().split()
            return [float(sum(w.startswith(v) for w in words)) for v in VOCABULARY] + [0.1]


    class SlowInit(Provider):
        def __init__(self):
            init_entered.set()
            init_release.wait(10)
"""


def provider_role(store: Store, **options: Any) -> Any:
    options.setdefault("strategy", RetrievalStrategy.SEMANTIC)
    return echo_role(ListLoader(DOCS), store, top_k=1, **options)


def _space_providers(store: Store) -> list[tuple[str, int]]:
    with store.session.transaction() as conn:
        return [tuple(r) for r in conn.execute(
            "SELECT provider, dimension FROM embedding_spaces WHERE corpus = :c ORDER BY provider",
            {"c": store.corpus})]


def test_zero_providers_use_the_128_dimensional_hash_fallback(install: Installer, store: Store) -> None:
    result = provider_role(store).ask("forgotten password")
    assert ids(result) == ["passwords"]
    assert get_process_embedding().is_fallback
    assert _space_providers(store) == [("tnsrag-hash-128", 128)]


def test_one_provider_is_shared_by_vector_strategies_and_dedup(install: Installer, store: Store) -> None:
    module = install("decl-one", PROVIDER, {"fake": "Provider"})
    process = get_process_embedding()
    semantic = provider_role(store)
    assert ids(semantic.ask("password reset")) == ["passwords"]
    assert get_process_embedding() is process and process.name == "decl-fake-model"
    assert _space_providers(store) == [("decl-fake-model", 4)]
    # The query and the de-duplicated results were embedded by the same provider.
    assert "password reset" in module.texts and DOCS[3].content in module.texts
    module.texts.clear()
    keyword = echo_role(ListLoader(DOCS), store, strategy=RetrievalStrategy.KEYWORD, top_k=1)
    assert ids(keyword.ask("shipping")) == ["shipping"]
    assert module.texts and "shipping" not in module.texts  # dedup embeds documents, BM25 not the query


def test_two_providers_are_a_configuration_error_even_with_continue_empty(install: Installer, store: Store) -> None:
    install("decl-beta", PROVIDER, {"beta": "Provider"})
    install("decl-alpha", PROVIDER, {"alpha": "Provider"})
    role = provider_role(store, on_failure=OnFailure.CONTINUE_EMPTY)
    with pytest.raises(ProviderConfigurationError) as info:
        role.ask("refund")
    message = str(info.value)
    assert "2 embedding providers" in message and "alpha = " in message and "beta = " in message
    assert message.index("alpha = ") < message.index("beta = ")
    assert store.count() == 0  # nothing was ingested


@pytest.mark.parametrize(("query", "message"), [
    ("nan", "non-finite value nan at index 0"),
    ("three", "dimension 3, expected 4"),
    ("long", "16385 values, more than the maximum of 16000"),
])
def test_invalid_provider_vectors_follow_on_failure(install: Installer, store: Store, query: str,
                                                    message: str) -> None:
    install("decl-bad", PROVIDER, {"fake": "Provider"})
    with pytest.raises(EmbeddingValidationError, match=message):
        provider_role(store).ask(query)
    result = provider_role(store, on_failure=OnFailure.CONTINUE_EMPTY).ask(query)
    assert result.documents == () and isinstance(result.failure, EmbeddingValidationError)


def test_transport_errors_keep_their_type_and_others_become_execution_errors(install: Installer,
                                                                              store: Store) -> None:
    install("decl-errors", PROVIDER, {"fake": "Provider"})
    with pytest.raises(ProviderTransportError, match="endpoint unreachable"):
        provider_role(store).ask("transport")
    with pytest.raises(ExecutionError, match="division by zero") as info:
        provider_role(store).ask("crash")
    assert isinstance(info.value.__cause__, ZeroDivisionError)
    result = provider_role(store, on_failure=OnFailure.CONTINUE_EMPTY).ask("transport")
    assert isinstance(result.failure, ProviderTransportError)


def _in_thread(call: Callable[[], object]) -> tuple[threading.Thread, list[object]]:
    out: list[object] = []

    def run() -> None:
        try:
            out.append(call())
        except BaseException as exc:
            out.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    return thread, out


def test_a_concurrent_embedding_call_fails_at_once(install: Installer, store: Store) -> None:
    module = install("decl-busy", PROVIDER, {"fake": "Provider"})
    role = provider_role(store)
    lenient = provider_role(store, on_failure=OnFailure.CONTINUE_EMPTY)
    assert ids(role.ask("shipping")) == ["shipping"]  # ingested; the provider is idle again
    thread, out = _in_thread(lambda: role.ask("block"))
    try:
        assert module.entered.wait(10)
        with pytest.raises(ProviderBusyError, match="busy with another call"):
            role.ask("refund")
        result = lenient.ask("refund")
        assert result.documents == () and isinstance(result.failure, ProviderBusyError)
    finally:
        module.release.set()
        thread.join(10)
    assert isinstance(out[0], RetrievalResult)


def test_a_call_during_provider_initialisation_fails_at_once(install: Installer, store: Store) -> None:
    module = install("decl-slow", PROVIDER, {"slow": "SlowInit"})
    role = provider_role(store)
    thread, out = _in_thread(lambda: role.ask("shipping"))
    try:
        assert module.init_entered.wait(10)
        with pytest.raises(ProviderBusyError, match="being initialised"):
            role.ask("refund")
        result = provider_role(store, on_failure=OnFailure.CONTINUE_EMPTY).ask("refund")
        assert isinstance(result.failure, ProviderBusyError)
    finally:
        module.init_release.set()
        thread.join(10)
    assert isinstance(out[0], RetrievalResult) and ids(out[0]) == ["shipping"]


# -- plugin defaults through the declarative path (real entry points) --------------------

EXPANDER = """
    calls = []


    class Expander:
        def expand(self, query, mode, model, max_expansions):
            calls.append((query, mode.name, model, max_expansions))
            return ["password reset"]
"""

NAVIGATOR = """
    calls = []


    class Navigator:
        def rank_children(self, query, node, children, model):
            calls.append((query, model, [c.id for c in children]))
            return [1.0 if c.id in ("manual", "shipping") else 0.0 for c in children]
"""


def llm_multi_query_role(store: Store) -> Any:
    return echo_role(ListLoader(DOCS), store, strategy=RetrievalStrategy.MULTI_QUERY, expansion_mode="LLM",
                     expansion_model="gpt-test", max_expansions=2, top_k=3, deduplicate=False,
                     on_failure=OnFailure.CONTINUE_EMPTY)


def test_llm_expansion_without_an_installed_expander_is_not_available(install: Installer, store: Store) -> None:
    with pytest.raises(StrategyUnavailableError) as info:
        llm_multi_query_role(store).ask("refund")
    message = str(info.value)
    assert "expansion mode LLM needs exactly one installed query expander" in message
    assert f"{EXPANDER_ENTRY_POINT_GROUP!r} (found: none)" in message and "@retrieval(expander=...)" in message


def test_llm_expansion_with_several_installed_expanders_names_them(install: Installer, store: Store) -> None:
    install("decl-exp-beta", EXPANDER, {"beta": "Expander"}, group=EXPANDER_ENTRY_POINT_GROUP)
    install("decl-exp-alpha", EXPANDER, {"alpha": "Expander"}, group=EXPANDER_ENTRY_POINT_GROUP)
    with pytest.raises(ConfigurationError) as info:
        llm_multi_query_role(store).ask("refund")
    assert type(info.value) is ConfigurationError
    assert "(found: alpha, beta)" in str(info.value)


def test_llm_expansion_uses_the_one_installed_expander(install: Installer, store: Store) -> None:
    module = install("decl-exp-one", EXPANDER, {"only": "Expander"}, group=EXPANDER_ENTRY_POINT_GROUP)
    result = llm_multi_query_role(store).ask("refund")
    assert module.calls == [("refund", "LLM", "gpt-test", 2)]
    assert result.ok and "passwords" in ids(result)  # found through the expander's variant


def reasoning_role(store: Store) -> Any:
    return echo_role(ListLoader(DOCS), store, strategy=RetrievalStrategy.REASONING, navigator_model="nav-model",
                     top_k=1, on_failure=OnFailure.CONTINUE_EMPTY)


def test_reasoning_without_installed_navigators_uses_the_lexical_one(install: Installer, store: Store) -> None:
    result = reasoning_role(store).ask("damaged item refund")
    assert ids(result) == ["refund-damaged"]
    assert json.loads(result.documents[0].metadata["path"]) == ["manual", "refunds", "refund-damaged"]


def test_reasoning_uses_the_one_installed_navigator(install: Installer, store: Store) -> None:
    module = install("decl-nav-one", NAVIGATOR, {"only": "Navigator"}, group=NAVIGATOR_ENTRY_POINT_GROUP)
    result = reasoning_role(store).ask("damaged item refund")
    assert ids(result) == ["shipping"]  # where the installed navigator points, not the lexical answer
    assert module.calls and all(model == "nav-model" for _, model, _ in module.calls)


def test_reasoning_with_several_installed_navigators_names_them(install: Installer, store: Store) -> None:
    install("decl-nav-beta", NAVIGATOR, {"beta": "Navigator"}, group=NAVIGATOR_ENTRY_POINT_GROUP)
    install("decl-nav-alpha", NAVIGATOR, {"alpha": "Navigator"}, group=NAVIGATOR_ENTRY_POINT_GROUP)
    with pytest.raises(ConfigurationError) as info:
        reasoning_role(store).ask("refund")
    assert type(info.value) is ConfigurationError
    assert "2 tree navigators are installed (alpha, beta)" in str(info.value)
    assert "@retrieval(navigator=...)" in str(info.value)


def test_a_process_waiting_for_the_ingestion_lock_does_not_stall_an_index_build(store: Store) -> None:
    # The holder of the ingestion lock may build an HNSW index (CREATE INDEX
    # CONCURRENTLY), which waits for every older snapshot. A waiter blocked inside
    # pg_advisory_lock would hold one while waiting for the holder: a deadlock that
    # PostgreSQL breaks by aborting one side. The lock is polled instead.
    import numpy as np

    from tnsrag_db._indexes.vector import VectorMemoryStore
    from tnsrag_db.declarative._ingest import lock_key as _lock_key, write_once as _write_once

    vectors = VectorMemoryStore(store, lambda text: [1.0, 0.0, 0.0], index_threshold=None)
    vectors.add_all([MemoryEntry(f"v{i}", f"vector {i}") for i in range(2000)],
                    embeddings=np.random.default_rng(3).standard_normal((2000, 3)))
    waiter_result: list[object] = []
    with store.session.autocommit() as conn, store.session.session_lock(conn, _lock_key(store)):
        waiter = threading.Thread(target=lambda: waiter_result.append(
            _write_once(store, [MemoryEntry("late", "written after the build")], store.add_all)), daemon=True)
        waiter.start()
        waiter.join(1.5)  # now waiting for the lock (longer than the deadlock check's 1 s)
        assert waiter.is_alive()
        built: list[str | None] = []
        builder = threading.Thread(target=lambda: built.append(vectors.build_index()), daemon=True)
        builder.start()
        builder.join(60)  # with a blocking waiter the build never ends (PostgreSQL sees no cycle)
        assert built and built[0] is not None
    waiter.join(10)
    assert waiter_result == [IngestCounts(inserted=1)]


# -- the Runtime object and the shared signature -----------------------------------------

def test_each_runtime_keeps_its_own_state(store: Store) -> None:
    from tnsrag_db.declarative import Runtime

    loader = ListLoader(DOCS[:2])
    role = echo_role(loader, store, strategy=RetrievalStrategy.KEYWORD)
    first, second = Runtime(), Runtime()
    assert first.ingest(role, store) == IngestCounts(inserted=2)
    assert first.ingest(role, store) == IngestCounts(inserted=2) and loader.loads == 1  # cached: no load
    assert second.ingest(role, store) == IngestCounts(unchanged=2) and loader.loads == 2  # its own cache
    first.reset()
    assert first.ingest(role, store) == IngestCounts(unchanged=2) and loader.loads == 3
    first.configure(store)
    assert first.resolve_store(role) is store
    with pytest.raises(ConfigurationError, match=r"configure\(store=\.\.\.\) needs a tnsrag_db Store"):
        second.configure("postgresql://x")  # type: ignore[arg-type]


def test_retrieval_has_the_signature_of_retrieval_config_create() -> None:
    import inspect

    from tnsrag_db.declarative import RetrievalConfig, retrieval_config

    assert list(inspect.signature(retrieval).parameters.values()) == \
        list(inspect.signature(RetrievalConfig.create).parameters.values())
    positional = retrieval(RetrievalStrategy.KEYWORD, top_k=2)  # strategy may be positional, as before

    class Role:
        @positional
        def ask(self, question: str, *, retrieved: RetrievalResult) -> RetrievalResult:
            return retrieved

    config = retrieval_config(Role.ask)
    assert config == RetrievalConfig.create(strategy=RetrievalStrategy.KEYWORD, top_k=2)
    with pytest.raises(TypeError):
        retrieval(top_kk=2)  # type: ignore[call-arg]
