"""An example agent role using declarative retrieval.

Run it on the embedded database (nothing to configure)::

    python examples/support_agent.py          # add --keep to keep its corpus afterwards

It writes into a corpus of its own, ``support-agent-example``, and drops that corpus
when it is done (with ``--keep`` it stays, for ``tnsrag query ... --corpus
support-agent-example``); nothing else in the database is touched.

``SupportAgent`` declares two knowledge sources: the Markdown and JSONL files under
``examples/docs/`` and a small custom ``SourceLoader`` whose entries carry an
``audience`` metadata key. Each action declares how to retrieve; the runtime ingests
the sources on first use (once per process, idempotently across processes) and passes
the result to the action as its ``retrieved`` keyword argument.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator

from tnsrag_db import Store, connect
from tnsrag_db._types import MemoryEntry, MemoryTier
from tnsrag_db.declarative import (
    OnFailure,
    RetrievalResult,
    RetrievalStrategy,
    bind_store,
    knowledge_source,
    retrieval,
    retrieval_filters,
)

#: The example's own corpus (see the module docstring).
CORPUS = "support-agent-example"


class FaqLoader:
    """A custom source: frequently asked questions, each tagged with its audience."""

    name = "faq"

    FAQ = (
        ("faq-refund-time", "customers", "How long does a refund take? Refunds reach the original payment "
                                         "method within 5 business days."),
        ("faq-refund-override", "agents", "Support agents may approve a refund after 30 days with a team "
                                          "lead's sign-off."),
        ("faq-password", "customers", "I forgot my password. Use 'Forgot password' on the sign-in page."),
    )

    def load(self) -> Iterator[MemoryEntry]:
        for entry_id, audience, text in self.FAQ:
            yield MemoryEntry(entry_id, text, MemoryTier.SEMANTIC, metadata={"audience": audience})


@knowledge_source("docs/*.md", "docs/release-notes.jsonl", metadata={"kind": "docs"})
@knowledge_source(loader=FaqLoader(), metadata={"kind": "faq"})
class SupportAgent:
    """A customer-support role: every public method is an action."""

    @retrieval(RetrievalStrategy.HYBRID, top_k=3, on_failure=OnFailure.CONTINUE_EMPTY)
    def answer(self, question: str, *, retrieved: RetrievalResult) -> str:
        """Answer a free-text question from the best three passages (empty context on failure)."""
        if not retrieved.documents:
            return f"Q: {question}\nNo matching documentation; escalating to a human."
        return f"Q: {question}\nContext:\n{retrieved.context}"

    @retrieval(RetrievalStrategy.KEYWORD, top_k=1, query_param="code")
    def explain_error(self, customer: str, code: str, *, retrieved: RetrievalResult) -> str:
        """Look an error code up by exact token (BM25); the query is the ``code`` argument."""
        best = retrieved.documents[0].content if retrieved.documents else "unknown error code"
        return f"{customer}, about {code}: {best}"

    @retrieval(RetrievalStrategy.SEMANTIC, top_k=2, metadata_filters={"audience": "customers"})
    def customer_faq(self, question: str, *, retrieved: RetrievalResult) -> list[str]:
        """FAQ entries meant for customers only (the loader's ``audience`` metadata, filtered before top-K)."""
        return [doc.metadata["entryId"] for doc in retrieved.documents]

    @retrieval(RetrievalStrategy.HIERARCHICAL, top_k=3, metadata_filters={"kind": "docs"})
    def section_with_context(self, question: str, *, retrieved: RetrievalResult) -> list[str]:
        """Matching Markdown sections together with their parent sections."""
        return [doc.metadata["entryId"] for doc in retrieved.documents]


def main(keep: bool = False, store: Store | None = None) -> None:
    """Run the role on ``store``'s database (default: the embedded one), in the corpus CORPUS,
    and drop that corpus afterwards unless ``keep``."""
    with connect(corpus=CORPUS) if store is None else store.with_corpus(CORPUS) as own:
        bind_store(SupportAgent, own)
        try:
            agent = SupportAgent()
            print(agent.answer("How do I get my money back for a damaged item?"))
            print()
            print(agent.explain_error("Ada", "AUTH-401"))
            print()
            print("customer FAQ:", agent.customer_faq("refund"))
            # Request context from a chat lifecycle: tnsai.chat.* keys are dropped before filtering.
            with retrieval_filters({"tnsai.chat.conversationId": "c-42"}):
                print("sections:", agent.section_with_context("reset password link expired"))
        finally:
            if not keep:
                own.drop_corpus()


if __name__ == "__main__":
    main(keep="--keep" in sys.argv[1:])
