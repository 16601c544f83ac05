"""Every single-bit flip of every metadata file of a small entry: no read (whole, `layers=`, `tokens=`, a batch
item) accepted by the client returns a byte that differs from what was written. A read either fails (corrupt_entry
on the service, IntegrityError on the client) or serves exactly the written bytes."""

from __future__ import annotations

from client.errors import IntegrityError
from client.features import decode_verified
from schemas import safetensors_body
from schemas.api import ExtractRequest
from schemas.featureset import FeatureSet
from schemas.tokens import TokenRange
from service.errors import CorruptEntry
from service.main import build_services
from service.model.loader import LoadedModel
from service.settings import Settings

READS = [(None, None), ([2], None), (None, TokenRange(1, 3)), ([1, 2], TokenRange(0, 2))]


def served_or_refused(reader, manifest, layers, tokens) -> dict[str, bytes] | None:
    """What a client would accept from this read (its bytes), or None if the service or the client refused it."""
    try:
        served = reader.read(manifest, layers, tokens)
        features = decode_verified(safetensors_body.encode(served.tensors.values(), served.metadata()))
    except (CorruptEntry, IntegrityError):
        return None
    return {name: bytes(t.data) for name, t in features.tensors.items()}


def test_no_metadata_flip_makes_a_read_serve_other_bytes(settings: Settings, tiny_loaded: LoadedModel) -> None:
    services = build_services(settings, tiny_loaded)
    request = ExtractRequest(samples=[{"text": "flip"}], featureset=FeatureSet(layers=[1, 2]), backend="torch")
    manifest = services.writer.extract(request).results[0].manifest
    reader = services.reader
    expected = [served_or_refused(reader, manifest, layers, tokens) for layers, tokens in READS]
    assert all(e is not None for e in expected)
    digest = manifest.content_hash.removeprefix("sha256:")
    blob = settings.data_dir / "blobs" / digest[:2] / digest
    files = sorted(blob.rglob("zarr.json"))
    assert len(files) == 3  # the group, hidden_states, input_ids

    flips = refused = 0
    for path in files:
        original = path.read_bytes()
        for position in range(len(original)):
            for bit in range(8):
                damaged = bytearray(original)
                damaged[position] ^= 1 << bit
                path.write_bytes(damaged)
                for (layers, tokens), good in zip(READS, expected, strict=True):
                    got = served_or_refused(reader, manifest, layers, tokens)
                    refused += got is None
                    assert got is None or got == good, (path.relative_to(blob), position, bit, layers, tokens)
                flips += 1
        path.write_bytes(original)
    assert flips == 8 * sum(len(p.read_bytes()) for p in files)
    print(f"{flips} single-bit flips x {len(READS)} reads: {refused} refused, 0 served wrong")
