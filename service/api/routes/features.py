from __future__ import annotations

from fastapi import APIRouter, Response

from schemas import wire
from schemas.manifest import Manifest
from service.api.deps import LibraryDep, ReadScope
from service.api.queries import FeatureQueryDep, KeyQuery
from service.library import FeatureLibrary, Served

router = APIRouter(tags=["features"])
SAFETENSORS = "application/octet-stream"


def _resolve(library: FeatureLibrary, key: KeyQuery) -> Manifest:
    return library.resolve(key.prompt_hash, key.model_revision, key.backend, key.featureset_id, key.content_hash)


def _headers(served: Served) -> dict[str, str]:
    m = served.manifest
    return {
        "X-Hsstore-Content-Hash": m.content_hash,
        "X-Hsstore-Served-Hash": served.served_hash,
        "X-Hsstore-Backend": m.backend,
        "X-Hsstore-Model-Revision": m.model_revision,
        "X-Hsstore-Featureset": m.featureset_id,
    }


@router.get("/v1/features/{prompt_hash}", dependencies=[ReadScope], response_class=Response)
def get_features(query: FeatureQueryDep, library: LibraryDep) -> Response:
    served = library.read(_resolve(library, query.key), query.layers, query.tokens)
    body = wire.encode(served.tensors.values(), served.metadata())
    return Response(content=body, media_type=SAFETENSORS, headers=_headers(served))


@router.head("/v1/features/{prompt_hash}", dependencies=[ReadScope], response_class=Response)
def head_features(query: FeatureQueryDep, library: LibraryDep) -> Response:
    manifest = _resolve(library, query.key)
    return Response(
        status_code=200,
        headers={
            "X-Hsstore-Content-Hash": manifest.content_hash,
            "X-Hsstore-Backend": manifest.backend,
            "X-Hsstore-Model-Revision": manifest.model_revision,
            "X-Hsstore-Featureset": manifest.featureset_id,
        },
    )
