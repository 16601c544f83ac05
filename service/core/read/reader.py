"""The reader: which stored version a key names, which part of it a read selects, and the verified bytes of that
part; plus the listing. It never extracts."""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta

from schemas import chunk_body, safetensors_body
from schemas.api import ListedKey
from schemas.content_hash import content_hash
from schemas.featureset import LayerId
from schemas.http import BODY_FORMATS, FALLBACK, SERVED_HASH_HEADER, BodyFormat
from schemas.keys import CURSOR, EntryFilter, FeatureKey
from schemas.manifest import LAYER_ARRAYS, Manifest
from schemas.resolution import serving
from schemas.states import Verify
from schemas.tensors import RawTensor, TensorLayout
from schemas.timestamps import stamp
from schemas.tokens import TokenRange
from service.catalog.protocol import VersionCatalog
from service.core.read.served import Body, ChunkBody, Part, Served
from service.errors import AmbiguousEntry, CorruptEntry, DirectReadsUnavailable, EntryNotFound, InvalidRequest
from service.storage.protocol import BlobStore, Selection

log = logging.getLogger("hsstore.reader")
_CANDIDATES = 10_000
# A slice's served hash is only known once it is read; it always has this many characters, which is all a header's
# length depends on.
_HASH_PLACEHOLDER = "sha256:" + "0" * 64


class FeatureReader:
    def __init__(self, store: BlobStore, versions: VersionCatalog, verify_reads: Verify = "chunks") -> None:
        self.store = store
        self.versions = versions
        self.verify_reads = verify_reads
        # each body format's maker: the part in that format, or None where this entry cannot go out so
        self._bodies: dict[BodyFormat, Callable[[Manifest, Part], Body | None]] = {
            BodyFormat.CHUNKS: self._chunks,
            BodyFormat.SAFETENSORS: self._safetensors,
        }

    def resolve(self, key: FeatureKey, layers: list[LayerId] | None = None) -> Manifest:
        """The newest version of the one entry the key names; a key part left out must be unambiguous once the
        rules of `schemas.resolution` have spoken."""
        found = serving(self.versions.find(EntryFilter.of_key(key), limit=_CANDIDATES), key, layers)
        if not found:
            stored = self.versions.find(EntryFilter(prompt_hash=key.prompt_hash), limit=_CANDIDATES)
            if not stored and (moved := self.versions.moved_to(key.prompt_hash)) is not None:
                # a hash of the rule before the normal form: an alias of its sample's key now (a snapshot's, say)
                return self.resolve(key.model_copy(update={"prompt_hash": moved}), layers)
            if not stored:
                raise EntryNotFound(f"no entry for prompt_hash {key.prompt_hash}")
            asked = key.narrowing() + (f", layers={layers}" if layers else "")
            raise EntryNotFound(
                f"no entry for prompt_hash {key.prompt_hash} with {asked}; stored: {_describe_keys(stored)}"
            )
        keys = {m.key for m in found}
        if len(keys) > 1:
            raise AmbiguousEntry(
                f"prompt_hash {key.prompt_hash} has {len(keys)} entries ({_describe_keys(found)}); "
                "name model_revision, backend and/or featureset"
            )
        newest = max(found, key=lambda m: m.seq or 0)
        if newest.corrupt and (found_at := newest.integrity) is not None:
            raise CorruptEntry(
                f"stored entry {newest.content_hash} was found corrupt at {found_at.checked_at} "
                f"({found_at.detail}); extracting it again (force) repairs it"
            )
        return newest

    def part(self, manifest: Manifest, layers: list[LayerId] | None, tokens: TokenRange | None) -> Part:
        """The part of an entry `layers` (a layer named twice is read once) and `tokens` select; EntryNotFound for
        layers the entry does not hold, InvalidRequest for an empty part."""
        stored = list(manifest.featureset.layers)
        axis1: dict[str, tuple[int, ...]] = {}
        served_layers = stored
        if layers is not None:
            if not layers:
                raise InvalidRequest("layers names no layer")
            layers = list(dict.fromkeys(layers))
            missing = [layer for layer in layers if layer not in stored]
            if missing:
                raise EntryNotFound(f"layers {missing} are not in this entry (it holds layers {stored})")
            positions = tuple(stored.index(layer) for layer in layers)
            if positions != tuple(range(len(stored))):
                axis1 = {name: positions for name in LAYER_ARRAYS if name in manifest.tensors}
                served_layers = list(layers)
        span = (0, manifest.num_tokens)
        if tokens is not None:
            try:
                span = tokens.resolve(manifest.num_tokens)
            except ValueError as exc:
                raise InvalidRequest(str(exc)) from None
        rows = None if span == (0, manifest.num_tokens) else span
        full = safetensors_body.covers_whole(stored, manifest.num_tokens, served_layers, span)
        return Part(served_layers, span, Selection(rows, axis1), full)

    def body(
        self,
        manifest: Manifest,
        layers: list[LayerId] | None,
        tokens: TokenRange | None,
        accepted: Sequence[BodyFormat] = (FALLBACK,),
    ) -> Body:
        """The part as it goes out, in the first of the `accepted` formats this entry can be sent in (an entry
        written before chunk digests goes out as safetensors, whatever the client accepts)."""
        part = self.part(manifest, layers, tokens)
        for wanted in accepted:
            body = self._bodies[wanted](manifest, part)
            if body is not None:
                return body
        raise AssertionError(f"no body format of {accepted} can send {manifest.content_hash}")  # FALLBACK always can

    def _chunks(self, manifest: Manifest, part: Part) -> Body | None:
        """The stored chunks, for the client to decode and verify: nothing decoded or hashed here."""
        chunks = self._chunk_body(manifest, part)
        if chunks is None:
            return None
        return Body(
            BODY_FORMATS[BodyFormat.CHUNKS], chunks.length, part, lambda: ({}, self.chunk_pieces(manifest, chunks))
        )

    def _safetensors(self, manifest: Manifest, part: Part) -> Body:
        def read() -> tuple[dict[str, str], Iterable[bytes | memoryview]]:
            served = self._read(manifest, part)
            # the header, then each tensor's own buffer: no joined copy of the body is made
            return {SERVED_HASH_HEADER: served.served_hash}, safetensors_body.encode_parts(
                served.tensors.values(), served.metadata()
            )

        return Body(BODY_FORMATS[BodyFormat.SAFETENSORS], self._served_length(manifest, part), part, read)

    def read(self, manifest: Manifest, layers: list[LayerId] | None = None, tokens: TokenRange | None = None) -> Served:
        """Every chunk read is checked against its crc32c; with `verify_reads="full"` a full read is also
        re-hashed here (the client verifies the content hash on receipt either way)."""
        return self._read(manifest, self.part(manifest, layers, tokens))

    def _read(self, manifest: Manifest, part: Part) -> Served:
        # A whole entry is checked on receipt against its content hash; a part only the digests recorded at write
        # time can check, so the chunks it is read from are checked here. The metadata is checked either way.
        tensors = self.read_part(manifest, part.selection, check_chunks=not part.full)
        if part.full:
            served_hash = manifest.content_hash
            if self.verify_reads == "full" and content_hash(tensors.values()) != manifest.content_hash:
                raise CorruptEntry(f"stored bytes of {manifest.content_hash} no longer hash to it")
        else:
            served_hash = content_hash(tensors.values())
        return Served(manifest, tensors, part, served_hash)

    def read_part(self, manifest: Manifest, selection: Selection, check_chunks: bool = True) -> dict[str, RawTensor]:
        with _damage(manifest):
            return self.store.get_slice(manifest.content_hash, selection, manifest.tensors, check_chunks)

    def _chunk_body(self, manifest: Manifest, part: Part) -> ChunkBody | None:
        """The part as stored chunks for the client to decode and verify; None for an entry written before chunk
        digests were recorded, or in a layout whose chunks cannot be sent as they lie: those go out as
        safetensors."""
        if manifest.chunks_digest is None or any(t.chunks is None for t in manifest.tensors.values()):
            return None
        with _damage(manifest):
            located = self.store.locate(manifest.content_hash, part.selection, manifest.tensors)
        if located is None:
            return None
        arrays, offset = [], 0
        for name, where in sorted(located.items()):
            info = manifest.tensors[name]
            chunks = info.chunks
            assert chunks is not None  # `locate` finds only entries stored in chunks, each with its chunk record
            digests = chunks.digests
            sent = []
            for at, _, length in where.chunks:
                sent.append((at, offset, length, digests[at]))
                offset += length
            axis1 = part.selection.axis1.get(name)
            arrays.append(
                chunk_body.SentArray(
                    name=name,
                    dtype=info.dtype,
                    shape=info.shape,
                    chunk=chunks.shape,
                    codec="blosc",
                    rows=part.tokens,
                    axis1=list(axis1) if axis1 is not None else None,
                    chunks=sent,
                )
            )
        header = chunk_body.ChunkHeader(
            manifest=manifest.model_dump_json(),
            layers=part.layers,
            tokens=part.tokens,
            full=part.full,
            arrays=arrays,
            data_bytes=offset,
        )
        encoded = chunk_body.encode_header(header)
        arrays_located = [(n, w.chunks) for n, w in sorted(located.items())]
        return ChunkBody(part, header, encoded, arrays_located, len(encoded) + offset)

    def direct(
        self, manifest: Manifest, layers: list[LayerId] | None, tokens: TokenRange | None, expires_s: float
    ) -> chunk_body.DirectEntry:
        """What a client needs to read a part straight from the object store: the chunk header, each array's
        presigned shard URL and where in the shard each chunk lies."""
        body = self._chunk_body(manifest, self.part(manifest, layers, tokens))
        if body is None:
            raise DirectReadsUnavailable(
                f"entry {manifest.content_hash} was written before chunk digests were recorded: read it through "
                "the service"
            )
        urls = {}
        for name, _ in body.arrays:
            url = self.store.direct_url(manifest.content_hash, name, len(manifest.tensors[name].shape), expires_s)
            if url is None:
                raise DirectReadsUnavailable(
                    "this service keeps its blobs where clients cannot read them (its own disk, or a store that "
                    "cannot sign URLs): read through the service"
                )
            urls[name] = url
        offsets = {name: [offset for _, offset, _ in chunks] for name, chunks in body.arrays}
        expires = stamp(datetime.now(UTC) + timedelta(seconds=expires_s))
        return chunk_body.DirectEntry(header=body.header, urls=urls, shard_offsets=offsets, expires_at=expires)

    def chunk_pieces(self, manifest: Manifest, body: ChunkBody) -> Iterator[bytes | memoryview]:
        """The bytes of a chunk body, in pieces, as the store holds them. Every array is opened here, before the
        first byte is sent, so a missing blob is still an error response."""
        with _damage(manifest):
            arrays = [self.store.read_located(manifest.content_hash, name, chunks) for name, chunks in body.arrays]
        return itertools.chain([body.encoded], *arrays)

    def token_ids(self, manifest: Manifest) -> list[int]:
        """The entry's input ids alone (no hidden states read)."""
        only_tokens = Selection(axis1={name: () for name in LAYER_ARRAYS if name in manifest.tensors})
        return self.read_part(manifest, only_tokens)["input_ids"].numpy().tolist()

    def served_length(
        self, manifest: Manifest, layers: list[LayerId] | None = None, tokens: TokenRange | None = None
    ) -> int:
        """The length of the safetensors body of this selection, without reading the blob (a batch's size)."""
        return self._served_length(manifest, self.part(manifest, layers, tokens))

    def _served_length(self, manifest: Manifest, part: Part) -> int:
        layout = []
        for name, info in manifest.tensors.items():
            shape = [part.tokens[1] - part.tokens[0], *info.shape[1:]]
            if name in LAYER_ARRAYS:
                shape[1] = len(part.layers)
            layout.append(TensorLayout(name, info.dtype, tuple(shape)))
        served_hash = manifest.content_hash if part.full else _HASH_PLACEHOLDER
        metadata = safetensors_body.served_metadata(
            manifest.model_dump_json(), part.layers, part.tokens, served_hash, part.full
        )
        return safetensors_body.body_length(layout, metadata)

    def entries(self, where: EntryFilter, limit: int, cursor: str | None) -> tuple[list[str], str | None]:
        """A page of the listing: each version's manifest JSON as the catalog keeps it, and the next page's cursor."""
        found = self.versions.find_documents(where, limit=limit + 1, after_seq=_after(cursor))
        page = found[:limit]
        return [document for _, document in page], (str(page[-1][0]) if len(found) > limit and page else None)

    def keys(self, where: EntryFilter, limit: int, cursor: str | None) -> tuple[list[ListedKey], str | None]:
        """A page of the key listing (no manifest read), and the next page's cursor."""
        found = self.versions.find_keys(where, limit=limit + 1, after_seq=_after(cursor))
        page = found[:limit]
        return [k.listed for k in page], (str(page[-1].seq) if len(found) > limit and page else None)


def _after(cursor: str | None) -> int:
    if cursor and not CURSOR.match(cursor):
        raise InvalidRequest(f"cursor {cursor[:40]!r} is not one this service handed out")
    return int(cursor) if cursor else 0


@contextmanager
def _damage(manifest: Manifest) -> Iterator[None]:
    """The store's failures for a listed entry as what they mean: its blob is missing or damaged."""
    try:
        yield
    except KeyError:
        raise CorruptEntry(f"the catalog lists {manifest.content_hash} but its blob is missing") from None
    except (ValueError, OSError) as exc:  # a failed crc32c, a malformed index or metadata, a missing file
        log.error("reading %s failed: %r", manifest.content_hash, exc)  # the server's paths stay in its log
        raise CorruptEntry(f"stored entry {manifest.content_hash} is damaged ({type(exc).__name__})") from None


def _describe_keys(manifests: list[Manifest]) -> str:
    keys = sorted({(m.backend, m.model_revision[:19], m.featureset_id) for m in manifests})
    return "; ".join(f"backend={b} model_revision={r}… featureset={f}" for b, r, f in keys)
