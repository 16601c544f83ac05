from __future__ import annotations

from fastapi import Response
from fastapi.responses import StreamingResponse

from schemas import datasets
from schemas.api import DatasetInfo, DatasetRequest
from service.api.bounded_json import resource_router
from service.api.deps import DatasetsDep, ReadScope, WriteScope
from service.api.openapi import binary, errors

router = resource_router("datasets")


@router.post(
    "/v1/datasets",
    dependencies=[WriteScope],
    response_model=DatasetInfo,
    summary="Snapshot whole versions as a named, immutable, content-addressed dataset",
    responses=errors(401, 403, 404, 409),
)
def create_dataset(request: DatasetRequest, store: DatasetsDep) -> DatasetInfo:
    """From `keys` (each resolved to its newest version) or from listing filters (every version they show, in
    listing order). A name keeps its first snapshot: the same entries again answer it, others are refused."""
    return store.create(request)


@router.get(
    "/v1/datasets/{ref}",
    dependencies=[ReadScope],
    response_model=DatasetInfo,
    summary="A dataset's size and id, by its id or its name",
    responses=errors(401, 403, 404),
)
def dataset_info(ref: str, store: DatasetsDep) -> DatasetInfo:
    return store.info(ref)


@router.get(
    "/v1/datasets/{ref}/index",
    dependencies=[ReadScope],
    response_class=Response,
    summary="A dataset's index (`schemas/datasets.py`), by its id or its name; its id in X-Hsstore-Dataset-Id",
    responses={**binary("the index; sha256 over its bytes is its id", datasets.MEDIA_TYPE), **errors(401, 403, 404)},
)
def dataset_index(ref: str, store: DatasetsDep) -> StreamingResponse:
    """Streamed a MB at a time from the store, read in a worker thread (an object store's GETs block)."""
    dataset_id, size, pieces = store.pieces(ref)
    headers = {datasets.ID_HEADER: dataset_id, "Content-Length": str(size)}
    return StreamingResponse(pieces, media_type=datasets.MEDIA_TYPE, headers=headers)
