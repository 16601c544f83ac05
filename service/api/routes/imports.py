from __future__ import annotations

from fastapi import Request
from pydantic import ValidationError
from starlette.concurrency import run_in_threadpool

from schemas import safetensors_body
from schemas.api import IMPORT_METADATA, ImportRequest, ImportResult
from schemas.http import BODY_FORMATS, BodyFormat, MalformedBody
from schemas.json_limits import load_json
from schemas.validation import describe_errors
from service.api.bounded_json import resource_router
from service.api.deps import ImporterDep, WriteScope
from service.api.openapi import binary_body, errors
from service.errors import InvalidRequest

router = resource_router("import")


@router.post(
    "/v1/entries:import",
    dependencies=[WriteScope],
    summary="Store features computed elsewhere: a safetensors body whose `import` metadata is an ImportRequest",
    responses=errors(401, 403, 413, 422),
    openapi_extra=binary_body(
        "safetensors: hidden_states, input_ids (and loss_mask); its metadata `import` an ImportRequest",
        BODY_FORMATS[BodyFormat.SAFETENSORS].media_type,
    ),
)
async def import_entry(request: Request, importer: ImporterDep) -> ImportResult:
    body = await request.body()
    try:
        decoded = safetensors_body.decode(body)
        asked = ImportRequest.model_validate(load_json(decoded.metadata.get(IMPORT_METADATA, ""), "the metadata"))
    except MalformedBody as exc:
        raise InvalidRequest(f"the body is not a safetensors features body: {exc}") from None
    except ValidationError as exc:
        reasons = describe_errors(exc.errors(include_url=False, include_input=False))
        raise InvalidRequest(f"the `{IMPORT_METADATA}` metadata: {reasons}"[:2000]) from None
    except ValueError as exc:  # not JSON, or past a JSON limit (schemas/json_limits.py)
        raise InvalidRequest(f"the `{IMPORT_METADATA}` metadata: {exc}"[:2000]) from None
    # hashing, statistics and the blob write are work: keep the event loop free
    return await run_in_threadpool(importer.import_entry, asked, decoded.tensors)
