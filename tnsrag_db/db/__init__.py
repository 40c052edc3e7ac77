"""The database layer: statements built without I/O, and (after the structure refactor)
the engine, migrations, schema and session helpers."""
