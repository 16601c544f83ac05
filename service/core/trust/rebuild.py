"""Rebuilding the catalog from the manifest documents stored beside the blobs, trusting none of them: each is checked
against what it claims (its name binds it to its key, its prompt hash is recomputed from its sample, its blob must
hold exactly the tensors it describes, chunk by chunk), and a document that fails is skipped and reported, never
stops the rebuild. A document of the rule before the normal form (its sample hashed with its null members) is
re-keyed and its old hash kept as an alias, as the catalog's migration does."""

from __future__ import annotations

from dataclasses import dataclass, field

from pydantic import ValidationError

from schemas.content_hash import content_hash
from schemas.keys import version_name
from schemas.manifest import Manifest, document_name
from schemas.prompt_hash import prompt_hash_as_sent
from schemas.samples import InvalidSampleError, parse_sample
from schemas.validation import describe_errors
from service.catalog.protocol import VersionCatalog
from service.catalog.upgrades.rekey import rekeyed
from service.storage.protocol import BlobStore, Selection


class RejectedDocument(ValueError):
    """A manifest document that does not hold up; the message says what failed."""


@dataclass
class RebuildReport:
    added: int = 0
    present: int = 0  # already in the catalog
    rejected: list[tuple[str, str]] = field(default_factory=list)  # (document name, why)


class CatalogRebuilder:
    def __init__(self, store: BlobStore, versions: VersionCatalog) -> None:
        self.store = store
        self.versions = versions

    def rebuild(self) -> RebuildReport:
        report = RebuildReport()
        for name, document in self.store.iter_manifests():
            try:
                manifest = self.check(name, document)
            except RejectedDocument as exc:
                report.rejected.append((name, str(exc)))
                continue
            if (moved := rekeyed(manifest)) is not None:  # written under the rule before the normal form
                self.versions.record_move(manifest.prompt_hash, moved.prompt_hash)
                manifest = moved
            if self.versions.add(manifest)[1]:
                report.added += 1
            else:
                report.present += 1
        return report

    def check(self, name: str, document: bytes) -> Manifest:
        """The manifest a document holds, if every claim in it holds; RejectedDocument naming the first that fails."""
        try:
            manifest = Manifest.model_validate_json(document)
        except ValidationError as exc:
            reason = describe_errors(exc.errors(include_url=False, include_input=False))
            raise RejectedDocument(f"not a manifest: {reason}"[:300]) from None
        try:
            key = manifest.key  # the key's parts must have their formats
        except ValueError as exc:
            raise RejectedDocument(str(exc)) from None
        if name != document_name(document) and name != version_name(key, manifest.content_hash):
            # documents are named by their digest; those written before were named by key and content hash
            raise RejectedDocument("its bytes are not those it was stored with: it was altered")
        try:
            parsed = parse_sample(manifest.sample)
        except InvalidSampleError as exc:
            raise RejectedDocument(f"its sample is not a sample: {exc}") from None
        named = {parsed.prompt_hash, prompt_hash_as_sent(manifest.sample)}  # either rule's, as it was written then
        if manifest.prompt_hash not in named or manifest.featureset.id != manifest.featureset_id:
            raise RejectedDocument("its prompt hash or featureset id is not that of its sample and featureset")
        self._check_tensors(manifest)
        return manifest

    def _check_tensors(self, manifest: Manifest) -> None:
        tokens = manifest.num_tokens
        hidden = manifest.tensors.get("hidden_states")
        if (
            manifest.prompt_tokens + manifest.completion_tokens != tokens
            or hidden is None
            or hidden.shape[:2] != [tokens, len(manifest.featureset.layers)]
            or any(not info.shape or info.shape[0] != tokens for info in manifest.tensors.values())
        ):
            raise RejectedDocument("its token counts and tensor shapes do not agree")
        try:
            tensors = self.store.get_slice(manifest.content_hash, Selection(), manifest.tensors)
        except KeyError:
            raise RejectedDocument(f"its blob {manifest.content_hash} is missing") from None
        except (ValueError, OSError) as exc:
            raise RejectedDocument(f"its blob does not hold what it describes ({type(exc).__name__})") from None
        if content_hash(tensors.values()) != manifest.content_hash:
            raise RejectedDocument("its blob's tensors do not hash to its content hash")
