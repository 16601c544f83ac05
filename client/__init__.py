"""The hsstore client: fetch verified hidden-state features over HTTP without loading the model."""

from client.cache import FeatureCache
from client.client import DEFAULT_URL, FeatureClient
from client.errors import (
    AmbiguousError,
    AuthError,
    BackendUnavailableError,
    HsstoreError,
    IntegrityError,
    InvalidRequestError,
    ModelUnavailableError,
    NotFoundError,
    ServerError,
)
from client.features import Features
from client.torch_data import EntryStream, FeatureDataset, pack_collate, pad_collate
from schemas.featureset import FeatureSet
from schemas.prompt_hash import prompt_hash

__all__ = [
    "DEFAULT_URL",
    "AmbiguousError",
    "AuthError",
    "BackendUnavailableError",
    "EntryStream",
    "FeatureCache",
    "FeatureClient",
    "FeatureDataset",
    "FeatureSet",
    "Features",
    "HsstoreError",
    "IntegrityError",
    "InvalidRequestError",
    "ModelUnavailableError",
    "NotFoundError",
    "ServerError",
    "pack_collate",
    "pad_collate",
    "prompt_hash",
]
