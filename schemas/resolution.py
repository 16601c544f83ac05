"""Which stored version serves a read: the one home of the rules the service's reads and writes and the client's
exports follow, so that every path picks the entry a read of the same key would.

A read names a key (prompt hash, and perhaps model revision, backend, featureset id or a featureset's parts) and
perhaps layers. Of the versions stored for the prompt:
  - a featureset named by its parts (dtype, target ids, top-k) keeps only entries that have them and the layers read;
  - a read that names no backend prefers entries extracted here over imported (`unknown`) ones;
  - one that names layers but no featureset in any way prefers featuresets holding those layers, and of those,
    exactly those;
  - with a dtype and layers (and no id), of one model revision and backend, the featureset nearest them serves
    (`nearest_holding`: itself, else the fewest layers, then the fewest parts beyond it).
The preferences are soft: one that would keep none keeps all (the error then names them). Of what is left, one entry
key must remain; its newest version serves.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable
from typing import Protocol, TypeVar

from schemas.backend import measured_first
from schemas.featureset import FeatureSet, LayerId
from schemas.keys import EntryKey, FeatureKey
from schemas.manifest import Manifest


def nearest_holding(stored: Iterable[FeatureSet], wanted: FeatureSet) -> FeatureSet | None:
    """Of the stored featuresets that hold `wanted`, the one nearest it: itself, else the fewest layers, then the
    fewest parts beyond it; ties broken by id, so that the same entry serves every read of it."""

    def distance(held: FeatureSet) -> tuple[bool, int, int, str]:
        beyond = int(held.target_ids and not wanted.target_ids) + int(held.top_k is not None and wanted.top_k is None)
        return held.id != wanted.id, len(held.layers), beyond, held.id

    return min((f for f in stored if f.holds(wanted)), key=distance, default=None)


def _admits(key: FeatureKey, stored: FeatureSet, layers: list[LayerId] | None) -> bool:
    """Whether a stored featureset has every part of a featureset the key names (none named: any does): its dtype,
    target ids and top-k where named, and then the layers read."""
    return not key.by_parts or stored.has(key.dtype, key.target_ids, key.top_k, layers)


def _wanted(key: FeatureKey, layers: list[LayerId] | None) -> FeatureSet | None:
    """The featureset the key names by its parts with the layers read; None unless it names a dtype and the read
    names layers (and the key no featureset id)."""
    if key.dtype is None or not layers or key.featureset_id is not None:
        return None
    return FeatureSet(layers=list(layers), dtype=key.dtype, target_ids=bool(key.target_ids), top_k=key.top_k)


def serving(found: list[Manifest], key: FeatureKey, layers: list[LayerId] | None) -> list[Manifest]:
    """The candidates the rules keep, of the versions `found` for the key's prompt (and whatever else it pins)."""
    found = [m for m in found if _admits(key, m.featureset, layers)]
    rules: list[Callable[[Manifest], bool]] = []
    if key.backend is None:
        chosen = measured_first({m.backend for m in found})
        rules.append(lambda m: m.backend in chosen)
    if key.featureset_id is None and not key.by_parts and layers:
        rules.append(lambda m: set(layers) <= set(m.featureset.layers))
        rules.append(lambda m: set(layers) == set(m.featureset.layers))  # and among those, exactly those layers
    for rule in rules:
        found = [m for m in found if rule(m)] or found
    wanted = _wanted(key, layers)
    if wanted is not None and len({(m.model_revision, m.backend) for m in found}) == 1:
        nearest = nearest_holding((m.featureset for m in found), wanted)
        found = [m for m in found if nearest is not None and m.featureset_id == nearest.id]
    return found


def newest(manifests: Iterable[Manifest]) -> dict[EntryKey, Manifest]:
    """The newest version of each entry key, of versions listed oldest first (as a listing gives them)."""
    return {manifest.key: manifest for manifest in manifests}


def nearest_version(manifests: Iterable[Manifest], wanted: FeatureSet) -> Manifest | None:
    """Of one prompt's versions under one model revision and backend (oldest first), the newest sound version of
    the entry whose featureset is nearest `wanted` among those holding it (a union of recipes' layers serves each
    recipe's reads): what a read of `wanted` would get, so what an extraction of it need not repeat."""
    sound = {m.featureset_id: m for m in newest(manifests).values() if not m.corrupt}
    nearest = nearest_holding((m.featureset for m in sound.values()), wanted)
    return sound[nearest.id] if nearest is not None else None


class Listed(Protocol):
    """What an export's choice reads of a version: a manifest, or a row of the key listing."""

    @property
    def prompt_hash(self) -> str: ...
    @property
    def model_revision(self) -> str: ...
    @property
    def backend(self) -> str: ...


V = TypeVar("V", bound=Listed)


def newest_of(
    versions: Iterable[V],
    entry: Callable[[V], Hashable],
    featureset: Callable[[V], FeatureSet],
    measured_only: bool = False,
    holding: FeatureSet | None = None,
) -> list[V]:
    """The newest version of each entry key (`entry` names it), of versions listed oldest first, in listing order
    (an export's entries). With `measured_only` (an export that names no backend), a prompt stored both as
    extracted here and as imported (`unknown`) gives the extracted one, as a read that names no backend does. With
    `holding`, only entries whose featureset holds it, and of one prompt, model revision and backend the nearest, as
    a read of it resolves."""
    chosen = list({entry(version): version for version in versions}.values())
    if holding is not None:
        held: dict[tuple[str, str, str], list[FeatureSet]] = {}
        for version in chosen:
            held.setdefault((version.prompt_hash, version.model_revision, version.backend), []).append(
                featureset(version)
            )
        nearest = {where: nearest_holding(found, holding) for where, found in held.items()}
        chosen = [v for v in chosen if nearest[(v.prompt_hash, v.model_revision, v.backend)] == featureset(v)]
    if measured_only:
        backends: dict[str, set[str]] = {}
        for version in chosen:
            backends.setdefault(version.prompt_hash, set()).add(version.backend)
        preferred = {prompt: measured_first(found) for prompt, found in backends.items()}
        chosen = [v for v in chosen if v.backend in preferred[v.prompt_hash]]
    return chosen


def newest_versions(
    manifests: Iterable[Manifest], measured_only: bool = False, holding: FeatureSet | None = None
) -> list[Manifest]:
    """`newest_of` manifests."""
    return newest_of(manifests, lambda m: m.key, lambda m: m.featureset, measured_only, holding)
