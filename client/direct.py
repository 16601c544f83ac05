"""Direct reads: the chunks of an entry fetched straight from the object store with ranged GETs on the presigned
URLs the service hands out (`POST /v1/features:locate`), in parallel, and decoded and verified exactly as a chunk
body is (`client/receive.py`): each chunk against its crc32c and its write-time digest, the index against the
manifest. The service spends nothing per byte; the object store serves them."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from client.bodies import Connections, at_end, fill, read_all
from client.errors import IntegrityError
from client.features import Features
from client.host_memory import HOST_MEMORY
from client.receive import ChunkDecoder
from schemas.chunk_body import DirectEntry
from schemas.http import MalformedBody
from schemas.manifest import Manifest
from schemas.states import Verify


def _runs(entry: DirectEntry) -> list[tuple[str, int, int, int]]:
    """(url, shard offset, body offset, length) per run of chunks adjacent both in the shard and in the body."""
    runs: list[list] = []
    for array in entry.header.arrays:
        url, offsets = entry.urls[array.name], entry.shard_offsets[array.name]
        if len(offsets) != len(array.chunks):
            raise IntegrityError(f"{array.name}: the shard offsets do not match the index")
        for (_, body_at, length, _), shard_at in zip(array.chunks, offsets, strict=True):
            last = runs[-1] if runs else None
            if last is not None and last[0] == url and last[1] + last[3] == shard_at and last[2] + last[3] == body_at:
                last[3] += length
            else:
                runs.append([url, shard_at, body_at, length])
    return [tuple(run) for run in runs]


def read_direct(entry: DirectEntry, objects: Connections, pool: ThreadPoolExecutor, verify: Verify) -> Features:
    """One entry from the object store, verified."""
    header = entry.header
    try:
        manifest = Manifest.model_validate_json(header.manifest)
        header.checked(manifest)
    except (ValueError, MalformedBody) as exc:
        raise IntegrityError(f"malformed direct-read answer: {exc}") from None
    view = memoryview(HOST_MEMORY.take(header.data_bytes))

    def fetch(run: tuple[str, int, int, int]) -> None:
        """One ranged GET, streamed into its place in the buffer (no joined copy of the response)."""
        url, shard_at, body_at, length = run
        with objects.open("GET", url, {"Range": f"bytes={shard_at}-{shard_at + length - 1}"}) as response:
            if response.status != 206:
                read_all(response)
                raise IntegrityError(f"the object store answered a ranged GET with HTTP {response.status}")
            filled = fill(view[body_at : body_at + length], response)
            if not at_end(response):
                raise IntegrityError(f"the object store sent more than the {length} bytes asked for")
        if filled != length:
            raise IntegrityError(f"the object store sent {filled} of {length} bytes")

    list(pool.map(fetch, _runs(entry)))
    decoder = ChunkDecoder.of_data(header, manifest, view, verify)
    try:
        return decoder.finish(header.data_bytes)
    finally:
        decoder.wait()
