"""The ``rcp.json`` engine registry (RCP §16.1): which engines exist and how to reach them.

A registry is ``{"engines": [{"id", "transport": "stdio"|"http", "command" | "url",
"weight"?, "required"?, "priority"?, ...}]}``. Unknown fields are ignored. For HTTP
engines behind a bearer token, ``"tokenEnv": "NAME"`` names the environment
variable holding it, so the file itself carries no secret.

>>> registry = load_registry("rcp.json")                          # doctest: +SKIP
>>> with registry["docs"].connect() as client:                    # doctest: +SKIP
...     client.retrieve("what is RRF?", k=3)
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import InvalidParams

if TYPE_CHECKING:
    from .async_client import AsyncRCPClient
    from .sync_client import RCPClient


@dataclass(frozen=True)
class EngineSpec:
    """One registry entry: a client-local ``id``, how to reach the engine, and its fusion role."""

    id: str
    transport: str
    command: tuple[str, ...] = ()
    url: str | None = None
    token_env: str | None = None
    cwd: str | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    weight: float = 1.0
    required: bool = False
    priority: int = 0

    @classmethod
    def from_dict(cls, raw: Any, where: str = "engine") -> EngineSpec:
        """Validate one entry; InvalidParams names the offending field."""
        if not isinstance(raw, Mapping):
            raise InvalidParams(f"{where} must be an object", field=where)
        id_ = raw.get("id")
        if not isinstance(id_, str) or not id_:
            raise InvalidParams(f"{where}.id must be a non-empty string", field=f"{where}.id")
        transport = raw.get("transport")
        if transport not in ("stdio", "http"):
            raise InvalidParams(f"{where}.transport must be 'stdio' or 'http'",
                                field=f"{where}.transport")
        command = raw.get("command", [])
        if transport == "stdio" and (not isinstance(command, list) or not command
                                     or not all(isinstance(c, str) for c in command)):
            raise InvalidParams(f"{where}.command must be a non-empty array of strings",
                                field=f"{where}.command")
        url = raw.get("url")
        if transport == "http" and (not isinstance(url, str) or not url.startswith(
                ("http://", "https://"))):
            raise InvalidParams(f"{where}.url must be an http(s) URL", field=f"{where}.url")
        weight = raw.get("weight", 1.0)
        if isinstance(weight, bool) or not isinstance(weight, (int, float)) or weight < 0:
            raise InvalidParams(f"{where}.weight must be a non-negative number",
                                field=f"{where}.weight")
        required = raw.get("required", False)
        if not isinstance(required, bool):
            raise InvalidParams(f"{where}.required must be a boolean", field=f"{where}.required")
        priority = raw.get("priority", 0)
        if isinstance(priority, bool) or not isinstance(priority, int):
            raise InvalidParams(f"{where}.priority must be an integer", field=f"{where}.priority")
        env = raw.get("env", {})
        if not isinstance(env, Mapping) or not all(isinstance(v, str) for v in env.values()):
            raise InvalidParams(f"{where}.env must map names to strings", field=f"{where}.env")
        for name in ("tokenEnv", "cwd"):
            if raw.get(name) is not None and not isinstance(raw.get(name), str):
                raise InvalidParams(f"{where}.{name} must be a string", field=f"{where}.{name}")
        return cls(id=id_, transport=transport, command=tuple(command) if transport == "stdio"
                   else (), url=url if transport == "http" else None,
                   token_env=raw.get("tokenEnv"), cwd=raw.get("cwd"), env=dict(env),
                   weight=float(weight), required=required, priority=priority)

    def _token(self) -> str | None:
        return os.environ.get(self.token_env) if self.token_env else None

    def _env(self) -> dict[str, str] | None:
        return {**os.environ, **self.env} if self.env else None

    def connect(self, **options: Any) -> RCPClient:
        """A synchronous client for this engine (``options`` go to the client)."""
        from .sync_client import RCPClient

        if self.transport == "stdio":
            return RCPClient.stdio(list(self.command), env=self._env(), cwd=self.cwd, **options)
        assert self.url is not None
        return RCPClient.http(self.url, self._token(), **options)

    def connect_async(self, **options: Any) -> AsyncRCPClient:
        """An asyncio client for this engine."""
        from .async_client import AsyncRCPClient

        if self.transport == "stdio":
            return AsyncRCPClient.stdio(list(self.command), env=self._env(), cwd=self.cwd,
                                        **options)
        assert self.url is not None
        return AsyncRCPClient.http(self.url, self._token(), **options)


class Registry(Mapping[str, EngineSpec]):
    """Engines of an ``rcp.json`` by id, in file order (ids are unique)."""

    def __init__(self, engines: Sequence[EngineSpec]) -> None:
        self._engines: dict[str, EngineSpec] = {}
        for i, spec in enumerate(engines):
            if spec.id in self._engines:
                raise InvalidParams(f"engine id {spec.id!r} appears twice",
                                    field=f"engines[{i}].id")
            self._engines[spec.id] = spec

    def __getitem__(self, key: str) -> EngineSpec:
        try:
            return self._engines[key]
        except KeyError:
            raise KeyError(f"no engine {key!r} in the registry (have: "
                           f"{', '.join(self._engines) or 'none'})") from None

    def __iter__(self) -> Iterator[str]:
        return iter(self._engines)

    def __len__(self) -> int:
        return len(self._engines)


def load_registry(source: str | os.PathLike[str] | Mapping[str, Any]) -> Registry:
    """A registry from an ``rcp.json`` path or an already-parsed mapping."""
    if isinstance(source, Mapping):
        raw: Any = source
    else:
        try:
            raw = json.loads(Path(source).read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise InvalidParams(f"cannot read the registry {source}: {exc}",
                                field="registry") from exc
    engines = raw.get("engines") if isinstance(raw, Mapping) else None
    if not isinstance(engines, list):
        raise InvalidParams("a registry needs an 'engines' array", field="engines")
    return Registry([EngineSpec.from_dict(e, f"engines[{i}]") for i, e in enumerate(engines)])
