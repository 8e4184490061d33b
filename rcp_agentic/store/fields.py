"""The filter fields of the docstore: each metadata field's type and whether it was declared
or inferred from the documents that use it."""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping

from ..errors import InvalidParams
from .filters import BUILTIN_FIELDS
from .connection import Connection


class FilterFields:
    """The ``fields`` table: name → (type, origin), origin ``declared`` or ``inferred``."""

    def __init__(self, connection: Connection) -> None:
        self._conn = connection

    def fields(self) -> dict[str, tuple[str, str]]:
        """Filterable fields: name → (type, origin) where origin is 'declared' or 'inferred'."""
        return {n: (t, o) for n, t, o in self._conn.query("SELECT name, type, origin FROM fields")}

    def filterable(self) -> dict[str, str]:
        """Every filterable field and its type: built-ins, declared and inferred fields."""
        out = {name: ftype for name, (ftype, _col) in BUILTIN_FIELDS.items()}
        out.update({n: t for n, (t, _o) in self.fields().items()})
        return out

    @staticmethod
    def set_fields(db: sqlite3.Connection, fields: Mapping[str, str], origin: str) -> None:
        db.executemany("INSERT OR REPLACE INTO fields(name, type, origin) VALUES (?, ?, ?)",
                       [(n, t, origin) for n, t in fields.items()])

    def merge(self, db: sqlite3.Connection, used: Mapping[str, str],
              max_fields: int | None) -> None:
        """Make sure every field a write's metadata uses exists with the type it was stored as.

        Runs inside the write transaction, so it sees what other processes and threads
        committed since the caller typed the metadata: a missing field is inferred, an
        inferred int field meeting a float is widened, any other disagreement is
        InvalidParams naming ``meta.<field>``. Adding fields beyond ``max_fields`` is
        InvalidParams too; the caller's transaction then stores nothing.
        """
        have = {n: (t, o) for n, t, o in db.execute("SELECT name, type, origin FROM fields")}
        new: dict[str, str] = {}
        for name, ftype in used.items():
            current = have.get(name)
            if current is None:
                new[name] = ftype
            elif current[0] == ftype or (current[0], ftype) == ("float", "int"):
                continue
            elif (current[0], ftype, current[1]) == ("int", "float", "inferred"):
                db.execute("UPDATE fields SET type = 'float' WHERE name = ?", (name,))
            else:
                raise InvalidParams(f"metadata field {name!r} is {current[0]} (set by another "
                                    f"write); this document gives it as {ftype}",
                                    field=f"meta.{name}")
        if max_fields is not None and new and len(have) + len(new) > max_fields:
            first = sorted(new)[0]
            raise InvalidParams(
                f"this write would add {len(new)} filter field(s) ({', '.join(sorted(new)[:5])}"
                f"{', …' if len(new) > 5 else ''}) to the {len(have)} the engine holds, over its "
                f"limit of {max_fields} (max_filter_fields); nothing was stored. Declare the "
                "fields you filter on in filter_fields, or raise the limit",
                field=f"meta.{first}")
        self.set_fields(db, new, "inferred")

    @staticmethod
    def drop_unused(db: sqlite3.Connection, candidates: list[str]) -> None:
        """Forget inferred fields among ``candidates`` that no stored document uses any more,
        so a field's first value does not fix its type for good. Declared fields stay."""
        inferred = {n for (n,) in db.execute("SELECT name FROM fields WHERE origin = 'inferred'")}
        for name in candidates:
            if name in inferred and db.execute(
                    "SELECT 1 FROM documents WHERE json_type(fmeta, ?) IS NOT NULL LIMIT 1",
                    (f'$."{name}"',)).fetchone() is None:
                db.execute("DELETE FROM fields WHERE name = ? AND origin = 'inferred'", (name,))
