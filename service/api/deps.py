"""Dependency providers and their `Annotated` aliases: a route's signature says which service it needs. Every
service comes from the object graph the composition root (`service/main.py`) built and put on the app's state."""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Callable
from typing import Annotated

from fastapi import Depends, Request

from schemas.states import TokenScope
from service.catalog.protocol import VersionStore
from service.core.gpu_time.windows import Windows
from service.core.read.datasets import Datasets
from service.core.read.reader import FeatureReader
from service.core.trust.auditor import Auditor
from service.core.trust.importer import FeatureImporter
from service.core.write.estimator import Estimator
from service.core.write.writer import FeatureWriter
from service.errors import Forbidden, Unauthorized
from service.extraction.extractor import Extractor
from service.jobs.queue import JobQueue
from service.model.manager import ModelManager
from service.settings import Settings
from service.storage.protocol import BlobStore

# what the composition root puts on `app.state`, by name
PROVIDED = (
    "datasets",
    "settings",
    "store",
    "versions",
    "windows",
    "models",
    "reader",
    "writer",
    "auditor",
    "estimator",
    "importer",
    "queue",
    "metrics",
)


def get_settings(request: Request) -> Settings:
    return request.app.state.settings


def get_store(request: Request) -> BlobStore:
    return request.app.state.store


def get_versions(request: Request) -> VersionStore:
    return request.app.state.versions


def get_windows(request: Request) -> Windows:
    return request.app.state.windows


def get_models(request: Request) -> ModelManager[Extractor] | None:
    return request.app.state.models


def get_reader(request: Request) -> FeatureReader:
    return request.app.state.reader


def get_writer(request: Request) -> FeatureWriter:
    return request.app.state.writer


def get_auditor(request: Request) -> Auditor:
    return request.app.state.auditor


def get_estimator(request: Request) -> Estimator:
    return request.app.state.estimator


def get_importer(request: Request) -> FeatureImporter:
    return request.app.state.importer


def get_queue(request: Request) -> JobQueue:
    return request.app.state.queue


def get_datasets(request: Request) -> Datasets:
    return request.app.state.datasets


SettingsDep = Annotated[Settings, Depends(get_settings)]
StoreDep = Annotated[BlobStore, Depends(get_store)]
VersionsDep = Annotated[VersionStore, Depends(get_versions)]
WindowsDep = Annotated[Windows, Depends(get_windows)]
ModelsDep = Annotated[ModelManager[Extractor] | None, Depends(get_models)]
ReaderDep = Annotated[FeatureReader, Depends(get_reader)]
WriterDep = Annotated[FeatureWriter, Depends(get_writer)]
AuditorDep = Annotated[Auditor, Depends(get_auditor)]
EstimatorDep = Annotated[Estimator, Depends(get_estimator)]
ImporterDep = Annotated[FeatureImporter, Depends(get_importer)]
JobsDep = Annotated[JobQueue, Depends(get_queue)]
DatasetsDep = Annotated[Datasets, Depends(get_datasets)]


def _token_scopes(settings: Settings, token: str) -> list[TokenScope] | None:
    """The scopes of a presented token. The config holds `sha256:<hex>` digests of tokens (or, for a quick setup,
    tokens as they are); digests are compared in constant time, against every configured entry."""
    presented = hashlib.sha256(token.encode()).hexdigest()
    found = None
    for configured, scopes in settings.tokens.items():
        digest = configured.removeprefix("sha256:") if configured.startswith("sha256:") else None
        expected = digest if digest is not None else hashlib.sha256(configured.encode()).hexdigest()
        if hmac.compare_digest(expected.encode(), presented.encode()):
            found = scopes
    return found


def Scope(scope: str) -> Callable[[Request, Settings], None]:
    """Require a bearer token with `scope` (admin implies every scope) when the service has tokens configured."""

    def check(request: Request, settings: SettingsDep) -> None:
        if not settings.tokens:
            return
        header = request.headers.get("authorization", "")
        kind, _, token = header.partition(" ")
        if kind.lower() != "bearer" or not token:
            raise Unauthorized("a bearer token is required")
        scopes = _token_scopes(settings, token.strip())
        if scopes is None:
            raise Unauthorized("unknown bearer token")
        if scope not in scopes and "admin" not in scopes:
            raise Forbidden(f"this token lacks the {scope!r} scope")

    return check


ReadScope = Depends(Scope("read"))
WriteScope = Depends(Scope("write"))
AdminScope = Depends(Scope("admin"))
