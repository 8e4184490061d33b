"""Untrusted frames against every transport: any bytes in, exactly one well-formed JSON answer out.

Hypothesis throws arbitrary JSON at every method and at the framing itself —
lone UTF-16 surrogates in every string position (ids, methods, keys, values),
numbers no float holds (``1e400``, a 5,000-digit integer) written as raw JSON
text, and nesting up to 100,000 levels deep — through the in-process dispatcher,
a real ``rcp-agentic serve --stdio`` subprocess and a real ``serve --http`` one.
Properties, per transport: no crash, no unanswered request, no answer that is
not JSON, exactly one answer per request (none per valid notification), the
request's own id echoed, and never -32603: malformed input is the caller's fault
and deserves a specific code. Each transport's counts are printed (run with -s).
"""

from __future__ import annotations

import json
import math
import queue
import shutil
import subprocess
import sys
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from conftest import REPO, free_port, running_server
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from rcp_agentic import Engine
from rcp_agentic.protocol.dispatcher import Dispatcher, dumps
from rcp_agentic.jsonio import MAX_DEPTH
from rcp_agentic.protocol.methods import RCP_METHODS

# Every code but -32603: a hostile frame is always the caller's fault.
ALLOWED = {-32700, -32600, -32602, -32001, -32002, -32003, -32004, -32005, -32006, -32010,
           -32012, -32013, -32014, -32015, -32016}
ANSWER_TIMEOUT = 30.0  # seconds a transport may take to answer one frame


class Raw:
    """A JSON literal written as is, for numbers Python's json module would not produce."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        return f"Raw({self.text[:20]!r}{'…' if len(self.text) > 20 else ''})"


def encode(value: Any) -> str:
    """JSON text of ``value`` (ASCII: lone surrogates become escapes), with Raw literals inlined."""
    if isinstance(value, Raw):
        return value.text
    if isinstance(value, dict):
        return "{" + ",".join(json.dumps(str(k)) + ":" + encode(v) for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ",".join(encode(v) for v in value) + "]"
    return json.dumps(value)


SURROGATE = st.characters(categories=["Cs"])
STR = st.text(max_size=12) | st.builds(lambda a, s, b: a + s + b, st.text(max_size=4), SURROGATE,
                                       st.text(max_size=4))
HUGE = st.sampled_from(["1e400", "-1e400", "1e-400", "1" + "0" * 5000, "-" + "9" * 4000,
                        "123456789012345678901234567890", "NaN", "Infinity"]).map(Raw)
NUMBERS = (st.integers(min_value=-2**40, max_value=2**40)
           | st.floats(allow_nan=False, allow_infinity=False) | HUGE)
SCALARS = st.none() | st.booleans() | NUMBERS | STR
JSON = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=4)
                    | st.dictionaries(STR, inner, max_size=4), max_leaves=12)
# Keys each method reads, so the fuzz reaches past the first missing-field check.
KEYS = st.sampled_from(["query", "k", "mode", "unit", "filter", "fusion", "rerank", "mmr",
                        "recency", "minScore", "tokenBudget", "sessionId", "candidateK",
                        "cursor", "indexVersion", "inputs", "kind", "encoding", "passages",
                        "topN", "documents", "ids", "signals", "_meta", "level", "strict",
                        "includeText", "protocolVersion", "nonce", "texts"]) | STR
FIELDS = st.sampled_from(["lang", "year", "score", "tags", "reviewed", "published", "doc_id",
                          "title", "modified"]) | STR
OPS = st.sampled_from(["eq", "ne", "gt", "gte", "lt", "lte", "in", "nin", "contains", "exists"])
LEAF = st.fixed_dictionaries({"field": FIELDS, "op": OPS, "value": JSON})
FILTERS = st.recursive(LEAF, lambda inner: st.fixed_dictionaries({"not": inner})
                       | st.fixed_dictionaries({"and": st.lists(inner, min_size=1, max_size=3)})
                       | st.fixed_dictionaries({"or": st.lists(inner, min_size=1, max_size=3)}),
                       max_leaves=8)
DOCUMENTS = st.lists(st.dictionaries(st.sampled_from(["id", "text", "title", "meta", "trust",
                                                      "uri", "source"]), JSON | STR, max_size=5)
                     | st.fixed_dictionaries({"text": STR.filter(str.strip)}, optional={
                         "id": STR, "title": STR, "meta": st.dictionaries(STR, JSON, max_size=3)}),
                     min_size=1, max_size=3)
META = st.fixed_dictionaries({}, optional={"deadlineMs": NUMBERS, "progressToken": STR | NUMBERS})
PARAMS = st.dictionaries(KEYS, JSON | FILTERS, max_size=5)
# What each method reads, so most frames get past the first missing-field check.
METHOD_PARAMS = {
    "retrieve": st.fixed_dictionaries({"query": STR | JSON}, optional={
        "filter": FILTERS | JSON, "cursor": STR, "sessionId": STR, "tokenBudget": NUMBERS,
        "k": NUMBERS, "indexVersion": STR, "mode": STR, "unit": STR, "minScore": NUMBERS,
        "candidateK": NUMBERS, "fusion": JSON, "mmr": JSON, "recency": JSON, "_meta": META}),
    "index/add": st.fixed_dictionaries({"documents": DOCUMENTS}),
    "index/delete": st.fixed_dictionaries({"ids": st.lists(STR, max_size=3) | JSON}),
    "embed": st.fixed_dictionaries({"inputs": st.lists(STR | JSON, min_size=1, max_size=3)},
                                   optional={"kind": STR, "encoding": STR}),
    "ping": st.fixed_dictionaries({"nonce": JSON}),
    "feedback": st.fixed_dictionaries({"signals": st.lists(st.fixed_dictionaries(
        {"hitId": STR}, optional={"helpful": JSON, "reward": NUMBERS}), max_size=2) | JSON},
        optional={"sessionId": STR, "query": STR}),
    "info": st.just({}),
}
READS = sorted(m for m in RCP_METHODS if m not in ("shutdown", "index/add", "index/delete"))
KNOWN = READS + ["index/add", "index/delete", "x-vendor/thing", "x-rcp-agentic/nope", "nope/nope"]
# Mostly methods the server knows (the paths worth reaching), sometimes any string.
METHODS = st.integers(0, 9).flatmap(lambda i: STR if i == 0 else st.sampled_from(KNOWN))
IDS = st.integers(min_value=-2**53, max_value=2**53) | STR | HUGE | JSON


@dataclass
class Frame:
    """One line/body to send and what must come back."""

    text: str
    answered: bool  # one answer expected (False: valid notifications only, no answer)
    id: Any = None  # the id the answer must carry
    batch: list[Any] | None = None  # for a batch: the ids of its answers, in order
    method: str | None = None  # a printable ASCII method, for HTTP's /rcp/<method> route

    def __repr__(self) -> str:
        return f"Frame({self.text[:300]!r}{'…' if len(self.text) > 300 else ''})"


_serial = iter(range(1, 10**9))


def _depth(value: Any) -> int:
    """How deep arrays/objects nest in ``value`` (iteratively)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (list, dict)):
            deepest = max(deepest, depth)
            stack.extend((c, depth + 1) for c in (item.values() if isinstance(item, dict)
                                                  else item))
    return deepest


def _one(msg: Any) -> tuple[bool, Any]:
    """JSON-RPC 2.0: whether ``msg`` gets an answer, and the id that answer carries."""
    if not isinstance(msg, dict):
        return True, None
    if "id" not in msg:  # a valid notification is never answered
        return not (msg.get("jsonrpc") == "2.0" and isinstance(msg.get("method"), str)), None
    id_ = msg["id"]
    ok_id = (isinstance(id_, str) or (isinstance(id_, int) and not isinstance(id_, bool))
             or (isinstance(id_, float) and math.isfinite(id_)))
    return True, id_ if ok_id else None


def _expected(text: str) -> Frame:
    """What the server must answer to ``text``, decided from the JSON-RPC rules alone."""
    try:
        msg = json.loads(text)
    except (ValueError, RecursionError):
        return Frame(text, True, None)  # -32700: not JSON
    if _depth(msg) > MAX_DEPTH:
        return Frame(text, True, None)  # -32700: deeper than any RCP message
    if isinstance(msg, list) and 0 < len(msg) <= 64:
        ids = [id_ for answered, id_ in map(_one, msg) if answered]
        return Frame(text, bool(ids), None, ids)
    method = msg.get("method") if isinstance(msg, dict) else None
    printable = isinstance(method, str) and method.isascii() and method.isprintable()
    return Frame(text, *_one(msg), method=method if printable and method else None)


@st.composite
def requests(draw: st.DrawFn) -> Frame:
    """A request, unique per example (a numeric id or a counter-prefixed string id)."""
    n = next(_serial)
    id_: Any = draw(st.sampled_from(["int", "str", "str", "raw"]))
    id_ = {"int": n, "str": f"{n}-{draw(STR)}", "raw": None}[id_]
    method = draw(st.sampled_from(list(METHOD_PARAMS)) | METHODS)
    params = draw(st.integers(0, 4).flatmap(
        lambda i: METHOD_PARAMS.get(method, PARAMS) if i else PARAMS))
    msg: dict[str, Any] = {"jsonrpc": "2.0", "method": method, "params": params}
    msg["id"] = id_ if id_ is not None else draw(IDS)
    return _expected(encode(msg))


@st.composite
def odd_frames(draw: st.DrawFn) -> Frame:
    """Framing abuse: deep nesting as raw text, notifications, bad envelopes, raw JSON values."""
    kind = draw(st.sampled_from(["nest-array", "nest-object", "nest-filter", "nest-params",
                                 "notification", "value", "envelope"]))
    depth = draw(st.sampled_from([1, 2, MAX_DEPTH - 1, MAX_DEPTH, MAX_DEPTH + 1, 1_200, 100_000])
                 | st.integers(1, 100_000))
    n = next(_serial)
    if kind == "nest-array":
        text = "[" * depth + "]" * depth
    elif kind == "nest-object":
        text = '{"a":' * depth + "0" + "}" * depth
    elif kind == "nest-filter":
        leaf = '{"field":"lang","op":"eq","value":"en"}'
        text = (f'{{"jsonrpc":"2.0","id":{n},"method":"retrieve","params":{{"query":"x",'
                f'"filter":' + '{"not":' * depth + leaf + "}" * depth + "}}")
    elif kind == "nest-params":
        text = (f'{{"jsonrpc":"2.0","id":{n},"method":"{draw(METHODS.filter(str.isascii))}",'
                f'"params":{{"nonce":' + "[" * depth + "]" * depth + "}}")
    elif kind == "notification":
        text = encode({"jsonrpc": "2.0", "method": draw(METHODS | st.just("notifications/cancel")),
                       "params": draw(PARAMS | st.fixed_dictionaries({"id": IDS}))})
    elif kind == "value":
        text = encode(draw(JSON))
    else:
        text = encode(draw(st.dictionaries(st.sampled_from(["jsonrpc", "id", "method", "params"]),
                                           JSON, max_size=4)) | {"id": n})
    return _expected(text)


FRAMES = st.one_of(odd_frames(), requests(), requests())
# The frames issue 9 found, run first on every transport whatever Hypothesis draws.
KNOWN_BAD = [
    "[" * 1200 + "]" * 1200,
    '{"a":' * 100_000 + "0" + "}" * 100_000,
    '{"jsonrpc":"2.0","id":"\\ud800","method":"ping","params":{"nonce":"\\udc00"}}',
    ('{"jsonrpc":"2.0","id":7,"method":"retrieve","params":{"query":"x",'
     '"filter":{"field":"x\\ud800","op":"eq","value":"\\udfff"}}}'),
    '{"jsonrpc":"2.0","id":8,"method":"ping","params":{"nonce":1e400}}',
    '{"jsonrpc":"2.0","id":1e400,"method":"ping"}',
    '{"a":0}',  # no id, not a request: still answered (-32600, id null)
]


@dataclass
class Tally:
    """What one transport did with the fuzz."""

    name: str
    examples: int = 0
    crashes: int = 0
    unanswered: int = 0
    non_json: int = 0
    internal: int = 0
    problems: list[str] = field(default_factory=list)

    def check(self, frame: Frame, answers: list[Any]) -> None:
        """Judge the answers one frame got; counts and remembers what went wrong."""
        if not frame.answered:
            assert answers == [], (frame, answers)
            return
        if not answers:
            self.unanswered += 1
        assert len(answers) == 1, (frame, answers)
        if frame.batch is None:
            self._judge(frame, answers[0], frame.id)
            return
        assert isinstance(answers[0], list), (frame, answers)
        assert [o.get("id") for o in answers[0]] == frame.batch, (frame, answers)
        for out, id_ in zip(answers[0], frame.batch):
            self._judge(frame, out, id_)

    def _judge(self, frame: Frame, out: Any, id_: Any) -> None:
        assert isinstance(out, dict) and out.get("jsonrpc") == "2.0", (frame, out)
        assert out.get("id") == id_ and "id" in out, (frame, out)
        assert ("result" in out) != ("error" in out), (frame, out)
        if "error" in out:
            code = out["error"].get("code")
            if code == -32603:
                self.internal += 1
            assert code in ALLOWED, (frame, out)

    def report(self) -> str:
        return (f"{self.name}: {self.examples} examples, {self.crashes} crashes, "
                f"{self.unanswered} unanswered, {self.non_json} non-JSON, {self.internal} -32603")


def _fuzz(tally: Tally, answer: Any, examples: int) -> None:
    """Run ``examples`` frames through ``answer(frame) -> answers`` and assert the tally is clean."""

    @settings(max_examples=examples, deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                     HealthCheck.large_base_example])
    @given(frame=FRAMES)
    def one(frame: Frame) -> None:
        tally.examples += 1
        tally.check(frame, answer(frame))

    for text in KNOWN_BAD:
        one = example(frame=_expected(text))(one)
    try:
        one()
    finally:
        print("\n" + tally.report())
    assert tally.crashes == tally.unanswered == tally.non_json == tally.internal == 0, \
        tally.report()


def _copy_engine(engine_dir: Path, tmp_path: Path) -> Path:
    target = tmp_path / "engine"
    shutil.copytree(engine_dir, target)
    return target


# --- in-process ------------------------------------------------------------------------


def test_fuzz_in_process(engine_dir: Path, tmp_path: Path, embedder: Any) -> None:
    with Engine(_copy_engine(engine_dir, tmp_path), embedder=embedder) as eng:
        rpc = Dispatcher(eng)
        rpc.handle({"jsonrpc": "2.0", "id": 0, "method": "initialize",
                    "params": {"protocolVersion": 1}})
        tally = Tally("in-process")

        def answer(frame: Frame) -> list[Any]:
            try:
                text = rpc.handle_text(frame.text)
            except BaseException:
                tally.crashes += 1
                raise
            if text is None:
                return []
            try:
                text.encode("utf-8")  # what a transport writes
                return [json.loads(text)]
            except ValueError:  # UnicodeEncodeError included
                tally.non_json += 1
                raise

        _fuzz(tally, answer, 200)


# --- stdio -----------------------------------------------------------------------------


class StdioServer:
    """A real ``rcp-agentic serve --stdio`` with a reader thread over its stdout."""

    def __init__(self, engine: Path, stderr: Path) -> None:
        self._stderr = stderr.open("wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "rcp_agentic.cli", "serve", "--stdio", "--engine", str(engine)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr, cwd=REPO)
        self.lines: queue.Queue[bytes] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line)

    def send(self, text: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(text.encode("utf-8") + b"\n")
        self.proc.stdin.flush()

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        self.proc.wait(timeout=60)
        self._stderr.close()


@pytest.fixture()
def stdio_server(engine_dir: Path, tmp_path: Path) -> Iterator[StdioServer]:
    server = StdioServer(_copy_engine(engine_dir, tmp_path), tmp_path / "stderr.log")
    try:
        server.send(json.dumps({"jsonrpc": "2.0", "id": "init", "method": "initialize",
                                "params": {"protocolVersion": 1}}))
        assert b'"init"' in server.lines.get(timeout=ANSWER_TIMEOUT)
        yield server
    finally:
        server.close()


def test_fuzz_stdio(stdio_server: StdioServer) -> None:
    tally = Tally("stdio")

    def answer(frame: Frame) -> list[Any]:
        # A ping after each frame: once it and the frame's own answer are back, nothing
        # else may belong to the frame (requests run concurrently, so either may be first).
        sentinel = f"sentinel-{next(_serial)}"
        stdio_server.send(frame.text)
        stdio_server.send(json.dumps({"jsonrpc": "2.0", "id": sentinel, "method": "ping"}))
        answers: list[Any] = []
        pinged = False
        while not pinged or (frame.answered and not answers):
            try:
                line = stdio_server.lines.get(timeout=ANSWER_TIMEOUT)
            except queue.Empty:
                if stdio_server.proc.poll() is not None:
                    tally.crashes += 1
                break
            try:
                out = json.loads(line)
            except ValueError:
                tally.non_json += 1
                raise
            if isinstance(out, dict) and out.get("method") == "notifications/progress":
                continue
            if isinstance(out, dict) and out.get("id") == sentinel:
                pinged = True
            else:
                answers.append(out)
        assert stdio_server.proc.poll() is None, "the stdio server exited"
        return answers

    _fuzz(tally, answer, 150)


# --- HTTP ------------------------------------------------------------------------------


@pytest.fixture()
def http_base(engine_dir: Path, tmp_path: Path) -> Iterator[str]:
    port = free_port()
    base = f"http://127.0.0.1:{port}"

    def ready() -> bool:
        try:
            post(base, '{"jsonrpc":"2.0","id":0,"method":"ping"}')
            return True
        except OSError:
            return False

    with running_server([sys.executable, "-m", "rcp_agentic.cli", "serve", "--http", "--port",
                         str(port), "--engine", str(_copy_engine(engine_dir, tmp_path)),
                         "--allow-anonymous-writes"], ready, timeout=120):
        yield base


def post(base: str, body: str, method: str | None = None) -> tuple[int, str, bytes]:
    """POST ``body`` to ``/rcp`` (or ``/rcp/<method>``): status, content type and raw body."""
    path = "/rcp" if method is None else "/rcp/" + urllib.parse.quote(method, safe="/")
    request = urllib.request.Request(base + path, data=body.encode("utf-8"), method="POST",
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=ANSWER_TIMEOUT) as resp:
            return resp.status, resp.headers.get("content-type", ""), resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers.get("content-type", ""), exc.read()


def test_fuzz_http(http_base: str) -> None:
    tally = Tally("http")

    def answer(frame: Frame) -> list[Any]:
        try:
            # Half the frames naming a method go to its own route, /rcp/<method>.
            status, ctype, body = post(http_base, frame.text,
                                       frame.method if len(frame.text) % 2 else None)
        except OSError:  # refused or dropped connection: the server is gone or gave up
            tally.crashes += 1
            raise
        assert status != 500, (frame, body[:500])
        if status == 204:
            assert not body
            return []
        try:
            out = json.loads(body)
        except ValueError:
            tally.non_json += 1
            raise
        assert ctype.startswith("application/json"), (frame, status, ctype)
        return [out]

    _fuzz(tally, answer, 150)


# --- the dispatcher's own guarantees -----------------------------------------------------


@pytest.fixture(scope="module")
def rpc(filled_engine: Engine) -> Dispatcher:
    d = Dispatcher(filled_engine)
    d.handle({"jsonrpc": "2.0", "id": 0, "method": "initialize",
              "params": {"protocolVersion": 1}})
    return d


@settings(max_examples=200, deadline=None)
@given(frame=JSON)
def test_any_parsed_frame_is_answered_or_ignored(rpc: Dispatcher, frame: Any) -> None:
    try:
        value = json.loads(encode(frame))  # Raw literals become inf or huge ints, as on the wire
    except ValueError:  # over 4,300 digits: not a value (the framing tests send it as text)
        assume(False)
    response = rpc.handle(value)
    if response is None:
        return  # a notification (or a batch of them)
    out = json.loads(dumps(response))
    for one in out if isinstance(out, list) else [out]:
        assert isinstance(one, dict) and one.get("jsonrpc") == "2.0"
        assert "result" in one or one["error"]["code"] in ALLOWED, (frame, one)


@settings(max_examples=60, deadline=None)
@given(documents=DOCUMENTS)
def test_bad_documents_never_corrupt_the_store(tmp_path_factory: pytest.TempPathFactory,
                                               embedder: Any, documents: list[Any]) -> None:
    eng = Engine(tmp_path_factory.mktemp("fuzz") / "e", embedder=embedder)
    try:
        rpc = Dispatcher(eng)
        rpc.handle({"jsonrpc": "2.0", "id": 0, "method": "initialize",
                    "params": {"protocolVersion": 1}})
        rpc.handle({"jsonrpc": "2.0", "id": 1, "method": "index/add",
                    "params": {"documents": [{"id": "keep", "text": "kept text"}]}})
        before = eng.stats()
        text = rpc.handle_text(encode({"jsonrpc": "2.0", "id": 2, "method": "index/add",
                                       "params": {"documents": documents}}))
        response = json.loads(text or "")
        assert "result" in response or response["error"]["code"] in ALLOWED, response
        if "error" in response:
            assert eng.stats() == before  # nothing of a refused batch was written
        hits = eng.retrieve("kept text", k=1, filter={"field": "doc_id", "op": "eq",
                                                      "value": "keep"}).hits
        assert hits and hits[0].text == "kept text"
    finally:
        eng.close()
