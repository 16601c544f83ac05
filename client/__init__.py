"""The hsstore client: fetch verified hidden-state features over HTTP without loading the model."""

from client.cache import FeatureCache
from client.client import DEFAULT_URL, FeatureClient
from client.errors import (
    AmbiguousError,
    AuthError,
    BackendMismatchError,
    BackendUnavailableError,
    CatalogUnavailableError,
    ConnectionFailedError,
    ConnectionLostError,
    DirectReadsUnavailableError,
    ExtractionFailedError,
    ForbiddenError,
    HandoverError,
    HsstoreError,
    ImplausibleError,
    IntegrityError,
    InvalidRequestError,
    JobNotFoundError,
    MixedBackendsError,
    ModelUnavailableError,
    NameTakenError,
    NonFiniteError,
    NotFoundError,
    NotHsstoreError,
    NotReadyError,
    ReadOnlyError,
    RevisionUnavailableError,
    SampleRejectedError,
    ServerError,
    SGLangError,
    StorageFullError,
    StoreUnavailableError,
    TooLargeError,
    WindowClosedError,
)
from client.features import Features
from client.live.guard import check_backends
from client.teacher import TopK, kl_to_student, student_log_probs
from compute.kernel_binding import live_backend
from schemas.featureset import FeatureSet
from schemas.lazy import lazy_exports
from schemas.prompt_hash import prompt_hash

# The torch Datasets load torch on first use: `import client` (and the CLI) stays light for callers without tensors.
_TORCH_DATA = {
    "compute_features": "client.live.computation",
    "DeviceFeed": "client.training.device_feed",
    "EntryStream": "client.training.entry_stream",
    "FeatureDataset": "client.training.torch_data",
    "fetch_sample": "client.training.torch_data",
    "LengthBatches": "client.training.length_buckets",
    "pack_collate": "client.training.collate",
    "pad_collate": "client.training.collate",
    "ProcessFeed": "client.training.process_feed",
}


__getattr__ = lazy_exports(__name__, _TORCH_DATA)


__all__ = [
    "DEFAULT_URL",
    "AmbiguousError",
    "AuthError",
    "BackendMismatchError",
    "BackendUnavailableError",
    "CatalogUnavailableError",
    "ConnectionFailedError",
    "ConnectionLostError",
    "DeviceFeed",
    "DirectReadsUnavailableError",
    "EntryStream",
    "ExtractionFailedError",
    "FeatureCache",
    "FeatureClient",
    "FeatureDataset",
    "FeatureSet",
    "Features",
    "ForbiddenError",
    "HandoverError",
    "HsstoreError",
    "ImplausibleError",
    "IntegrityError",
    "InvalidRequestError",
    "JobNotFoundError",
    "LengthBatches",
    "MixedBackendsError",
    "ModelUnavailableError",
    "NameTakenError",
    "NonFiniteError",
    "NotFoundError",
    "NotHsstoreError",
    "NotReadyError",
    "ProcessFeed",
    "ReadOnlyError",
    "RevisionUnavailableError",
    "SGLangError",
    "SampleRejectedError",
    "ServerError",
    "StorageFullError",
    "StoreUnavailableError",
    "TooLargeError",
    "TopK",
    "WindowClosedError",
    "check_backends",
    "compute_features",
    "fetch_sample",
    "kl_to_student",
    "live_backend",
    "pack_collate",
    "pad_collate",
    "prompt_hash",
    "student_log_probs",
]
