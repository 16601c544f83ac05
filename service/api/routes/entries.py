from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated

from fastapi import APIRouter, Query

from schemas import keys
from schemas.api import EntriesPage
from service.api.deps import LibraryDep, ReadScope
from service.api.openapi import errors
from service.api.queries import check_backend, check_featureset, check_model_revision, checked
from service.catalog.protocol import EntryFilter
from service.errors import InvalidRequest

router = APIRouter(tags=["entries"])


def _since(value: str | None) -> str | None:
    if value is None:
        return None
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=UTC)
        return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    except (ValueError, OverflowError):  # OverflowError: a time at the very ends of the range, moved to UTC
        raise InvalidRequest(f"since must be an ISO-8601 time, got {value[:40]!r}") from None


@router.get(
    "/v1/entries",
    dependencies=[ReadScope],
    summary="List stored entry versions, oldest first, page by page",
    responses=errors(401, 403, 422),
)
def list_entries(
    library: LibraryDep,
    prompt_hash: Annotated[str | None, Query(description="a prompt hash or a prefix of one (6+ hex digits)")] = None,
    backend: str | None = None,
    model_revision: str | None = None,
    featureset: str | None = None,
    content_hash: Annotated[str | None, Query(description="a content hash or a prefix of one")] = None,
    since: Annotated[str | None, Query(description="ISO-8601 time: versions created at or after it")] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    cursor: Annotated[str | None, Query(description="next_cursor of the previous page")] = None,
) -> EntriesPage:
    where = EntryFilter(
        prompt_hash=checked(keys.check_prompt_hash_prefix, prompt_hash),
        content_hash=checked(keys.check_content_hash_prefix, content_hash),
        model_revision=check_model_revision(model_revision),
        backend=check_backend(backend),
        featureset_id=check_featureset(featureset),
        since=_since(since),
    )
    return library.entries(where, limit, cursor)
