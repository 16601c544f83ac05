"""How the client takes keys: the contract's FeatureKey, a FeatureRead (a key with a part), or `get`'s keyword
arguments (`prompt` or `prompt_hash`, `featureset` as an object or an id, `layers`, `tokens`)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Unpack, overload

from client.errors import InvalidRequestError, SampleRejectedError
from schemas.api import FeatureRead, LayersKey
from schemas.featureset import FeatureSet, LayerId
from schemas.json_limits import JsonLimitError
from schemas.keys import FeatureKey, KeyNamingError, KeyParts
from schemas.prompt_hash import normal_form
from schemas.tokens import TokenRange

KeyLike = FeatureKey | FeatureRead | Mapping[str, Any]


def batch_item(key: KeyLike) -> FeatureRead:
    """A key, a key with a part, or `get`'s keyword arguments (`prompt` or `prompt_hash`, `layers`, `tokens`, ...)."""
    if isinstance(key, FeatureRead):
        return key
    if isinstance(key, FeatureKey):
        return FeatureRead(**key.model_dump())
    parts = dict(key)
    return part_of_parts(parts.pop("prompt", None), **parts)


def part_of_parts(
    prompt: Mapping[str, Any] | None = None,
    *,
    layers: Sequence[LayerId] | None = None,
    tokens: Any = None,
    **parts: Unpack[KeyParts],
) -> FeatureRead:
    """`key_of_parts` with the part read: `layers` (a featureset object's own unless fewer are named: it is named
    by its parts, so any stored featureset holding them serves it) and `tokens`."""
    base = key_of_parts(prompt, **parts)
    featureset = parts.get("featureset")
    if layers is None and isinstance(featureset, FeatureSet):
        layers = featureset.layers
    return FeatureRead(
        **base.model_dump(),
        layers=list(layers) if layers is not None else None,
        tokens=str(TokenRange.of(tokens)) if tokens is not None else None,
    )


def key_of_parts(prompt: Mapping[str, Any] | None = None, **parts: Unpack[KeyParts]) -> FeatureKey:
    """`FeatureKey.of`, a malformed part refused here as the service would refuse it (naming neither or both of
    prompt and prompt_hash is a caller's mistake: KeyNamingError, a ValueError)."""
    try:
        return FeatureKey.of(prompt, **parts)
    except KeyNamingError:
        raise
    except ValueError as exc:
        raise InvalidRequestError(str(exc)) from None


def samples_to_send(samples: Iterable[Mapping[str, Any]]) -> list[Any]:
    """Each sample as the JSON the service hashes (its normal form: numpy values as numbers, null members left out),
    refused here as the service would refuse it when it passes a JSON limit or holds what JSON cannot carry (bytes
    would otherwise travel as text, and hash as a sample the caller never wrote)."""
    sent = []
    for index, sample in enumerate(samples):
        try:
            sent.append(normal_form(sample))
        except JsonLimitError as exc:
            raise SampleRejectedError(f"samples[{index}]: {exc}") from None
    return sent


@overload
def featureset_of(layers: FeatureSet | Sequence[LayerId]) -> FeatureSet: ...
@overload
def featureset_of(layers: FeatureSet | Sequence[LayerId] | None) -> FeatureSet | None: ...
def featureset_of(layers: FeatureSet | Sequence[LayerId] | None) -> FeatureSet | None:
    if layers is None or isinstance(layers, FeatureSet):
        return layers
    return FeatureSet(layers=list(layers))


def snapshot_key(key: KeyLike) -> LayersKey:
    """A dataset's key: a read's key with its layers; a token range is a read's, not a snapshot's."""
    item = batch_item(key)
    if item.tokens is not None:
        raise InvalidRequestError("a dataset pins whole entries: give keys without a token range")
    return LayersKey(**item.model_dump(exclude={"tokens"}))
