"""Corpus ingestion: loading files and folders into source documents, then chunking them."""
