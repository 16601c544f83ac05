from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated

from fastapi import APIRouter, Query

from schemas.api import EntriesPage
from service.api.deps import LibraryDep, ReadScope
from service.api.queries import check_backend, check_featureset, check_model_revision, check_prompt_hash
from service.catalog.protocol import EntryFilter
from service.errors import InvalidRequest

router = APIRouter(tags=["entries"])


def _since(value: str | None) -> str | None:
    if value is None:
        return None
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise InvalidRequest(f"since must be an ISO-8601 time, got {value[:40]!r}") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@router.get("/v1/entries", dependencies=[ReadScope])
def list_entries(
    library: LibraryDep,
    prompt_hash: str | None = None,
    backend: str | None = None,
    model_revision: str | None = None,
    featureset: str | None = None,
    since: str | None = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    cursor: str | None = None,
) -> EntriesPage:
    where = EntryFilter(
        prompt_hash=check_prompt_hash(prompt_hash) if prompt_hash is not None else None,
        model_revision=check_model_revision(model_revision),
        backend=check_backend(backend),
        featureset_id=check_featureset(featureset),
        since=_since(since),
    )
    return library.entries(where, limit, cursor)
