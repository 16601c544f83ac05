"""pydantic's validation errors in a user's words: `where: what`, without pydantic's phrasing, links or input."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Annotated, Any, get_args

from pydantic import BaseModel, BeforeValidator, Field

# pydantic error type -> our words (formatted with the error's context)
_WORDS = {
    "extra_forbidden": "unknown field",
    "missing": "is required",
    "string_type": "must be a string",
    "int_type": "must be an integer",
    "int_parsing": "must be an integer",
    "float_type": "must be a number",
    "bool_type": "must be true or false",
    "list_type": "must be a list",
    "dict_type": "must be an object",
    "model_type": "must be an object",
    "model_attributes_type": "must be an object",
    "too_short": "needs at least {min_length} item(s)",
    "too_long": "takes at most {max_length} item(s)",
    "string_too_short": "must not be empty",
    "greater_than_equal": "must be at least {ge}",
    "greater_than": "must be more than {gt}",
    "less_than_equal": "must be at most {le}",
    "less_than": "must be less than {lt}",
    "literal_error": "must be one of {expected}",
    "enum": "must be one of {expected}",
    "json_invalid": "is not valid JSON",
}


def _words(err: Mapping[str, Any]) -> str:
    template = _WORDS.get(str(err.get("type", "")))
    if template is not None:
        try:
            return template.format(**(err.get("ctx") or {}))
        except (KeyError, IndexError):
            pass
    return str(err.get("msg", "invalid")).removeprefix("Value error, ")


def _fields_at(model: type[BaseModel], path: Sequence[Any]) -> list[str] | None:
    """The field names of the model at `path` inside `model` (through lists and optionals); None past a non-model."""
    for part in path:
        if isinstance(part, int):
            continue  # an item of a list: the same model
        field = model.model_fields.get(str(part))
        inner = _model_in(field.annotation) if field is not None else None
        if inner is None:
            return None
        model = inner
    return list(model.model_fields)


def _model_in(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    return next((found for arg in get_args(annotation) if (found := _model_in(arg)) is not None), None)


def describe_errors(
    errors: Iterable[Mapping[str, Any]], skip: tuple[str, ...] = (), model: type[BaseModel] | None = None
) -> str:
    """One `location: message` per error (from `ValidationError.errors()` or FastAPI's), joined by '; '; location
    parts in `skip` (e.g. 'body') are left out. With `model` (what was validated), an unknown field's message names
    the fields that are known there."""
    reasons = []
    for err in errors:
        where = ".".join(str(part) for part in err.get("loc", ()) if part not in skip)
        words = _words(err)
        if model is not None and err.get("type") == "extra_forbidden":
            known = _fields_at(model, tuple(err.get("loc", ()))[:-1])
            words += f" (known: {', '.join(known)})" if known else ""
        parent, _, field = where.rpartition(".")
        if words.startswith(
            f"{field} "
        ):  # "tokens must …" names its field itself: say where it is, not the field twice
            where = parent
        reasons.append(f"{where}: {words}" if where else words)
    return "; ".join(reasons) or "invalid"


def exactly_one_of(*fields: str) -> dict[str, Any]:
    """JSON schema for what a model's "exactly one of these, the rest absent or null" check says."""
    given = [{"required": [name], "properties": {name: {"not": {"type": "null"}}}} for name in fields]
    return {"oneOf": given}


def json_integer(value: Any) -> Any:
    """A JSON integer as Python takes it: 5.0 is 5, true and false are no integers (a BeforeValidator)."""
    if isinstance(value, bool):  # JSON's true is not an integer; Python's bool is one
        raise ValueError("must be an integer, not true or false")
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


# An integer as JSON Schema means one: integral numbers (5 and 5.0), never true, false or "5" (not for samples: their
# hash is over the JSON as sent, where 5.0 and 5 differ, so a sample's token ids are integers as written)
JsonInt = Annotated[int, Field(strict=True), BeforeValidator(json_integer)]
# (a constrained one: `Annotated[int, Field(ge=..), BeforeValidator(json_integer)]`, in that order, or the document
# shows pydantic's own `ge` rather than JSON Schema's `minimum`)
JsonBool = Annotated[bool, Field(strict=True)]  # true or false, never 0 or 1
