"""Rebuilding the catalog trusts no manifest document: a bad one is skipped and reported, the rest are re-added, and
no single-bit flip of a document gets an altered version into the catalog."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from hsstore.cli import app
from schemas.api import ExtractRequest
from schemas.featureset import FeatureSet
from schemas.keys import EntryFilter
from service.core.trust.rebuild import RejectedDocument
from service.main import build_services
from service.model.loader import LoadedModel
from service.services import Services
from service.settings import Settings


def store_three(settings: Settings, loaded: LoadedModel) -> tuple[list, list[Path]]:
    services = build_services(settings, loaded)
    samples = [{"text": f"rebuild me {i}"} for i in range(3)]
    request = ExtractRequest(samples=samples, featureset=FeatureSet(layers=[1, 2]), backend="torch")
    manifests = [r.manifest for r in services.writer.extract(request).results]
    services.close()
    documents = sorted((settings.data_dir / "manifests").rglob("*.json"))
    return manifests, documents


def replica(settings: Settings) -> Services:
    return build_services(settings.model_copy(update={"model_dir": None}))


def test_one_invalid_and_one_tampered_document_are_skipped_and_the_rest_rebuilt(
    settings: Settings, tiny_loaded: LoadedModel
) -> None:
    manifests, documents = store_three(settings, tiny_loaded)
    invalid, tampered, _ = documents
    invalid.write_bytes(b'{"schema_version": 1, "prompt_')  # cut short
    text = tampered.read_text()
    prompt = next(m.prompt_hash for m in manifests if m.prompt_hash in text)
    tampered.write_text(text.replace(prompt, prompt[:10] + ("0" if prompt[10] != "0" else "1") + prompt[11:]))
    settings.catalog_path.unlink()
    for suffix in ("-wal", "-shm"):
        Path(f"{settings.catalog_path}{suffix}").unlink(missing_ok=True)

    result = CliRunner().invoke(app, ["rebuild-catalog", str(settings.data_dir)])
    assert result.exit_code == 1, result.output
    assert "1 versions re-added, 0 already there, 2 skipped" in result.stdout
    assert "not a manifest" in result.stderr and "it was altered" in result.stderr
    rebuilt = replica(settings)
    (listed,) = rebuilt.versions.find(EntryFilter(), limit=10)
    assert listed.prompt_hash in {m.prompt_hash for m in manifests}
    assert listed.prompt_hash != prompt  # the re-keyed document was not believed


def test_no_single_bit_flip_of_a_document_gets_an_altered_version_in(
    settings: Settings, tiny_loaded: LoadedModel
) -> None:
    _, documents = store_three(settings, tiny_loaded)
    rebuilder = replica(settings).rebuilder
    document = documents[0]
    name, original = document.stem, document.read_bytes()
    truth = rebuilder.check(name, original)
    accepted = rejected = 0
    for position in range(len(original)):
        for bit in range(8):
            flipped = bytearray(original)
            flipped[position] ^= 1 << bit
            try:
                believed = rebuilder.check(name, bytes(flipped))
            except RejectedDocument:
                rejected += 1
                continue
            accepted += 1
            assert believed.model_dump() == truth.model_dump(), (position, bit)
    print(f"{accepted + rejected} flips of one document: {rejected} rejected, {accepted} read as the original")
    assert accepted == 0  # a document is named by its digest: any changed byte is caught


def test_documents_named_by_key_before_digests_still_rebuild_and_stay_bound_to_their_key(
    settings: Settings, tiny_loaded: LoadedModel
) -> None:
    from schemas.keys import version_name
    from schemas.manifest import Manifest

    manifests, documents = store_three(settings, tiny_loaded)
    rebuilder = replica(settings).rebuilder
    legacy, other = documents[:2]
    for path in (legacy, other):  # as stores written before this change have them
        manifest = Manifest.model_validate_json(path.read_bytes())
        path.rename(path.with_name(version_name(manifest.key, manifest.content_hash) + ".json"))
    legacy = next(
        p for p in (settings.data_dir / "manifests").rglob("*.json") if p.stem not in {d.stem for d in documents}
    )
    assert rebuilder.check(legacy.stem, legacy.read_bytes()).prompt_hash in {m.prompt_hash for m in manifests}
    text = legacy.read_text()
    prompt = next(m.prompt_hash for m in manifests if m.prompt_hash in text)
    rekeyed = text.replace(prompt, prompt[:5] + ("0" if prompt[5] != "0" else "1") + prompt[6:]).encode()
    try:
        rebuilder.check(legacy.stem, rekeyed)
    except RejectedDocument as exc:
        assert "altered" in str(exc)
    else:
        raise AssertionError("a re-keyed document was believed")
