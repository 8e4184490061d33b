"""Models the engine runs: the token counter, the BM25 analyzer and the embedders."""
