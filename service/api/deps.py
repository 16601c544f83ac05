"""The `Annotated` dependencies of the routes: a route's signature says which service it needs, and each comes from
the object graph (`service/services.py`) the composition root (`service/main.py`) built and put on the app's state;
and the token scopes that guard the routes."""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Callable
from typing import Annotated, Any, TypeVar

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
from service.host.memory_budget import MemoryBudget
from service.jobs.queue import JobQueue
from service.metrics.counters import Metrics
from service.model.manager import ModelManager
from service.services import Services
from service.settings import Settings
from service.storage.protocol import BlobStore

T = TypeVar("T")


def _provided(pick: Callable[[Services], T]) -> Any:
    """A dependency on the service `pick` takes from the object graph the composition root put on the app's state."""

    def provide(request: Request) -> T:
        return pick(request.app.state.services)

    return Depends(provide)


SettingsDep = Annotated[Settings, _provided(lambda s: s.settings)]
StoreDep = Annotated[BlobStore, _provided(lambda s: s.store)]
VersionsDep = Annotated[VersionStore, _provided(lambda s: s.versions)]
WindowsDep = Annotated[Windows, _provided(lambda s: s.windows)]
ModelsDep = Annotated[ModelManager[Extractor] | None, _provided(lambda s: s.models)]
ReaderDep = Annotated[FeatureReader, _provided(lambda s: s.reader)]
WriterDep = Annotated[FeatureWriter, _provided(lambda s: s.writer)]
AuditorDep = Annotated[Auditor, _provided(lambda s: s.auditor)]
EstimatorDep = Annotated[Estimator, _provided(lambda s: s.estimator)]
ImporterDep = Annotated[FeatureImporter, _provided(lambda s: s.importer)]
JobsDep = Annotated[JobQueue, _provided(lambda s: s.queue)]
DatasetsDep = Annotated[Datasets, _provided(lambda s: s.datasets)]
MetricsDep = Annotated[Metrics, _provided(lambda s: s.metrics)]
MemoryDep = Annotated[MemoryBudget, _provided(lambda s: s.memory)]


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
