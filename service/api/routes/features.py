from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterable

from fastapi import Response
from starlette.concurrency import run_in_threadpool

from schemas import batch_frames, chunk_body
from schemas.api import BatchRequest, FeatureRead
from schemas.http import BODY_FORMATS, ERROR_FRAME, FRAMES_MEDIA_TYPE
from schemas.manifest import Manifest
from service.api.bounded_json import resource_router
from service.api.deps import ReaderDep, ReadScope, SettingsDep
from service.api.error_handlers import error_frame
from service.api.openapi import binary, errors
from service.api.queries import AcceptedDep, FeatureReadDep
from service.api.streaming import slices, stream
from service.core.read.served import Part
from service.errors import TooLarge

router = resource_router("features")


def _key_headers(manifest: Manifest) -> dict[str, str]:
    headers = {
        "X-Hsstore-Content-Hash": manifest.content_hash,
        "X-Hsstore-Backend": manifest.backend,
        "X-Hsstore-Model-Revision": manifest.model_revision,
        "X-Hsstore-Featureset": manifest.featureset_id,
    }
    if manifest.content_flags:  # stored but unusual (service/core/write/content_checks.py)
        headers["X-Hsstore-Content-Flags"] = "; ".join(manifest.content_flags)[:2000]
    return headers


def _part_headers(part: Part) -> dict[str, str]:
    return {
        "X-Hsstore-Layers": ",".join(map(str, part.layers)),
        "X-Hsstore-Tokens": f"{part.tokens[0]}:{part.tokens[1]}",
    }


@router.get(
    "/v1/features/{prompt_hash}",
    dependencies=[ReadScope],
    response_class=Response,
    summary="One entry's features (or a slice of its layers and tokens): safetensors, or its stored chunks",
    responses={
        **binary(
            "safetensors, header metadata `manifest` and `served` (layers, tokens, hash of what was served); or, "
            "to a client that accepts them, the stored chunks with their index",
            *(spec.media_type for spec in BODY_FORMATS.values()),
        ),
        **errors(401, 403, 404, 409, 422),
    },
)
def get_features(query: FeatureReadDep, reader: ReaderDep, accepted: AcceptedDep) -> Response:
    """Token ranges are clipped to the entry as Python slicing clips (`X-Hsstore-Tokens` says what was served);
    only an empty selection is refused. A client that accepts the chunk wire format gets the stored chunks (the
    service decodes and hashes nothing); entries written before chunk digests go out as safetensors either way."""
    manifest = reader.resolve(query.key, query.layers)
    body = reader.body(manifest, query.layers, query.token_range(), accepted)
    read_headers, pieces = body.open()
    headers = {**_key_headers(manifest), **_part_headers(body.part), **read_headers, "Content-Length": str(body.length)}
    return stream(slices(pieces), body.format.media_type, headers)


@router.head(
    "/v1/features/{prompt_hash}",
    dependencies=[ReadScope],
    response_class=Response,
    summary="Whether the entry exists, with the length its GET would send",
    responses={200: {"description": "it exists"}, **errors(401, 403, 404, 409, 422)},
)
def head_features(query: FeatureReadDep, reader: ReaderDep, accepted: AcceptedDep) -> Response:
    manifest = reader.resolve(query.key, query.layers)
    body = reader.body(manifest, query.layers, query.token_range(), accepted)
    # Response would set Content-Length: 0 for an empty body; HEAD announces the GET's length instead
    response = Response(status_code=200, headers=_key_headers(manifest), media_type=body.format.media_type)
    response.headers["content-length"] = str(body.length)
    return response


@router.post(
    "/v1/features:batch",
    dependencies=[ReadScope],
    response_class=Response,
    summary="Several entries in one framed response (per key: u64 length, u8 kind, features body or error)",
    responses={**binary("frames, one per key, in order", FRAMES_MEDIA_TYPE), **errors(401, 403, 404, 409, 413, 422)},
)
def batch_features(request: BatchRequest, reader: ReaderDep, settings: SettingsDep, accepted: AcceptedDep) -> Response:
    """Several entries in one response, framed. Every key is resolved (and refused with a 4xx) before the first
    byte is sent; the blobs are then read one after another as the response streams. A client that accepts the
    chunk wire format gets CHUNKS frames (safetensors FEATURES frames for entries written before chunk digests)."""
    if len(request.keys) > settings.max_batch_keys:
        raise TooLarge(f"{len(request.keys)} keys in one batch; this service takes at most {settings.max_batch_keys}")
    resolved = [(reader.resolve(item.key, item.layers), item) for item in request.keys]
    # every slice checked, and the response's size known, before the first byte is sent
    total = sum(reader.served_length(manifest, item.layers, item.token_range()) for manifest, item in resolved)
    if total > settings.max_batch_bytes:
        raise TooLarge(
            f"this batch would send {total:,} bytes; this service sends at most {settings.max_batch_bytes:,} "
            "per batch: ask for fewer keys"
        )

    def prepare(manifest: Manifest, item: FeatureRead) -> tuple[int, int, Iterable[bytes | memoryview]]:
        """(frame kind, body length, body pieces) of one key."""
        body = reader.body(manifest, item.layers, item.token_range(), accepted)
        return body.format.frame_kind, body.length, body.open()[1]

    def read(index: int) -> asyncio.Task[tuple[int, int, Iterable[bytes | memoryview]]]:
        return asyncio.ensure_future(run_in_threadpool(prepare, *resolved[index]))

    async def frames() -> AsyncIterator[bytes | memoryview]:
        upcoming = read(0)
        for index in range(len(resolved)):
            try:
                prepared = await upcoming
            except Exception as exc:  # the 200 is out: this key gets an error frame, the others still arrive
                body = error_frame(exc)
                yield batch_frames.frame_prefix(ERROR_FRAME, len(body)) + body
                prepared = None
            if index + 1 < len(resolved):
                upcoming = read(index + 1)  # the next blob is read while this one streams
            if prepared is None:
                continue
            kind, length, pieces = prepared
            yield batch_frames.frame_prefix(kind, length)
            async for piece in slices(pieces):
                yield piece

    return stream(frames(), FRAMES_MEDIA_TYPE, {})


@router.post(
    "/v1/features:locate",
    dependencies=[ReadScope],
    response_model=chunk_body.DirectEntries,
    summary="Where to read entries straight from the object store: chunk index, manifest, presigned shard URLs",
    responses=errors(401, 403, 404, 409, 413, 422),
)
def locate_features(request: BatchRequest, reader: ReaderDep, settings: SettingsDep) -> chunk_body.DirectEntries:
    """For clients that read the chunks themselves (ranged GETs on the URLs, in parallel), verifying each against
    its write-time digest as they decode: the service then spends nothing per byte. 409 where the blobs are on
    the service's own disk."""
    if len(request.keys) > settings.max_batch_keys:
        raise TooLarge(f"{len(request.keys)} keys in one request; this service takes at most {settings.max_batch_keys}")
    entries = []
    for item in request.keys:
        manifest = reader.resolve(item.key, item.layers)
        entries.append(reader.direct(manifest, item.layers, item.token_range(), settings.direct_url_expires_s))
    return chunk_body.DirectEntries(entries=entries)
