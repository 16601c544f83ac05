"""The one settings object: environment variables `HSSTORE_*`, then an optional TOML file (`HSSTORE_CONFIG`)."""

from __future__ import annotations

import dataclasses
import ipaddress
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from schemas.codecs import DEFAULT_CODEC, StoreCodec
from schemas.states import TokenScope, Verify
from service.config_file import config_file, config_file_sources

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

Group = TypeVar("Group", bound="DataclassInstance")

# Writer threads, and the threads compressing and digesting a new blob's chunks for them (not one per core, as reads
# have): each chunk takes and gives up the GIL a few times, and the extracting thread, which gives it up at every kernel
# launch, waits behind every thread that wants it back. On the GPU host a thread launching tiny ops kept ~10% of its
# rate beside 4 writers on 16 codec threads (the earlier setup), ~90% beside 2 on 2 (which write 0.44x as fast;
# benchmarks/results/writer-gil-h100host.json); end to end, FP8 short mix, 3 on 3 was the fastest of those tried:
# 13,222 tok/s against 12,333 for the earlier 4 on 16 (benchmarks/results/fp8-codec-sweep-h100.json).
WRITER_THREADS = 3
WRITE_CODEC_THREADS = 3


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="HSSTORE_", extra="forbid")

    data_dir: Path = Field(default=Path("hsstore-data"), description="blobs/, manifests/ and catalog.sqlite live here")
    store_url: str | None = Field(
        default=None,
        description="where blobs live when not under data_dir: s3://bucket/prefix (any S3 API; credentials from "
        "AWS_* variables) or file:///shared/path (a filesystem every host mounts)",
    )
    s3_endpoint: str | None = Field(default=None, description="S3 API endpoint (MinIO, Ceph RGW, R2 …); none = AWS")
    direct_url_expires_s: float = Field(
        default=900.0, gt=0, description="how long the presigned URLs of a direct read (features:locate) stay valid"
    )
    catalog_url: str | None = Field(
        default=None, description="postgresql://user:pass@host/db for a shared catalog; none = SQLite under data_dir"
    )
    catalog_connections: int = Field(
        default=8,
        ge=1,
        le=64,
        description="Postgres connections each process keeps at most (N replicas with P processes each hold up to "
        "N * P * this; keep it under the server's max_connections)",
    )
    model_dir: Path | None = Field(default=None, description="HF model directory; none = a replica that serves only")
    read_only: bool | None = Field(
        default=None,
        description="serve the store without writing to it (catalog opened read-only); default: when there is no "
        "model and the data directory is not writable (a read-only volume)",
    )
    device: str = Field(
        default="auto",
        description="'auto' (cuda if present), 'cpu', 'cuda', 'cuda:1', ...; 'cuda:0,cuda:1' spreads a model too "
        "big for one GPU over both",
    )
    attn_implementation: str = "sdpa"
    default_backend: str = Field(default="auto", description="backend used when a request names none")

    host: str = "127.0.0.1"
    port: int = 8000
    metrics_port: int | None = Field(
        default=None, description="a worker's /metrics on this port, at `host` (hsstore worker); none: no such server"
    )
    # bearer token -> scopes (read, write, admin); empty means no auth (a single-user or loopback deployment)
    tokens: dict[str, list[TokenScope]] = Field(default_factory=dict)
    allow_anonymous: bool = Field(
        default=False,
        description="serve without tokens on an address other than loopback (whoever reaches it can read and "
        "write); without it, such a service refuses to start",
    )

    header_timeout_s: float = Field(
        default=10.0,
        gt=0,
        description="a connection must send a whole request head this soon after it opens and after each response, "
        "else it gets a 408 and is closed (slow-header clients; service/api/connections.py)",
    )
    keep_alive_s: int = Field(default=5, ge=1, description="close a kept-alive connection idle this many seconds")
    max_request_bytes: int = Field(default=4 * 1024 * 1024, ge=1024)
    max_batch_keys: int = Field(default=1024, ge=1, description="keys one POST /v1/features:batch may name")
    max_batch_bytes: int = Field(
        default=4 * 1024**3, ge=1024, description="the most one batch response may carry (413 beyond)"
    )
    max_sample_tokens: int | None = Field(
        default=None,
        ge=1,
        description="the most tokens one sample may have; unset: on a GPU the longest its memory holds under the "
        "featureset (the memory plan, /v1/info's run.memory), on a CPU 32,768",
    )
    chunk_tokens: int = Field(default=256, ge=1, description="inner zarr chunk length along tokens")
    codec: StoreCodec = Field(
        default=DEFAULT_CODEC,
        description="blosc codec new blobs are written with (docs/measurements.md's codec table); blobs of every "
        "codec read",
    )

    pack_tokens: int = Field(
        default=16384,
        ge=0,
        description="on CUDA, the token shape of packed forwards (many sequences per forward, each getting the bits "
        "of the model's own forward of it alone; longer sequences alone in a pack of their own length); cut to what "
        "the card holds where it holds less (the memory plan, /v1/info); 0 = off. The CPU never packs",
    )
    fused_elementwise: bool = Field(
        default=True,
        description="on CUDA, run the norms' and activations' elementwise chains as fused Triton kernels once they "
        "are proven bit-equal to eager on this device; false = always eager",
    )
    cuda_graphs: bool | Literal["auto"] = Field(
        default="auto",
        description="on one CUDA device, replay each own-rows pack's decoder layers from CUDA graphs, recorded once "
        "per kind of layer and pack (the kernels and arguments of the eager layers, so their bits): the GPU stays fed "
        "while the writer threads take the host (docs/measurements.md); false = every layer eagerly; auto = replays on "
        "the GPU models where they were measured faster end to end (an H200), eager elsewhere (an H100: "
        "service/extraction/layer_graphs.py's table); /v1/info says which runs and why",
    )
    verify_reads: Verify = Field(
        default="chunks",
        description="chunks: every chunk read is checked against its crc32c; full: whole reads are also re-hashed "
        "against the content hash by the service (the client verifies on receipt either way: its own `verify`)",
    )
    writer_threads: int = Field(
        default=WRITER_THREADS, ge=1, description="threads hashing, compressing and writing results"
    )
    write_codec_threads: int = Field(
        default=WRITE_CODEC_THREADS,
        ge=1,
        description="threads compressing and digesting a new blob's chunks, shared by the writers: more write faster "
        "but leave the extracting thread less of the GIL",
    )
    heap: Literal["auto", "bounded", "glibc"] = Field(
        default="auto",
        description="the process's C heap: bounded (glibc's mmap threshold fixed at 128 KiB, 2 arenas: a process that "
        "extracts and serves stays level; service/host/allocator.py), glibc (its own settings: reads of large "
        "blocks cost no page faults), auto: bounded where a model is configured, glibc on read replicas",
    )

    # Write-time content checks (service/core/write/content_checks.py): what extraction and imports refuse or flag
    content_constant_rows: float = Field(
        default=0.25, ge=0, le=1, description="refuse an entry where more than this share of a layer's rows is constant"
    )
    content_repeated_rows: float = Field(
        default=0.25,
        ge=0,
        le=1,
        description="refuse an entry where more than this share of a layer's rows whose token changed repeat the row "
        "before (one token's states copied to every position)",
    )
    content_grow_flag: float = Field(
        default=30.0, gt=1, description="flag a decoder layer whose std is this many times the one before it"
    )
    content_grow_refuse: float = Field(default=300.0, gt=1, description="and refuse it from this many times")
    content_shrink_flag: float = Field(
        default=4.0, gt=1, description="flag a decoder layer whose std is this many times smaller than the one before"
    )
    content_shrink_refuse: float = Field(default=20.0, gt=1, description="and refuse it from this many times smaller")
    content_band_entries: int = Field(
        default=64,
        ge=0,
        description="how many of a model revision's and featureset's first entries make its band of layer statistics",
    )
    content_band_min_entries: int = Field(default=16, ge=2, description="judge against the band only once it has these")
    content_flag_z: float = Field(
        default=8.0,
        gt=0,
        description="robust z-score of a layer's std or absmax (log) against the band: store and flag",
    )
    content_refuse_z: float = Field(default=40.0, gt=0, description="the same z-score at which the entry is refused")
    import_spot_check_first: int = Field(
        default=4,
        ge=0,
        description="spot-check the first this many imports of every import run and of every new source (model "
        "revision and format) against the model (where it runs here with the weights loaded)",
    )
    import_spot_check_every: int = Field(
        default=16,
        ge=0,
        description="after those, re-extract the first tokens of one import in this many (by prompt hash; 1: every "
        "one, 0: none) and refuse features that disagree; once one fails, the rest of its run is checked one by one",
    )
    import_spot_check_cosine: float = Field(
        default=0.98, gt=0, le=1, description="the per-layer mean cosine an import's spot check must reach"
    )
    canary: bool = Field(
        default=True,
        description="after every model load, re-extract each key space's canary sample and refuse on other bits "
        "(service/core/write/canary.py)",
    )

    # Downtime windows and the GPU hand-over with SGLang
    windows: list[str] = Field(default_factory=list, description='schedule, e.g. ["Mon-Fri 02:00-03:30 UTC"]')
    window_margin_s: float = Field(default=300.0, ge=0, description="stop taking batches this long before a close")
    handover: Literal["none", "memory_saver", "commands"] = "none"
    sglang_url: str | None = Field(default=None, description="SGLang's base URL (hand-over, reference completions)")
    sglang_stop_command: str | None = None
    sglang_start_command: str | None = None
    sglang_canary: bool = Field(
        default=True,
        description="ask SGLang for a fixed greedy completion before each release and after each resume; other "
        "tokens are reported (and, with handover = commands, SGLang restarted)",
    )
    handover_timeout_s: float = Field(default=600.0, gt=0)
    memory_wait_s: float = Field(default=300.0, ge=0, description="how long to wait for the GPU to have room")
    idle_unload_s: float | None = Field(
        default=None, description="with no windows (the GPU always ours): unload after this long unused (None: never)"
    )
    window_keep_gpu_s: float = Field(
        default=0.0,
        ge=0,
        description="in a window, keep the model this long after the last runnable item before giving the GPU back "
        "(0: give it back at once)",
    )
    load_on_start: bool | None = Field(default=None, description="default: only when the GPU is ours (no hand-over)")
    job_batch_size: int = Field(default=8, ge=1)
    run_jobs: bool = Field(
        default=True,
        description="run the warm-job queue in this process (a service with a model); false on API replicas of a "
        "cluster whose `hsstore worker` processes run it",
    )
    lease_s: float = Field(
        default=60.0, gt=0, description="how long a claimed job item stays leased without a heartbeat"
    )
    worker_name: str | None = Field(
        default=None,
        description="this worker's name (a label: leases are held by the process, so two may share it); default "
        "host:device (workers), host:data_dir (a service)",
    )
    max_job_bytes: int = Field(default=256 * 1024 * 1024, ge=1024, description="largest JSONL job upload")
    max_import_bytes: int = Field(
        default=2 * 1024**3, ge=1024, description="largest entry one POST /v1/entries:import may carry"
    )

    @field_validator("tokens")
    @classmethod
    def _digests_are_digests(cls, tokens: dict[str, list[str]]) -> dict[str, list[str]]:
        """A `sha256:` key that is no digest (an example's placeholder) would match no token: refused, not ignored."""
        for key in tokens:
            if key.startswith("sha256:") and not re.fullmatch(r"[0-9a-f]{64}", key.removeprefix("sha256:")):
                raise ValueError(
                    f'token digest {key[:40]!r} is not sha256: + 64 lowercase hex (printf %s "$TOKEN" | sha256sum)'
                )
        return tokens

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (init_settings, env_settings, *config_file_sources(settings_cls))

    @classmethod
    def load(cls, config: Path | None = None, **overrides: Any) -> Settings:
        """Settings from `overrides`, the environment and the TOML file `config` (else the one HSSTORE_CONFIG names)."""
        with config_file(config):
            return cls(**overrides)

    def group(self, kind: type[Group], prefix: str) -> Group:
        """`kind`, a dataclass, of the settings named `prefix` + each of its fields: a group handed whole to what
        reads it (the content checks' `content_*`, say)."""
        return kind(**{field.name: getattr(self, prefix + field.name) for field in dataclasses.fields(kind)})

    @property
    def store_read_only(self) -> bool:
        if self.read_only is not None:
            return self.read_only
        return self.model_dir is None and self.data_dir.is_dir() and not os.access(self.data_dir, os.W_OK)

    @property
    def heap_bounded(self) -> bool:
        """The leak came with extraction; a replica only reads, where the bound's page faults cost per byte."""
        return self.heap == "bounded" or (self.heap == "auto" and self.model_dir is not None)

    @property
    def windows_enforced(self) -> bool:
        """With a schedule or a hand-over the GPU is SGLang's outside windows; otherwise it is always ours."""
        return bool(self.windows) or self.handover != "none"

    @property
    def preload(self) -> bool:
        if not self.run_jobs:  # an API replica never loads weights (its workers own the GPUs)
            return False
        if self.load_on_start is not None:
            return self.load_on_start
        return not self.windows_enforced

    @property
    def exposed_without_auth(self) -> bool:
        """Listening beyond this machine with no tokens, and not told that this is meant."""
        if self.tokens or self.allow_anonymous or self.host == "localhost":
            return False
        try:
            return not ipaddress.ip_address(self.host).is_loopback
        except ValueError:  # a host name: it may resolve anywhere
            return True

    @property
    def catalog_path(self) -> Path:
        return self.data_dir / "catalog.sqlite"
