"""tnsrag_db: a persistent PostgreSQL-backed retrieval store."""
