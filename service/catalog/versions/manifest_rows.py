"""How a version's manifest is kept in the catalog's rows, the same on every engine: what repeats across versions once
(its key space: model revision, backend and featureset; its fingerprint; its prompt's sample), its hashes as their
32 bytes, and the rest of the manifest (token counts, tensors with their chunk digests, layer statistics, flags) as
JSON deflated over a preset dictionary. A row read back is the manifest that was added, field for field (the catalog
suite holds it).

Why: a manifest is ~2.6 KB of JSON on the tiny model, two thirds of it the fingerprint, featureset, key parts and
sample every version of a prompt or of a run repeats; 10^7 versions kept whole took 30-46 GB."""

from __future__ import annotations

import hashlib
import json
import zlib
from dataclasses import dataclass
from enum import IntFlag

from schemas.backend import Fingerprint
from schemas.manifest import Manifest
from schemas.tensors import DTYPES

# the manifest's fields a row keeps in `body`; the others are columns or referenced rows (or the catalog's own)
_ELSEWHERE = frozenset(
    {
        "prompt_hash",
        "model_revision",
        "backend",
        "featureset",
        "featureset_id",
        "content_hash",
        "sample",
        "fingerprint",
        "created_at",
        "seq",
        "audit",
        "integrity",
    }
)
BODY_FIELDS = frozenset(Manifest.model_fields) - _ELSEWHERE
_CONTENT = "sha256:"
# A body is zlib's deflate at level 6 over a preset dictionary of what every manifest's JSON repeats (its keys, dtypes,
# digest names, the usual shapes): 355 bytes on the tiny model's entries against 596 with no dictionary at level 1.
# Its first byte names the dictionary: a body written with this one reads with it, whatever a later release adds.
_BODY_V1 = 1
_ZDICT_V1 = (
    b'{"schema_version":1,"sample_id":null,"num_tokens":0,"prompt_tokens":0,"completion_tokens":0,'
    b'"completion_source":null,"tensors":{"hidden_states":{"dtype":"bfloat16","shape":[0,5,64],"chunks":{"shape":'
    b'[256,1,64],"digest":"blake3-128","digests":["'
    b'"]}},"input_ids":{"dtype":"int32","shape":[0],"chunks":{"shape":[256],"digest":"blake3-128","digests":["'
    b'"]}}},"chunks_digest":"blake3:","layer_stats":[{"layer":1,"mean":0.0,"std":0.0,"absmax":0.0},{"layer":2,'
    b'"mean":-0.00,"std":0.,"absmax":1.},{"layer":"embed","mean":'
    b'"target_ids":{"dtype":"int32","shape":[0],"chunks":{"shape":[256],"digest":"blake3-128","digests":["'
    b'"loss_mask":{"dtype":"uint8","shape":[0],"chunks":{"shape":[256],"digest":"blake3-128","digests":["'
    b'"hidden_scales":{"dtype":"float32","float8_e4m3fn","topk_ids","topk_logprobs","topk_mass","final_norm"],'
    b'"content_flags":[]}'
)
_ZDICTS = {_BODY_V1: _ZDICT_V1}
_LEVEL = 6


class Attention(IntFlag):
    """Why a version needs an operator's eye (`hsstore health`): a row's `attention` bits."""

    FLAGGED = 1  # the content checks found it unusual
    DAMAGED = 2  # a check of its stored bytes found them changed
    SUSPECT = 4  # an import found wrong, suspect, or never checked against the model


def attention_of(manifest: Manifest) -> Attention:
    bits = Attention(0)
    if manifest.content_flags:
        bits |= Attention.FLAGGED
    if manifest.corrupt:
        bits |= Attention.DAMAGED
    if manifest.suspect:
        bits |= Attention.SUSPECT
    return bits


def prompt_bytes(prompt_hash: str) -> bytes:
    return bytes.fromhex(prompt_hash)


def content_bytes(content_hash: str) -> bytes:
    return bytes.fromhex(content_hash.removeprefix(_CONTENT))


def content_text(raw: bytes) -> str:
    return _CONTENT + bytes(raw).hex()


def hex_prefix_range(prefix: str) -> tuple[bytes, bytes | None]:
    """[low, high) of the 32-byte hashes whose hex starts with `prefix` (high None: no upper bound)."""
    low = bytes.fromhex(prefix + "0" * (len(prefix) % 2))
    top = bytearray(bytes.fromhex(prefix + "f" * (len(prefix) % 2)))
    while top and top[-1] == 0xFF:  # the next value after every string with this prefix: carry upwards
        top.pop()
    if not top:
        return low, None
    top[-1] += 1
    return low, bytes(top)


def logical_bytes(manifest: Manifest) -> int:
    """What the version's tensors hold before compression (what a store of them holds: `tallies`)."""
    total = 0
    for info in manifest.tensors.values():
        count = 1
        for size in info.shape:
            count *= size
        total += count * DTYPES[info.dtype][0]
    return total


def unchecked(audit: object | None, integrity: object | None) -> bool:
    """A version neither re-extracted by an audit nor read back by a scrub (what its two record columns hold)."""
    return audit is None and integrity is None


def tally_of(manifest: Manifest) -> tuple[int, ...]:
    """What one version adds to its key space's tally: itself, its tokens and bytes, its attention bits, and
    whether it was never checked."""
    bits = attention_of(manifest)
    flagged, damaged, suspect = (int(bool(bits & bit)) for bit in Attention)
    never = int(unchecked(manifest.audit, manifest.integrity))
    return 1, manifest.num_tokens, logical_bytes(manifest), flagged, damaged, suspect, never


def count_into(tallies: dict[int, list[int]], space: int, manifest: Manifest) -> None:
    """Add one version's `tally_of` to a key space's running counts (a batch's, written with one upsert)."""
    tally = tallies.setdefault(space, [0] * len(TALLY_COUNTS))
    for position, count in enumerate(tally_of(manifest)):
        tally[position] += count


# A key space's running counts, as `tally_of` gives them and the `tallies` table holds them. A new count is a name
# here, a part of `tally_of` (and of `mark_delta` if a mark moves it), a migration step (schema/tables.py) and a field
# of StoreTally, which `hsstore health` and /metrics read.
TALLY_COUNTS = ("entries", "tokens", "bytes", "flagged", "damaged", "suspect", "unchecked")
# a version counted into its key space's tally (or moved between attentions), on every engine
TALLY = (
    f"INSERT INTO tallies (space, {', '.join(TALLY_COUNTS)}) VALUES ({', '.join('?' * (1 + len(TALLY_COUNTS)))})"
    " ON CONFLICT (space) DO UPDATE SET " + ", ".join(f"{c} = tallies.{c} + excluded.{c}" for c in TALLY_COUNTS)
)


def mark_delta(space: int, before: Attention, after: Attention, was_unchecked: bool, is_unchecked: bool) -> tuple:
    """A TALLY row moving one version of `space` from one attention to another, and from unchecked to checked (or
    back): its flagged, damaged, suspect and unchecked counts by -1, 0 or +1, nothing else."""
    moved = (int(bool(after & bit)) - int(bool(before & bit)) for bit in Attention)
    return (space, 0, 0, 0, *moved, int(is_unchecked) - int(was_unchecked))


@dataclass(frozen=True, slots=True)
class KeySpace:
    """A row of `key_spaces`: the parts of an entry key a version shares with every version of its run, and the
    JSON fragment they are in a manifest."""

    model_revision: str
    backend: str
    featureset_id: str
    featureset: str  # the FeatureSet's JSON

    @property
    def fragment(self) -> str:
        return (
            f'"model_revision":{json.dumps(self.model_revision)},"backend":{json.dumps(self.backend)},'
            f'"featureset_id":{json.dumps(self.featureset_id)},"featureset":{self.featureset}'
        )

    @classmethod
    def of(cls, manifest: Manifest) -> KeySpace:
        return cls(
            manifest.model_revision, manifest.backend, manifest.featureset_id, manifest.featureset.model_dump_json()
        )


def fingerprint_row(fingerprint: Fingerprint) -> tuple[str, str]:
    """(digest, document) of a fingerprint: stored once under the digest of its JSON."""
    document = fingerprint.model_dump_json()
    return hashlib.sha256(document.encode()).hexdigest(), document


def sample_of(manifest: Manifest) -> str:
    return json.dumps(manifest.sample, ensure_ascii=False, separators=(",", ":"))


def body_of(manifest: Manifest) -> bytes:
    """Every body field, defaults too: the document a listing splices from the row is the whole manifest's JSON."""
    packer = zlib.compressobj(_LEVEL, zdict=_ZDICTS[_BODY_V1])
    raw = manifest.model_dump_json(include=set(BODY_FIELDS)).encode()
    return bytes([_BODY_V1]) + packer.compress(raw) + packer.flush()


def body_text(body: bytes) -> str:
    """A body's JSON, unpacked with the dictionary its first byte names."""
    unpacker = zlib.decompressobj(zdict=_ZDICTS[body[0]])
    return (unpacker.decompress(body[1:]) + unpacker.flush()).decode()


@dataclass(frozen=True, slots=True)
class VersionRow:
    """A row of `entry_versions` with what it references, as a read selects it."""

    seq: int
    prompt_hash: bytes
    space: int
    content_hash: bytes
    fingerprint: int
    created_at: str
    body: bytes
    audit: str | None
    integrity: str | None
    sample: str

    def manifest(self, space: KeySpace, fingerprint: str) -> Manifest:
        """The manifest, validated once from its spliced JSON (pydantic's parser does the whole document at once)."""
        return Manifest.model_validate_json(self.document(space, fingerprint))

    def document(self, space: KeySpace, fingerprint: str) -> str:
        """The manifest's JSON spliced from the row's parts, validated by nothing (a listing sends it as it is: the
        parts were a validated manifest when they were written)."""
        rest = body_text(bytes(self.body))
        head = (
            f'{{"seq":{self.seq},"prompt_hash":"{bytes(self.prompt_hash).hex()}",'
            f'"content_hash":"{content_text(self.content_hash)}","created_at":{json.dumps(self.created_at)},'
            f'{space.fragment},"fingerprint":{fingerprint},"sample":{self.sample}'
        )
        head += f',"audit":{self.audit or "null"},"integrity":{self.integrity or "null"}'
        return head + ("}" if rest == "{}" else "," + rest[1:])
