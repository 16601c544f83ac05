from __future__ import annotations

import json
from typing import Annotated

from fastapi import Depends, Query, Response

from schemas import keys, timestamps
from schemas.api import EntriesPage, KeysPage
from schemas.backend import STORED_BACKENDS
from schemas.keys import EntryFilter
from service.api.bounded_json import resource_router
from service.api.deps import ReaderDep, ReadScope
from service.api.openapi import errors
from service.api.queries import Cursor, check_backend, check_featureset, checked
from service.errors import InvalidRequest

router = resource_router("entries")


def _since(value: str | None) -> str | None:
    if value is None:
        return None
    try:
        return timestamps.stamp(timestamps.parse(value))
    except (ValueError, OverflowError):  # OverflowError: a time at the very ends of the range, moved to UTC
        raise InvalidRequest(f"since must be an ISO-8601 time, got {value[:40]!r}") from None


def entry_filter(
    prompt_hash: Annotated[
        str | None,
        Query(
            description="a prompt hash or a prefix of one (6+ hex digits)",
            json_schema_extra={"pattern": keys.PROMPT_PREFIX.pattern},
        ),
    ] = None,
    backend: Annotated[str | None, Query(json_schema_extra={"enum": list(STORED_BACKENDS)})] = None,
    model_revision: Annotated[str | None, Query(json_schema_extra={"pattern": keys.MODEL_REVISION.pattern})] = None,
    featureset: Annotated[str | None, Query(json_schema_extra={"pattern": keys.FEATURESET_ID.pattern})] = None,
    content_hash: Annotated[
        str | None,
        Query(
            description="a content hash or a prefix of one", json_schema_extra={"pattern": keys.CONTENT_PREFIX.pattern}
        ),
    ] = None,
    since: Annotated[
        str | None,
        Query(description="ISO-8601 time: versions created at or after it", json_schema_extra={"format": "date-time"}),
    ] = None,
) -> EntryFilter:
    """A listing's filters, as both listings take them."""
    return EntryFilter(
        prompt_hash=checked(keys.check_prompt_hash_prefix, prompt_hash),
        content_hash=checked(keys.check_content_hash_prefix, content_hash),
        model_revision=checked(keys.check_model_revision, model_revision),
        backend=check_backend(backend),
        featureset_id=check_featureset(featureset),
        since=_since(since),
    )


FilterDep = Annotated[EntryFilter, Depends(entry_filter)]


@router.get(
    "/v1/entries",
    dependencies=[ReadScope],
    summary="List stored entry versions, oldest first, page by page",
    response_model=EntriesPage,
    responses=errors(401, 403, 422),
)
def list_entries(
    reader: ReaderDep, where: FilterDep, limit: Annotated[int, Query(ge=1, le=1000)] = 100, cursor: Cursor = None
) -> Response:
    """Each manifest as its catalog row makes it, sent as it is (the client validates what it receives)."""
    documents, next_cursor = reader.entries(where, limit, cursor)
    body = '{"entries":[' + ",".join(documents) + '],"next_cursor":' + json.dumps(next_cursor) + "}"
    return Response(body, media_type="application/json")


@router.get(
    "/v1/entries:keys",
    dependencies=[ReadScope],
    summary="List stored versions' keys (no manifests), oldest first, page by page: for listings of millions",
    responses=errors(401, 403, 422),
)
def list_keys(
    reader: ReaderDep, where: FilterDep, limit: Annotated[int, Query(ge=1, le=100_000)] = 10_000, cursor: Cursor = None
) -> KeysPage:
    """Each version's whole key pinned by content hash, its tokens and creation time, as an array in `columns`'
    order: ~200 bytes a version, read from the catalog's key columns without a manifest."""
    found, next_cursor = reader.keys(where, limit, cursor)
    return KeysPage(keys=found, next_cursor=next_cursor)
