"""One module per resource; `ROUTERS`, in the order the API's document lists them, is what the app includes."""

from service.api import metrics
from service.api.routes import (
    audit,
    compare,
    datasets,
    entries,
    estimate,
    extract,
    features,
    health,
    imports,
    info,
    jobs,
    window,
)

_MODULES = (
    health,
    info,
    extract,
    features,
    entries,
    datasets,
    imports,
    compare,
    audit,
    estimate,
    jobs,
    window,
    metrics,
)
ROUTERS = tuple(module.router for module in _MODULES)
