"""The contract client and service share: samples, hashes, featuresets, manifests and the wire format. Its names
are loaded from their modules on first use, so that importing one module of the package (the CLI reads
`schemas.http` and `schemas.jsonl` before anything heavy) does not import them all."""

from __future__ import annotations

from schemas.lazy import lazy_exports

_EXPORTS = {
    "AUTO": "schemas.backend",
    "BACKEND_CHOICES": "schemas.backend",
    "Backend": "schemas.backend",
    "Fingerprint": "schemas.backend",
    "content_hash": "schemas.content_hash",
    "EMBED": "schemas.featureset",
    "FINAL_NORM": "schemas.featureset",
    "FeatureSet": "schemas.featureset",
    "LayerId": "schemas.featureset",
    "build_target_layer_ids": "schemas.featureset",
    "parse_layer": "schemas.featureset",
    "EntryKey": "schemas.keys",
    "is_content_hash": "schemas.keys",
    "is_featureset_id": "schemas.keys",
    "is_model_revision": "schemas.keys",
    "is_prompt_hash": "schemas.keys",
    "LayerStats": "schemas.manifest",
    "Manifest": "schemas.manifest",
    "TensorInfo": "schemas.manifest",
    "model_revision": "schemas.model_revision",
    "canonical_json": "schemas.prompt_hash",
    "prompt_hash": "schemas.prompt_hash",
    "sample_identity": "schemas.prompt_hash",
    "InvalidSampleError": "schemas.samples",
    "ParsedSample": "schemas.samples",
    "Sample": "schemas.samples",
    "parse_sample": "schemas.samples",
    "RawTensor": "schemas.tensors",
    "TokenRange": "schemas.tokens",
    "parse_token_range": "schemas.tokens",
}

__all__ = sorted(_EXPORTS)
__getattr__ = lazy_exports(__name__, _EXPORTS)
