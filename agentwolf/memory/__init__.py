"""Long-term memory: the store protocol and its SQLite and PostgreSQL stores, the file and record
faces over them, and how namespaces are built from who started a session (docs/guides/memory.md).
Reached only from activities and operator verbs, never from workflow code."""
