"""Unit tests of the declarative layer that need no database: query binding, decorator
options, knowledge-source loading, filters, de-duplication and the failure policy.

Where a call must not reach retrieval, the role is bound to a store on an unreachable
server with ``on_failure=CONTINUE_EMPTY``: had binding passed, the action would have
returned an empty result instead of raising.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest

import tnsrag_db.declarative as declarative
from tnsrag_db._db.pool import Pool
from tnsrag_db._errors import (
    ConfigurationError,
    DatabaseError,
    EmbeddingValidationError,
    ExecutionError,
    InvalidEntryError,
    InvalidFilterError,
    ProviderBusyError,
    ProviderConfigurationError,
    ProviderTransportError,
    StrategyUnavailableError,
    ValidationError,
)
from tnsrag_db._store.store import Store
from tnsrag_db._types import MemoryEntry, RAGContext, RetrievedDocument
from tnsrag_db.declarative import (
    DeduplicatingStrategy,
    FileLoader,
    OnFailure,
    RetrievalConfig,
    RetrievalResult,
    RetrievalStrategy,
    bind_store,
    collect_sources,
    is_runtime_failure,
    knowledge_source,
    plan_binding,
    retrieval,
    retrieval_config,
    retrieval_filters,
    strip_reserved,
)
from tnsrag_db.declarative._decorators import effective_filters


def test_all_is_sorted_and_complete() -> None:
    assert declarative.__all__ == sorted(declarative.__all__)
    public = {name for name, value in vars(declarative).items()
              if not name.startswith("_") and not isinstance(value, ModuleType) and name != "annotations"}
    assert public == set(declarative.__all__)


@pytest.fixture(autouse=True)
def _fresh_runtime() -> Iterator[None]:
    declarative.reset_runtime()
    yield
    declarative.reset_runtime()


@pytest.fixture
def unreachable_store() -> Iterator[Store]:
    """A store whose server refuses connections (nothing is contacted until a query runs)."""
    pool = Pool("postgresql://nobody@127.0.0.1:1/nothing?connect_timeout=2", schema="tnsrag",
                           pool_size=1)
    yield Store(pool, corpus="unreachable")
    pool.close()


# -- query binding: decoration time ----------------------------------------------------


def test_blank_query_param_binds_the_first_str_parameter_in_declaration_order() -> None:
    def act(self: object, count: int, question: str, other: str, *, retrieved: RetrievalResult) -> None: ...

    assert plan_binding(act, "").parameter == "question"


def test_blank_query_param_reads_real_str_annotations_too() -> None:
    namespace: dict[str, Any] = {}
    exec("def act(self, n: int, text: str, *, retrieved): pass", namespace)  # no postponed annotations
    assert plan_binding(namespace["act"], "").parameter == "text"


def test_unannotated_parameters_are_not_str_for_the_blank_rule() -> None:
    def act(self: object, untyped, question: str, *, retrieved: RetrievalResult) -> None: ...  # type: ignore[no-untyped-def]

    assert plan_binding(act, "").parameter == "question"


def test_named_query_param_binds_that_parameter() -> None:
    def act(self: object, customer: str, code: str, *, retrieved: RetrievalResult) -> None: ...

    assert plan_binding(act, "code").parameter == "code"


def test_named_query_param_may_be_unannotated() -> None:
    def act(self: object, topic, *, retrieved: RetrievalResult) -> None: ...  # type: ignore[no-untyped-def]

    assert plan_binding(act, "topic").parameter == "topic"


def test_named_query_param_missing_fails_at_decoration() -> None:
    with pytest.raises(ConfigurationError, match=r"has no parameter 'topic' \(parameters: question\)"):
        class Role:
            @retrieval(query_param="topic")
            def act(self, question: str, *, retrieved: RetrievalResult) -> None: ...


def test_named_query_param_of_another_type_fails_at_decoration() -> None:
    with pytest.raises(ConfigurationError, match="annotated 'int', not str"):
        class Role:
            @retrieval(query_param="count")
            def act(self, question: str, count: int, *, retrieved: RetrievalResult) -> None: ...


def test_an_action_without_a_str_parameter_fails_at_decoration() -> None:
    with pytest.raises(ConfigurationError, match="no parameter annotated str"):
        class Role:
            @retrieval()
            def act(self, count: int, *, retrieved: RetrievalResult) -> None: ...


def test_an_action_without_retrieved_fails_at_decoration() -> None:
    with pytest.raises(ConfigurationError, match="must declare a keyword parameter 'retrieved'"):
        class Role:
            @retrieval()
            def act(self, question: str) -> None: ...


def test_retrieval_on_a_staticmethod_or_plain_function_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="no 'self' parameter"):
        retrieval()(lambda *, retrieved: None)
    with pytest.raises(ConfigurationError, match="decorates action methods"):
        retrieval()(staticmethod(lambda q: None))  # type: ignore[arg-type]


def test_class_level_name_must_exist_on_every_action() -> None:
    with pytest.raises(ConfigurationError) as info:
        @retrieval(query_param="question")
        class Role:
            def ask(self, question: str, *, retrieved: RetrievalResult) -> None: ...

            def lookup(self, code: str, *, retrieved: RetrievalResult) -> None: ...

    message = str(info.value)
    assert "action" in message and "lookup" in message and "has no parameter 'question'" in message
    assert "put @retrieval on each method of" in message and "Role instead" in message


def test_class_level_blank_rule_needs_a_str_parameter_on_every_action() -> None:
    with pytest.raises(ConfigurationError, match="no parameter annotated str.*put @retrieval on each method"):
        @retrieval()
        class Role:
            def ask(self, question: str, *, retrieved: RetrievalResult) -> None: ...

            def count(self, n: int, *, retrieved: RetrievalResult) -> None: ...


def test_class_level_applies_to_every_public_action_and_method_level_wins() -> None:
    @retrieval(RetrievalStrategy.KEYWORD, query_param="question", top_k=2)
    class Role:
        def ask(self, question: str, *, retrieved: RetrievalResult) -> None: ...

        def also(self, prefix: str, question: str, *, retrieved: RetrievalResult) -> None: ...

        @retrieval(RetrievalStrategy.GRAPH, query_param="code")
        def lookup(self, code: str, *, retrieved: RetrievalResult) -> None: ...

        def _helper(self) -> None: ...

    ask, also, lookup = (retrieval_config(getattr(Role, n)) for n in ("ask", "also", "lookup"))
    assert ask is not None and ask.strategy is RetrievalStrategy.KEYWORD and ask.top_k == 2
    assert also is ask
    assert lookup is not None and lookup.strategy is RetrievalStrategy.GRAPH
    assert retrieval_config(Role._helper) is None
    assert retrieval_config(Role().ask) is ask


def test_class_level_on_a_class_without_actions_fails() -> None:
    with pytest.raises(ConfigurationError, match="defines no public action methods"):
        @retrieval()
        class Role:
            def _private(self) -> None: ...


def test_the_caller_sees_the_signature_without_retrieved() -> None:
    class Role:
        @retrieval()
        def act(self, question: str, limit: int = 3, *, retrieved: RetrievalResult) -> None: ...

    import inspect

    assert list(inspect.signature(Role.act).parameters) == ["self", "question", "limit"]


# -- query binding: call time, before on_failure ---------------------------------------


def _continue_role(store: Store) -> type:
    @knowledge_source(loader=_ListLoader([MemoryEntry("a", "alpha text")]))
    class Role:
        @retrieval(RetrievalStrategy.KEYWORD, on_failure=OnFailure.CONTINUE_EMPTY, deduplicate=False)
        def act(self, question: str, *, retrieved: RetrievalResult) -> RetrievalResult:
            return retrieved

        @retrieval(RetrievalStrategy.KEYWORD, query_param="topic", on_failure=OnFailure.CONTINUE_EMPTY,
                   deduplicate=False)
        def named(self, topic=None, *, retrieved: RetrievalResult) -> RetrievalResult:  # type: ignore[no-untyped-def]
            return retrieved

    bind_store(Role, store)
    return Role


def test_reaching_retrieval_applies_on_failure_to_a_database_failure(unreachable_store: Store) -> None:
    result = _continue_role(unreachable_store)().act("alpha")
    assert isinstance(result, RetrievalResult)
    assert result.documents == () and result.context == "" and isinstance(result.failure, DatabaseError)
    assert not result.ok


def test_a_non_string_argument_fails_before_on_failure(unreachable_store: Store) -> None:
    with pytest.raises(ValidationError, match="query parameter 'question' must be a str, got int"):
        _continue_role(unreachable_store)().act(42)


def test_a_missing_argument_fails_before_on_failure(unreachable_store: Store) -> None:
    role = _continue_role(unreachable_store)()
    with pytest.raises(ValidationError, match="cannot bind the query parameter 'question'"):
        role.act()
    with pytest.raises(ValidationError, match="query parameter 'topic' must be a str, got NoneType"):
        role.named()


def test_passing_retrieved_yourself_is_refused(unreachable_store: Store) -> None:
    with pytest.raises(ValidationError, match="supplied by @retrieval"):
        _continue_role(unreachable_store)().act("alpha", retrieved=None)


def test_a_bad_request_filter_fails_before_on_failure(unreachable_store: Store) -> None:
    role = _continue_role(unreachable_store)()
    with retrieval_filters({"tenant": " "}), pytest.raises(InvalidFilterError):
        role.act("alpha")


def test_async_actions_retrieve_off_the_event_loop(unreachable_store: Store) -> None:
    @knowledge_source(loader=_ListLoader([MemoryEntry("a", "alpha")]))
    class Role:
        @retrieval(RetrievalStrategy.KEYWORD, on_failure="CONTINUE_EMPTY", deduplicate=False)
        async def act(self, question: str, *, retrieved: RetrievalResult) -> tuple[str, object]:
            return retrieved.query, retrieved.failure

    bind_store(Role, unreachable_store)
    query, failure = asyncio.run(Role().act("alpha"))
    assert query == "alpha" and isinstance(failure, DatabaseError)


# -- RetrievalConfig validation ------------------------------------------------------


def test_config_defaults() -> None:
    config = RetrievalConfig.create()
    assert (config.strategy, config.top_k, config.rerank_top_n, config.min_score) == (
        RetrievalStrategy.HYBRID, 5, 0, 0.0)
    assert config.query_param == "" and config.on_failure is OnFailure.RAISE
    assert config.deduplicate and config.dedup_threshold == 0.95 and dict(config.metadata_filters) == {}
    assert config.candidates == 5


@pytest.mark.parametrize(("options", "message"), [
    ({"top_k": 0}, "top_k must be an int >= 1"),
    ({"top_k": True}, "top_k must be an int >= 1"),
    ({"rerank_top_n": 3, "top_k": 5, "reranker": lambda q, d: d}, r"rerank_top_n \(3\) must be 0"),
    ({"rerank_top_n": 10}, "needs a reranker"),
    ({"reranker": lambda q, d: d}, "needs rerank_top_n > 0"),
    ({"min_score": float("nan")}, "min_score must be a finite number"),
    ({"strategy": "FUZZY"}, "strategy must be one of SEMANTIC, KEYWORD, HYBRID, GRAPH, MULTI_QUERY"),
    ({"on_failure": "IGNORE"}, "on_failure must be one of RAISE, CONTINUE_EMPTY"),
    ({"dedup_threshold": 1.5}, r"dedup_threshold must be a cosine similarity in \[-1, 1\]"),
    ({"strategy": RetrievalStrategy.REASONING}, "REASONING needs navigator_model="),
    ({"strategy": RetrievalStrategy.MULTI_QUERY, "expansion_model": "m"}, "expansion_mode= other than NONE"),
    ({"strategy": RetrievalStrategy.MULTI_QUERY, "expansion_mode": "none", "expansion_model": "m"},
     "expansion_mode= other than NONE"),
    ({"strategy": RetrievalStrategy.MULTI_QUERY, "expansion_mode": "RM3"}, "needs expansion_model="),
    ({"navigator_model": " "}, "navigator_model must be None or a non-blank string"),
    ({"max_expansions": 0}, "max_expansions must be an int >= 1"),
    ({"query_param": 3}, "query_param must be a string"),
])
def test_config_rejects_bad_options(options: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        RetrievalConfig.create(**options)


def test_config_rejects_bad_filters_at_decoration() -> None:
    with pytest.raises(InvalidFilterError, match="@retrieval metadata_filters"):
        retrieval(metadata_filters={"tenant": ""})
    with pytest.raises(InvalidFilterError):
        retrieval(metadata_filters={"": "x"})


def test_config_copies_filters() -> None:
    filters = {"tenant": "acme"}
    config = RetrievalConfig.create(metadata_filters=filters)
    filters["tenant"] = "other"
    assert dict(config.metadata_filters) == {"tenant": "acme"}
    assert RetrievalConfig.create(rerank_top_n=8, top_k=2, reranker=lambda q, d: d).candidates == 8


# -- filters ---------------------------------------------------------------------------


def test_reserved_chat_keys_are_stripped() -> None:
    assert strip_reserved({"tnsai.chat.sessionId": "s", "tnsai.chatter": "x", "tenant": "a"}) == {
        "tnsai.chatter": "x", "tenant": "a"}


def test_effective_filters_merge_request_filters_and_strip_reserved_keys() -> None:
    config = RetrievalConfig.create(metadata_filters={"tenant": "acme", "tnsai.chat.turn": "3", "tier": "SEMANTIC"})
    assert dict(effective_filters(config)) == {"tenant": "acme", "tier": "SEMANTIC"}
    with retrieval_filters({"tenant": "globex", "tnsai.chat.conversationId": "c1"}):
        with retrieval_filters({"lang": "en"}):
            assert dict(effective_filters(config)) == {"tenant": "globex", "tier": "SEMANTIC", "lang": "en"}
        assert dict(effective_filters(config)) == {"tenant": "globex", "tier": "SEMANTIC"}
    assert dict(effective_filters(config)) == {"tenant": "acme", "tier": "SEMANTIC"}
    # A reserved key is dropped before validation, so even a blank one is no error.
    with retrieval_filters({"tnsai.chat.x": ""}):
        assert dict(effective_filters(config)) == {"tenant": "acme", "tier": "SEMANTIC"}


def test_retrieval_filters_needs_a_mapping() -> None:
    with pytest.raises(ConfigurationError):
        with retrieval_filters([("a", "b")]):  # type: ignore[arg-type]
            pass


# -- failure classification -------------------------------------------------------------


@pytest.mark.parametrize(("error", "applies"), [
    (ProviderBusyError("busy"), True),
    (ProviderTransportError("down"), True),
    (ExecutionError("boom"), True),
    (EmbeddingValidationError("nan"), True),
    (DatabaseError("gone"), True),
    (StrategyUnavailableError("missing"), False),
    (ProviderConfigurationError("two"), False),
    (ConfigurationError("bad"), False),
    (ValidationError("bad"), False),
    (InvalidFilterError("bad"), False),
    (RuntimeError("bug"), False),
])
def test_on_failure_applies_to_runtime_failures_only(error: Exception, applies: bool) -> None:
    assert is_runtime_failure(error) is applies


# -- knowledge sources -----------------------------------------------------------------


class _ListLoader:
    def __init__(self, entries: Sequence[MemoryEntry], name: str = "list") -> None:
        self.entries = list(entries)
        self.name = name
        self.loads = 0

    def load(self) -> Iterator[MemoryEntry]:
        self.loads += 1
        yield from self.entries


def test_knowledge_source_options_are_checked_at_decoration() -> None:
    with pytest.raises(ConfigurationError, match="not both"):
        knowledge_source("a.md", loader=_ListLoader([]))
    with pytest.raises(ConfigurationError, match="needs file paths"):
        knowledge_source()
    with pytest.raises(ConfigurationError, match="load\\(\\) method"):
        knowledge_source(loader=object())  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="unknown memory tier"):
        knowledge_source("a.md", tier="HOT")
    with pytest.raises(ConfigurationError, match="metadata must map"):
        knowledge_source("a.md", metadata={"k": 1})  # type: ignore[dict-item]
    with pytest.raises(ConfigurationError, match="decorates a role class"):
        knowledge_source("a.md")(lambda: None)  # type: ignore[arg-type,type-var]


def test_sources_stack_in_reading_order_and_are_inherited() -> None:
    first, second, third = _ListLoader([], "first"), _ListLoader([], "second"), _ListLoader([], "third")

    @knowledge_source(loader=first)
    @knowledge_source(loader=second, corpus="kb")
    class Base:
        pass

    @knowledge_source(loader=third, name="extra")
    class Child(Base):
        pass

    sources, corpus = collect_sources(Child)
    assert [s.name for s in sources] == ["first", "second", "extra"]
    assert corpus == "kb"
    assert collect_sources(Base)[0] == sources[:2]


def test_sources_on_different_corpora_are_refused() -> None:
    @knowledge_source(loader=_ListLoader([]), corpus="a")
    @knowledge_source(loader=_ListLoader([]), corpus="b")
    class Role:
        pass

    with pytest.raises(ConfigurationError, match="name different corpora \\(a, b\\)"):
        collect_sources(Role)


def test_source_attribution_sets_source_and_default_metadata() -> None:
    loader = _ListLoader([MemoryEntry("x", "text", metadata={"tenant": "acme", "kind": "own"}),
                          MemoryEntry("y", "text", source="crm")], name="tickets")

    @knowledge_source(loader=loader, metadata={"kind": "ticket", "team": "support"})
    class Role:
        pass

    (source,), _ = collect_sources(Role)
    x, y = source.entries()
    assert x.source == "tickets" and dict(x.metadata) == {"tenant": "acme", "kind": "own", "team": "support"}
    assert y.source == "crm" and dict(y.metadata) == {"kind": "ticket", "team": "support"}


def test_a_loader_yielding_something_else_is_an_invalid_entry() -> None:
    @knowledge_source(loader=_ListLoader(["not an entry"]))  # type: ignore[list-item]
    class Role:
        pass

    (source,), _ = collect_sources(Role)
    with pytest.raises(InvalidEntryError, match="loader item 0 is a str"):
        source.entries()


def test_relative_paths_resolve_against_the_module_of_the_class(tmp_path: Path) -> None:
    @knowledge_source("test_binding.py")
    class Role:
        pass

    (source,), _ = collect_sources(Role)
    assert isinstance(source.loader, FileLoader)
    assert source.loader.files() == [Path(__file__).resolve().parent / "test_binding.py"]


def test_file_loader_reads_markdown_sections_as_a_hierarchy(tmp_path: Path) -> None:
    (tmp_path / "guide.md").write_text(
        "Intro line.\n\n# Guide\n\nTop text.\n\n## Install\n\nRun it.\n\n```\n# not a heading\n```\n\n"
        "### Linux\n\napt.\n\n## Use\n\nCall it.\n")
    entries = list(FileLoader("guide.md", base_dir=tmp_path).load())
    assert [(e.id, e.parent_id) for e in entries] == [
        ("guide.md#0", None), ("guide.md#1", "guide.md#0"), ("guide.md#2", "guide.md#1"),
        ("guide.md#3", "guide.md#2"), ("guide.md#4", "guide.md#1")]
    install = entries[2]
    assert install.content.startswith("## Install") and "# not a heading" in install.content
    assert dict(install.metadata) == {"path": "guide.md", "format": "markdown", "section": "Install",
                                      "headingPath": "Guide > Install"}
    assert entries[3].metadata["headingPath"] == "Guide > Install > Linux"
    # Text before the first heading is the file's root section; without it the top headings are roots.
    assert dict(entries[0].metadata) == {"path": "guide.md", "format": "markdown"}
    (tmp_path / "bare.md").write_text("# A\n\ntext\n\n# B\n\nmore\n")
    assert [(e.id, e.parent_id) for e in FileLoader("bare.md", base_dir=tmp_path).load()] == [
        ("bare.md#1", None), ("bare.md#2", None)]
    assert install.source == "guide.md" and install.tier.name == "SEMANTIC"


def test_file_loader_reads_text_in_chunks_and_walks_directories(tmp_path: Path) -> None:
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "a.txt").write_text("First paragraph.\n\nSecond paragraph.\n")
    (tmp_path / "notes" / "big.txt").write_text("\n\n".join("x" * 900 for _ in range(3)))
    (tmp_path / "notes" / "skip.bin").write_bytes(b"\x00\x01")
    loader = FileLoader("notes", base_dir=tmp_path, tier="WORKING")
    entries = list(loader.load())
    # Chunks of at most 1,000 characters (the hash fallback's size): one 900-character paragraph each.
    assert [e.id for e in entries] == ["notes/a.txt#0", "notes/big.txt#0", "notes/big.txt#1", "notes/big.txt#2"]
    assert [(s.path, s.reason) for s in loader.skipped] == [("notes/skip.bin", "binary")]
    assert entries[0].content == "First paragraph.\n\nSecond paragraph."
    assert entries[0].tier.name == "WORKING" and entries[0].metadata["format"] == "text"


def test_file_loader_reads_jsonl(tmp_path: Path) -> None:
    lines = [{"id": "r1", "content": "one", "tier": "EPISODIC", "metadata": {"tenant": "acme"},
              "timestamp": "2025-01-02T03:04:05Z"},
             {"text": "two", "parentId": "r1"}]
    (tmp_path / "data.jsonl").write_text("\n".join(json.dumps(x) for x in lines) + "\n\n")
    first, second = FileLoader("*.jsonl", base_dir=tmp_path).load()
    assert first.id == "r1" and first.tier.name == "EPISODIC" and first.metadata["tenant"] == "acme"
    assert first.timestamp is not None and first.timestamp.year == 2025 and first.source == "data.jsonl"
    assert second.id == "data.jsonl#2" and second.content == "two" and second.parent_id == "r1"


@pytest.mark.parametrize(("line", "message"), [
    ("{not json", "data.jsonl:1: not valid JSON"),
    ("[1, 2]", "data.jsonl:1: each line must be a JSON object"),
    ('{"id": "x"}', "needs a string 'content'"),
    ('{"content": "c", "metadata": {"tier": "x"}}', "metadata key 'tier' is reserved"),
])
def test_file_loader_names_the_bad_jsonl_line(tmp_path: Path, line: str, message: str) -> None:
    (tmp_path / "data.jsonl").write_text(line + "\n")
    with pytest.raises(InvalidEntryError, match=message):
        list(FileLoader("data.jsonl", base_dir=tmp_path).load())


def test_file_loader_pattern_matching_nothing_is_a_configuration_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="'missing/\\*.md' matched no files"):
        list(FileLoader("missing/*.md", base_dir=tmp_path).load())


# -- de-duplication ---------------------------------------------------------------------


class _FixedStrategy:
    name = "fixed"

    def __init__(self, docs: list[RetrievedDocument]) -> None:
        self.docs = docs
        self.asked: list[int] = []

    def retrieve(self, query: str, context: RAGContext | None = None) -> list[RetrievedDocument]:
        assert context is not None
        self.asked.append(context.max_results)
        return self.docs[: context.max_results]


def _vectors(table: dict[str, list[float]]) -> Any:
    def embed_batch(texts: Sequence[str]) -> list[np.ndarray]:
        return [np.asarray(table[t], dtype=np.float32) for t in texts]

    return embed_batch


def test_dedup_collapses_near_duplicates_to_the_best_scoring_one() -> None:
    docs = [RetrievedDocument("a", None, 0.9), RetrievedDocument("a2", None, 0.8),
            RetrievedDocument("b", None, 0.7), RetrievedDocument("a3", None, 0.6), RetrievedDocument("c", None, 0.5)]
    table = {"a": [1.0, 0.0], "a2": [0.99, 0.05], "a3": [1.0, 0.01], "b": [0.0, 1.0], "c": [0.7, 0.7]}
    base = _FixedStrategy(docs)
    dedup = DeduplicatingStrategy(base, _vectors(table), threshold=0.95)
    assert dedup.name == "fixed"
    assert [d.content for d in dedup.retrieve("q", RAGContext(max_results=3))] == ["a", "b", "c"]
    assert base.asked == [7]  # twice as many plus a margin: enough survived
    assert [d.content for d in DeduplicatingStrategy(base, _vectors(table), threshold=1.0).retrieve(
        "q", RAGContext(max_results=2))] == ["a", "a2"]


def test_dedup_asks_for_more_while_too_few_survive() -> None:
    docs = [RetrievedDocument(f"dup{i}", None, 1.0 - i / 100) for i in range(20)] + [
        RetrievedDocument("other", None, 0.1)]
    table = {d.content: [1.0, 0.0] for d in docs} | {"other": [0.0, 1.0]}
    base = _FixedStrategy(docs)
    result = DeduplicatingStrategy(base, _vectors(table)).retrieve("q", RAGContext(max_results=2))
    assert [d.content for d in result] == ["dup0", "other"]
    assert base.asked == [6, 12, 24]


def test_dedup_never_merges_zero_vectors_and_checks_options() -> None:
    docs = [RetrievedDocument("x", None, 1.0), RetrievedDocument("y", None, 0.5)]
    dedup = DeduplicatingStrategy(_FixedStrategy(docs), _vectors({"x": [0.0, 0.0], "y": [0.0, 0.0]}), threshold=0.0)
    assert [d.content for d in dedup.retrieve("q", RAGContext(max_results=2))] == ["x", "y"]
    with pytest.raises(ConfigurationError):
        DeduplicatingStrategy(_FixedStrategy([]), _vectors({}), threshold=2.0)
    with pytest.raises(ConfigurationError):
        DeduplicatingStrategy(object(), _vectors({}))  # type: ignore[arg-type]
