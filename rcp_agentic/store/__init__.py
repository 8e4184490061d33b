"""Storage: the SQLite docstore (source of truth), in-memory scoring indexes, and Chroma."""
