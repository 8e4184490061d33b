"""A key never reaches ``config.json`` through ``llm_base_url``: a URL carrying a user, a
password or a key-like query parameter is refused, from arguments, the environment, the
CLI and a file already on disk, and the refusal names the part without echoing it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

from conftest import REPO
from rcp_agentic.config import CONFIG_FILE, EngineConfig, credential_part
from rcp_agentic.engine import Engine
from rcp_agentic.errors import InvalidParams

SECRET = "sk-secret"
REFUSED = [
    f"http://user:{SECRET}@127.0.0.1:1/v1",
    f"https://{SECRET}@api.example.com/v1",  # a key as the user name
    f"http://127.0.0.1:8080/v1?api_key={SECRET}",
    f"http://127.0.0.1:8080/v1?model=x&API-Key={SECRET}",
    f"http://127.0.0.1:8080/v1?Key={SECRET}",
    f"http://127.0.0.1:8080/v1?token={SECRET}",
    f"http://127.0.0.1:8080/v1?ACCESS_TOKEN={SECRET}",
    f"http://127.0.0.1:8080/v1#access_token={SECRET}",
]
MESSAGE = ("must not carry credentials", "environment variable named by llm_api_key_env")


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "rcp_agentic.cli", *args], capture_output=True,
                          text=True, env=dict(os.environ), timeout=300, cwd=REPO)


def _no_secret_under(folder: Path) -> bool:
    return all(SECRET.encode() not in f.read_bytes() for f in folder.rglob("*") if f.is_file())


def test_the_credential_part_is_named_not_shown() -> None:
    assert credential_part(REFUSED[0]) == "user:password@ before the host"
    assert credential_part(REFUSED[1]) == "user:password@ before the host"
    assert credential_part(REFUSED[3]) == "a 'api_key' query parameter"
    for plain in ("http://127.0.0.1:8080/v1", "https://api.openai.com/v1",
                  "https://x.openai.azure.com/openai?api-version=2024-02-01",
                  "http://127.0.0.1:8080/v1?keyword=bone&tokens=5",
                  "http://127.0.0.1:8080/v1/users/me@home"):  # '@' in the path, not the host
        assert credential_part(plain) is None, plain


@pytest.mark.parametrize("url", REFUSED)
def test_a_config_with_credentials_in_the_llm_url_is_refused(url: str) -> None:
    with pytest.raises(ValidationError) as err:
        EngineConfig(llm_base_url=url, llm_model="m")
    assert isinstance(err.value, ValueError)
    assert all(m in str(err.value) for m in MESSAGE) and SECRET not in str(err.value)
    config = EngineConfig(llm_base_url="http://127.0.0.1:8080/v1", llm_model="m")
    with pytest.raises(ValidationError) as err:
        config.llm_base_url = url  # assignment is validated too
    assert SECRET not in str(err.value) and config.llm_base_url == "http://127.0.0.1:8080/v1"


def test_a_key_given_as_the_url_is_refused_without_echo() -> None:
    with pytest.raises(ValidationError, match="must be an http") as err:
        EngineConfig(llm_base_url=SECRET, llm_model="m")
    assert SECRET not in str(err.value)


def test_resolve_refuses_credentials_from_arguments_and_environment(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(InvalidParams, match="must not carry credentials") as err:
        EngineConfig.resolve(tmp_path, llm_base_url=REFUSED[0])
    assert err.value.field == "llm_base_url" and SECRET not in repr(err.value)
    monkeypatch.setenv("RCP_AGENTIC_LLM_BASE_URL", REFUSED[2])
    with pytest.raises(InvalidParams, match="'api_key' query parameter") as err:
        EngineConfig.resolve(tmp_path)
    assert SECRET not in repr(err.value)
    assert not (tmp_path / CONFIG_FILE).exists()


def test_the_cli_refuses_a_url_with_credentials_and_saves_nothing(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.txt").write_text("Vitamin D deficiency is associated with bone loss.", "utf-8")
    engine = tmp_path / "engine"
    res = run_cli("index", str(docs), "--engine", str(engine), "--quiet",
                  "--llm-base-url", REFUSED[0], "--llm-model", "m")
    assert res.returncode != 0
    assert all(m in res.stderr for m in MESSAGE), res.stderr
    assert SECRET not in res.stderr + res.stdout
    assert not (engine / CONFIG_FILE).exists() and _no_secret_under(tmp_path / "engine")


def _hand_written(engine: Path) -> None:
    engine.mkdir()
    (engine / CONFIG_FILE).write_text(json.dumps({"llm_base_url": REFUSED[0],
                                                  "llm_model": "m"}), "utf-8")


def test_a_config_file_with_credentials_is_refused_on_open(tmp_path: Path) -> None:
    engine = tmp_path / "engine"
    _hand_written(engine)
    with pytest.raises(InvalidParams, match="must not carry credentials") as err:
        Engine(engine)
    assert SECRET not in repr(err.value) and SECRET not in str(err.value.to_wire())
    assert not (engine / "engine.db").exists()


def test_the_cli_refuses_a_config_file_with_credentials_without_echo(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.txt").write_text("Vitamin D deficiency is associated with bone loss.", "utf-8")
    engine = tmp_path / "engine"
    _hand_written(engine)
    # --tree rewrites the stored config first (cli.index._enable): that path refuses it too.
    for extra in ((), ("--tree",)):
        res = run_cli("index", str(docs), *extra, "--engine", str(engine), "--quiet")
        assert res.returncode != 0, extra
        assert "must not carry credentials" in res.stderr, res.stderr
        assert SECRET not in res.stderr + res.stdout, extra
    assert not (engine / "engine.db").exists()
