"""Every response body the client parses, fuzzed (#66): a typed error (`HsstoreError`) or the right value, never
another exception.

The bodies are a real server's (the tiny model): a features body in each wire format, a batch, a dataset index,
JSON listings, info and an error answer. Hypothesis mutates them (bytes flipped, cut, inserted or repeated; a node of
a JSON document or of a chunk header replaced by any JSON, the header's checksum made right again so the decoder
reads past it) and a client reads them through its transport seam (an httpx transport that replays them). A
verified body (features, dataset index) that still decodes must give exactly what was stored; a JSON body, which
nothing signs, must give a model or a typed error.
"""

from __future__ import annotations

import contextlib
import json
import os
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from client import FeatureClient, HsstoreError
from client.transport import batch_error
from schemas import datasets
from schemas.api import FeatureRead
from schemas.chunk_body import MAGIC, VERSION
from schemas.chunks import crc32c
from schemas.http import BodyFormat, accept_header
from tests.support.sample_fuzz import any_json

SCALE = float(os.environ.get("HSSTORE_FUZZ_SCALE", "1"))
SAMPLE = {"id": "wire", "text": "fuzz the wire: every byte a client accepts is checked"}


@dataclass(repr=False)
class Recorded:
    """One real answer: what a request got, to be replayed mutated."""

    status: int
    headers: dict[str, str]
    body: bytes


@dataclass
class Wire:
    answers: dict[str, Recorded] = field(repr=False)  # by the name of the read that asked for it
    key: FeatureRead
    hidden_states: np.ndarray = field(repr=False)
    content_hash: str
    dataset_id: str


def _record(response: httpx.Response) -> Recorded:
    keep = {k: v for k, v in response.headers.items() if k.lower() not in ("content-length", "content-encoding")}
    return Recorded(response.status_code, keep, response.content)


@pytest.fixture
def wire(live_url: str) -> Wire:
    with FeatureClient(live_url) as client, httpx.Client(base_url=live_url, timeout=60) as http:
        client.extract([SAMPLE])
        features = client.get(SAMPLE)
        manifest = features.manifest
        key = FeatureRead(
            prompt_hash=manifest.prompt_hash,
            model_revision=manifest.model_revision,
            backend=manifest.backend,
            featureset_id=manifest.featureset_id,
            content_hash=manifest.content_hash,
        )
        params = key.read_params()
        path = f"/v1/features/{key.prompt_hash}"
        info = client.create_dataset("wire", [key])
        batch = {"keys": [key.model_dump(mode="json", exclude_none=True)]}
        answers = {
            form.value: _record(http.get(path, params=params, headers={"accept": accept_header(form)}))
            for form in (BodyFormat.CHUNKS, BodyFormat.SAFETENSORS)
        } | {
            "batch": _record(
                http.post("/v1/features:batch", json=batch, headers={"accept": accept_header(BodyFormat.CHUNKS)})
            ),
            "dataset": _record(http.get(f"/v1/datasets/{info.dataset_id}/index")),
            "entries": _record(http.get("/v1/entries")),
            "info": _record(http.get("/v1/info")),
            "error": _record(http.get(f"/v1/features/{'0' * 64}")),
        }
        assert answers["error"].status == 404
        hidden = features.hidden_states.float().numpy()
        return Wire(answers, key, hidden, features.manifest.content_hash, info.dataset_id)


# -- mutations -------------------------------------------------------------------------------------------------------
_EDITS = st.lists(
    st.tuples(
        st.sampled_from(["flip", "cut", "insert", "repeat", "drop"]),
        st.floats(0, 1, exclude_max=True),
        st.integers(1, 64),
        st.binary(min_size=1, max_size=8),
    ),
    min_size=1,
    max_size=3,
)


def _edit(body: bytes, edits: list[tuple[str, float, int, bytes]]) -> bytes:
    out = bytearray(body)
    for kind, where, size, data in edits:
        at = int(where * len(out)) if out else 0
        if kind == "flip" and out:
            out[at] ^= 1 << (size % 8)
        elif kind == "cut":
            del out[at:]
        elif kind == "insert":
            out[at:at] = data
        elif kind == "repeat":
            out[at:at] = out[at : at + size]
        else:
            del out[at : at + size]
    return bytes(out)


def _json_paths(document: Any) -> list[list[Any]]:
    """Every node's path in a JSON document (iteratively: fuzzed documents may be deep)."""
    paths: list[list[Any]] = []
    stack: list[tuple[Any, list[Any]]] = [(document, [])]
    while stack:
        node, path = stack.pop()
        paths.append(path)
        if isinstance(node, dict):
            stack.extend((v, [*path, k]) for k, v in node.items())
        elif isinstance(node, list):
            stack.extend((v, [*path, i]) for i, v in enumerate(node))
    return paths


def _replaced(document: Any, where: float, value: Any) -> Any:
    paths = _json_paths(document)
    path = paths[int(where * len(paths))]
    if not path:
        return value
    node = document
    for part in path[:-1]:
        node = node[part]
    node[path[-1]] = value
    return document


def _json_bytes(value: Any) -> bytes:
    try:
        return json.dumps(value).encode()
    except (TypeError, ValueError, RecursionError):
        return b"{"


def _json_mutated(body: bytes, where: float, value: Any) -> bytes:
    try:
        return json.dumps(_replaced(json.loads(body), where, value)).encode()
    except (TypeError, ValueError, RecursionError):  # a value no JSON text holds (NaN survives: Python reads it)
        return body


_PREFIX = struct.Struct("<4sBI")  # the chunk body's (schemas/chunk_body.py's layout)


def _header_mutated(body: bytes, where: float, value: Any) -> bytes:
    """A chunk body whose header has one node replaced, re-encoded with its length and checksum made right."""
    _, _, length = _PREFIX.unpack_from(body)
    start = _PREFIX.size
    header = json.loads(body[start : start + length])
    try:
        raw = json.dumps(_replaced(header, where, value)).encode()
    except (TypeError, ValueError, RecursionError):
        return body
    head = _PREFIX.pack(MAGIC, VERSION, len(raw)) + raw
    return head + crc32c(head) + body[start + length + 4 :]


mutations = st.one_of(
    st.tuples(st.just("bytes"), _EDITS),
    st.tuples(st.just("json"), st.tuples(st.floats(0, 1, exclude_max=True), any_json)),
)


def _mutate(name: str, body: bytes, how: tuple[str, Any]) -> bytes:
    kind, detail = how
    if kind == "bytes":
        return _edit(body, detail)
    where, value = detail
    if name == BodyFormat.CHUNKS.value:
        return _header_mutated(body, where, value)
    if name in ("entries", "info", "error"):
        return _json_mutated(body, where, value)
    return _edit(body, [("flip", where, 1, b"")])


# -- reads -----------------------------------------------------------------------------------------------------------
def _replaying(answer: Recorded) -> httpx.Client:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(answer.status, headers=answer.headers, stream=httpx.ByteStream(answer.body))

    return httpx.Client(base_url="http://hsstore.test", transport=httpx.MockTransport(handler))


def _features_equal(wire: Wire, features: Any) -> None:
    assert features.manifest.content_hash == wire.content_hash
    assert np.array_equal(features.hidden_states.float().numpy(), wire.hidden_states)


READS: dict[str, Callable[[FeatureClient, Wire], Any]] = {
    BodyFormat.CHUNKS.value: lambda c, w: _features_equal(w, c.fetch(w.key.key, w.key.layers, w.key.tokens)),
    BodyFormat.SAFETENSORS.value: lambda c, w: _features_equal(w, c.fetch(w.key.key, w.key.layers, w.key.tokens)),
    "batch": lambda c, w: [_features_equal(w, f) for f in c.get_batch([w.key])],
    "dataset": lambda c, w: c.dataset(w.dataset_id),
    "entries": lambda c, w: c.entries_page(),
    "info": lambda c, w: c.info(),
    "error": lambda c, w: c.get(prompt_hash="0" * 64),
}


@settings(max_examples=int(300 * SCALE), deadline=None, suppress_health_check=list(HealthCheck))
@given(name=st.sampled_from(sorted(READS)), how=mutations)
def test_every_body_the_client_parses_gives_a_typed_error_or_the_right_value(
    wire: Wire, name: str, how: tuple[str, Any]
) -> None:
    answer = wire.answers[name]
    mutated = Recorded(answer.status, answer.headers, _mutate(name, answer.body, how))
    wire_format = BodyFormat.SAFETENSORS if name == BodyFormat.SAFETENSORS.value else BodyFormat.CHUNKS
    client = FeatureClient(http=_replaying(mutated), wire_format=wire_format)
    with client, contextlib.suppress(HsstoreError):  # typed: what the caller can catch
        READS[name](client, wire)


@settings(max_examples=int(200 * SCALE), deadline=None, suppress_health_check=list(HealthCheck))
@given(how=mutations)
def test_a_dataset_index_decodes_to_what_was_stored_or_says_why(wire: Wire, how: tuple[str, Any]) -> None:
    """The index decoder itself: held to the dataset's id, only the stored bytes decode; read without one (past the
    hash check, into the header and records) any bytes give an index or a DatasetError."""
    original = wire.answers["dataset"].body
    body = _mutate("dataset", original, how)
    with contextlib.suppress(datasets.DatasetError):
        datasets.decode(body)
    try:
        index = datasets.decode(body, wire.dataset_id)
    except datasets.DatasetError:
        assert body != original
    else:
        assert body == original and index.key(0).content_hash == wire.content_hash


@settings(max_examples=int(100 * SCALE), deadline=None, suppress_health_check=list(HealthCheck))
@given(body=st.binary(max_size=64) | any_json.map(_json_bytes))
def test_an_error_frame_of_any_bytes_is_a_typed_error(wire: Wire, body: bytes) -> None:
    assert isinstance(batch_error(0, wire.key, memoryview(body)), HsstoreError)


def _with_header(body: bytes, change: Callable[[dict], None]) -> bytes:
    _, _, length = _PREFIX.unpack_from(body)
    header = json.loads(body[_PREFIX.size : _PREFIX.size + length])
    change(header)
    raw = json.dumps(header).encode()
    head = _PREFIX.pack(MAGIC, VERSION, len(raw)) + raw
    return head + crc32c(head) + body[_PREFIX.size + length + 4 :]


def test_what_shrinking_found_an_axis_1_on_a_one_dimensional_array_is_a_typed_error(wire: Wire) -> None:
    """The 10^5-example run's find (benchmarks/results/identity-fuzz-cpu.json): a header, its checksum made right,
    giving input_ids (one dimension) positions along a second one; the check indexed a dimension it has not."""

    def one_dimension_with_axis_1(header: dict) -> None:
        (ids,) = [array for array in header["arrays"] if array["name"] == "input_ids"]
        ids["axis1"] = [0]

    answer = wire.answers[BodyFormat.CHUNKS.value]
    mutated = Recorded(answer.status, answer.headers, _with_header(answer.body, one_dimension_with_axis_1))
    client = FeatureClient(http=_replaying(mutated))
    with client, pytest.raises(HsstoreError, match=r"malformed|inconsistent"):
        client.fetch(wire.key.key, wire.key.layers, wire.key.tokens)
