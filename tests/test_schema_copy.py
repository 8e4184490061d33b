"""The schema the tests validate against is the protocol's own, byte for byte."""

from __future__ import annotations

import pytest

from conftest import REPO

COPY = REPO / "tests" / "schema"
REFERENCE = REPO.parent / "shared" / "rcp"


def test_schema_copy_and_license_are_present() -> None:
    assert (COPY / "rcp-1.0.json").is_file() and (COPY / "LICENSE").is_file()
    assert "MIT License" in (COPY / "LICENSE").read_text("utf-8")


@pytest.mark.skipif(not (REFERENCE / "rcp-1.0.json").is_file(),
                    reason="no ../shared/rcp beside this checkout to compare with")
@pytest.mark.parametrize("name", ["rcp-1.0.json", "LICENSE"])
def test_schema_copy_matches_the_reference(name: str) -> None:
    assert (COPY / name).read_bytes() == (REFERENCE / name).read_bytes(), (
        f"tests/schema/{name} differs from ../shared/rcp/{name}: copy it again")
