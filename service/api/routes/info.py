from __future__ import annotations

from schemas.api import Info
from schemas.device_run import DeviceRun
from schemas.featureset import FeatureSet
from service import __version__
from service.api.bounded_json import resource_router
from service.api.deps import MemoryDep, ModelsDep, ReadScope, SettingsDep, WindowsDep
from service.api.openapi import errors
from service.extraction.extractor import Extractor
from service.model.manager import ModelManager
from service.settings import Settings

router = resource_router("info")


@router.get(
    "/v1/info",
    dependencies=[ReadScope],
    summary="Model, revision, backends this host can run, default featureset, window",
    responses=errors(401, 403),
)
def info(models: ModelsDep, windows: WindowsDep, settings: SettingsDep, memory: MemoryDep) -> Info:
    spec = models.spec if models else None
    featureset = FeatureSet.default_for(spec.num_layers) if spec else None
    window = windows.state().model_dump()
    return Info(
        version=__version__,
        model=spec.info() if spec else None,
        backends_available=spec.available_backends() if spec else [],
        default_backend=spec.resolve_backend(settings.default_backend).value if spec else None,
        default_featureset=featureset,
        default_featureset_id=featureset.id if featureset else None,
        window={**window, "model_loaded": bool(models and models.loaded), "handover": settings.handover},
        limits={"max_request_bytes": settings.max_request_bytes, "max_sample_tokens": settings.max_sample_tokens},
        run=_run(models, featureset, settings),
        host_memory=memory.state(),
    )


def _run(models: ModelManager[Extractor] | None, featureset: FeatureSet | None, settings: Settings) -> DeviceRun | None:
    """How this device runs the model, where it is loaded (asking never loads it)."""
    extractor = models.current if models is not None else None
    if extractor is None or featureset is None or models is None:
        return None
    return extractor.device_run(featureset, models.spec.resolve_backend(settings.default_backend))
