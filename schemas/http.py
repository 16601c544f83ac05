"""What the client and the service agree on over HTTP besides the models: where a service listens unless told
otherwise, and the media types of the feature bodies (the chunk wire's own lives in chunk_wire, the dataset index's
in datasets). No imports: the CLI reads this before it loads anything else."""

from __future__ import annotations

DEFAULT_URL = "http://127.0.0.1:8000"  # Settings' default host and port
SAFETENSORS_MEDIA_TYPE = "application/octet-stream"  # one entry (or part of one): safetensors, manifest in metadata
FRAMES_MEDIA_TYPE = "application/x-hsstore-frames"  # a batch: per key, a u64 length, a u8 kind, then a body or an error
SERVED_HASH_HEADER = "X-Hsstore-Served-Hash"  # sha256 of the tensors a safetensors part holds, as content_hash
