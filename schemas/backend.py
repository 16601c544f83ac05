"""Kernel backends an entry can be extracted with, and the fingerprint of everything that can change the bits."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Annotated

from pydantic import BaseModel, ConfigDict, WithJsonSchema

from schemas.batching import ONE_PER_FORWARD, own_forward


class Backend(StrEnum):
    """The kernels that actually ran for the Gated-DeltaNet layers (BACKENDS says which)."""

    FLA = "fla"
    FLA_NOCONV = "fla-noconv"
    TORCH = "torch"


# The two kernel roles of a Gated-DeltaNet layer, and the package whose kernel is the fast one for each
CONV, RULE = "conv", "rule"
FAST_PACKAGE = {RULE: "flash-linear-attention", CONV: "causal-conv1d"}  # in the order errors name them
FAST_ROOT = {CONV: "causal_conv1d", RULE: "fla"}  # the fast kernels' top-level module


@dataclass(frozen=True, slots=True)
class BackendSpec:
    """One backend: the roles it runs with their fast kernel (the others are forced to the torch reference), which
    needs a CUDA device, and what it is in a help text."""

    backend: Backend
    fast: frozenset[str]
    help: str


# Fastest first: `auto` takes the first a host can run. A new backend is one row here.
BACKENDS: tuple[BackendSpec, ...] = (
    BackendSpec(Backend.FLA, frozenset({RULE, CONV}), "fla's gated delta rule + causal-conv1d"),
    BackendSpec(Backend.FLA_NOCONV, frozenset({RULE}), "fla's rule + torch's conv (the seeds' trainer)"),
    BackendSpec(Backend.TORCH, frozenset(), "torch reference code only (any device)"),
)
SPECS = {spec.backend: spec for spec in BACKENDS}


def backend_for_fast(fast: set[str]) -> Backend | None:
    """The backend whose fast kernels are exactly `fast` (None: no backend runs that mix)."""
    return next((spec.backend for spec in BACKENDS if spec.fast == fast), None)


class AttentionKernel(StrEnum):
    """Which of torch's scaled-dot-product attention kernels ran full attention, pinned for every shape: part of the
    computation (two kernels round differently). Left to torch, the 27B's attention on an H200 is cuDNN's, which
    builds a plan per new sequence length (72 ms each, `benchmarks/results/sdpa-lengths-h200.json`)."""

    FLASH = "flash"


# What new extractions pin (`compute/forward.py` applies it)
PINNED_ATTENTION = AttentionKernel.FLASH

# Imported features (`hsstore import`): nothing says which kernels computed them, so they are stored under this
# backend unless the importer states one. It names entries, never an extraction: no host can run it.
UNKNOWN_BACKEND = "unknown"
STORED_BACKENDS = (*(b.value for b in Backend), UNKNOWN_BACKEND)
AUTO = "auto"
BACKEND_CHOICES = (AUTO, *(b.value for b in Backend))


# What a request may name, as the API's schema says it: a backend to run (or auto), a backend entries are stored under
BackendChoice = Annotated[str, WithJsonSchema({"type": "string", "enum": list(BACKEND_CHOICES)})]
StoredBackend = Annotated[str, WithJsonSchema({"type": "string", "enum": list(STORED_BACKENDS)})]


def measured_first(backends: set[str]) -> set[str]:
    """What a read or an export that names no backend chooses from among one prompt's backends: the ones whose
    kernels were measured here, over imported `unknown`, wherever both exist."""
    return backends - {UNKNOWN_BACKEND} or backends


def check_backend(value: str | None) -> str | None:
    """The value, or ValueError naming the backends entries can be stored under."""
    if value is not None and value not in STORED_BACKENDS:
        raise ValueError(f"unknown backend {value[:40]!r}; one of {list(STORED_BACKENDS)}")
    return value


def backends_described() -> str:
    """Each backend with what it runs, from the table: what the API's documentation says of them."""
    return "; ".join(f"{spec.backend.value}: {spec.help}" for spec in BACKENDS)


def backends_help(with_auto: bool = False) -> str:
    """`auto, fla, fla-noconv or torch`: the choices as a help text says them, from the table."""
    names = [*([AUTO] if with_auto else []), *(spec.backend.value for spec in BACKENDS)]
    return ", ".join(names[:-1]) + " or " + names[-1]


SINGLE_DEVICE = "single device"  # a fingerprint's device_map for a model not spread over devices


class Fingerprint(BaseModel):
    """What ran, recorded with every manifest: a re-extraction whose fingerprint differs may differ in bits."""

    model_config = ConfigDict(extra="allow", frozen=True)

    torch: str
    transformers: str
    fla: str | None = None
    causal_conv1d: str | None = None
    device: str
    dtype: str
    attn_implementation: str
    # under `sdpa`, the kernel pinned for full attention; None: torch chose per shape (every entry before the pin;
    # cuDNN at the 27B's shape on an H200), and an audit leaves it to torch again
    attention_kernel: AttentionKernel | None = None
    kernels: dict[str, str]
    compiled: bool = False
    cuda_graphs: bool = False
    elementwise: str = "eager"  # or the fused forwards that replaced the eager elementwise chains
    batching: str = ONE_PER_FORWARD
    device_map: str = SINGLE_DEVICE
    # A block-quantized FP8 target: its scheme, and how many linear layers ran each FP8 GEMM
    # (service/model/fp8_weights.py)
    quantization: str | None = None
    fp8_gemm: dict[str, int] | None = None
    # Imported features: the file they came from; the fields above then say "unknown" (nothing ran here), and
    # `backend_stated` is set when the importer named the backend rather than leaving it `unknown`.
    imported_from: str | None = None
    backend_stated: bool = False
    import_run: str | None = (
        None  # the import run that stored it (`ImportRequest.run`): a failed check marks its entries
    )

    def own_forward(self) -> bool:
        """Whether the bits are the model's own forward of the sequence alone, the computation a key names (not so
        for an earlier release's packs, nor for an import: nothing says what computed it)."""
        return own_forward(self.batching)

    @classmethod
    def of_import(cls, source: str, backend_stated: bool, run: str | None = None) -> Fingerprint:
        unknown = "unknown"
        return cls(
            torch=unknown,
            transformers=unknown,
            device=unknown,
            dtype="bfloat16",
            attn_implementation=unknown,
            kernels={},
            elementwise=unknown,
            batching=unknown,
            device_map=unknown,
            imported_from=source,
            backend_stated=backend_stated,
            import_run=run,
        )
