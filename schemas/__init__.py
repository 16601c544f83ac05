"""The contract client and service share: samples, hashes, featuresets, manifests and the wire format."""

from schemas.backend import AUTO, BACKEND_CHOICES, Backend, Fingerprint
from schemas.content_hash import content_hash
from schemas.featureset import EMBED, FINAL_NORM, FeatureSet, LayerId, build_target_layer_ids, parse_layer
from schemas.keys import EntryKey, is_content_hash, is_featureset_id, is_model_revision, is_prompt_hash
from schemas.manifest import LayerStats, Manifest, TensorInfo
from schemas.model_revision import model_revision
from schemas.prompt_hash import canonical_json, prompt_hash, sample_identity
from schemas.samples import InvalidSampleError, ParsedSample, Sample, parse_sample
from schemas.tensors import RawTensor
from schemas.tokens import TokenRange, parse_token_range

__all__ = [
    "AUTO",
    "BACKEND_CHOICES",
    "EMBED",
    "FINAL_NORM",
    "Backend",
    "EntryKey",
    "FeatureSet",
    "Fingerprint",
    "InvalidSampleError",
    "LayerId",
    "LayerStats",
    "Manifest",
    "ParsedSample",
    "RawTensor",
    "Sample",
    "TensorInfo",
    "TokenRange",
    "build_target_layer_ids",
    "canonical_json",
    "content_hash",
    "is_content_hash",
    "is_featureset_id",
    "is_model_revision",
    "is_prompt_hash",
    "model_revision",
    "parse_layer",
    "parse_sample",
    "parse_token_range",
    "prompt_hash",
    "sample_identity",
]
