"""Decoding ``embed`` results (§7.3.1): JSON numbers or little-endian f32-base64 blobs.

Vectors come back as lists of floats, or as one ``float32`` numpy matrix
(``inputs × dimension``) when asked; a blob of the wrong length is rejected with
-32602 as the spec requires of a receiver.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

import numpy as np

from .errors import InvalidParams


def decode_vectors(result: dict[str, Any], *, as_numpy: bool = False) -> dict[str, Any]:
    """``result`` with ``vectors`` decoded; ``encoding`` still says what travelled on the wire."""
    encoding = result.get("encoding", "json")
    vectors = result.get("vectors")
    if not isinstance(vectors, list):
        raise InvalidParams("the embed result has no vectors array", field="vectors")
    if encoding == "json":
        if not as_numpy:
            return result
        dim = result.get("dimension")
        matrix = np.asarray(vectors, dtype=np.float32)
        if not vectors and isinstance(dim, int):
            matrix = matrix.reshape(0, dim)
        return {**result, "vectors": matrix}
    if encoding != "f32-base64":
        raise InvalidParams(f"the server used encoding {encoding!r}, which was not requested",
                            field="encoding")
    dim = result.get("dimension")
    if isinstance(dim, bool) or not isinstance(dim, int) or dim < 1:
        raise InvalidParams("an f32-base64 result needs a positive integer dimension",
                            field="dimension")
    blobs = []
    for i, blob in enumerate(vectors):
        try:
            raw = base64.b64decode(blob, validate=True) if isinstance(blob, str) else None
        except binascii.Error:
            raw = None
        if raw is None or len(raw) != dim * 4:
            raise InvalidParams(f"vectors[{i}] is not {dim} little-endian float32 values in "
                                "base64", field=f"vectors[{i}]")
        blobs.append(raw)
    matrix = np.frombuffer(b"".join(blobs), dtype="<f4").reshape(len(blobs), dim)
    decoded: Any = matrix.astype(np.float32) if as_numpy else matrix.tolist()
    return {**result, "vectors": decoded}
