from __future__ import annotations

from fastapi import APIRouter

from schemas.api import Info
from service import __version__
from service.api.deps import LibraryDep, ReadScope, SettingsDep

router = APIRouter(tags=["info"])


@router.get("/v1/info", dependencies=[ReadScope])
def info(library: LibraryDep, settings: SettingsDep) -> Info:
    extractor = library.extractor
    featureset = library.default_featureset()
    return Info(
        version=__version__,
        model=extractor.loaded.info() if extractor else None,
        backends_available=extractor.available_backends() if extractor else [],
        default_backend=extractor.resolve_backend(settings.default_backend).value if extractor else None,
        default_featureset=featureset,
        default_featureset_id=featureset.id if featureset else None,
        window={"scheduled": False, "open": extractor is not None},
        limits={"max_request_bytes": settings.max_request_bytes, "max_sample_tokens": settings.max_sample_tokens},
    )
