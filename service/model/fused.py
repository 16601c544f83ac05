"""Fused elementwise forwards for the qwen3_5 decoder, used only where they are proven to give the eager bits.

The eager RMSNorms, the MLP's silu-times-up and the linear-attention gated norm make up to ten passes over float32
copies of their input; about a quarter of the GPU time of a forward (GPU.md). Each fused forward here does the same
arithmetic in two Triton passes around torch's own mean (fused_kernels.py says how the bits are kept).

Proof before use, per device: `FusedForwards.for_model` runs every kernel over all 65,536 bfloat16 values against the
eager torch ops (and the norms' `rsqrt(variance + eps)` over every non-negative float32), and the extractor runs
probe sequences through every layer fused and eager and compares all bits before it fuses anything
(`BitChecks.fusion`, service/extraction/bit_checks.py). Where Triton or CUDA is missing, or any bit differs, the
eager modules run, and the fingerprint's `elementwise` field names what ran either way.
"""

from __future__ import annotations

import contextlib
import logging
import sys
import types
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, Protocol

import torch

from service.model.strides import row_stride

log = logging.getLogger("hsstore.fused")

EAGER = "eager"
FUSED = "hsstore-fused-elementwise-v2 (bit-equal to eager, probed on this device)"
_MAX_ELEMENTS = 2**31 - 1


class Rows(Protocol):
    """A pack's sequences, for an op whose bits can depend on its row count (service/extraction/own_rows.py)."""

    def mean(self, x: torch.Tensor) -> torch.Tensor:
        """`x.mean(-1, keepdim=True)` of each sequence's rows, computed at those rows alone."""
        ...

    def each(self, op: Callable[..., torch.Tensor], *packed: torch.Tensor) -> torch.Tensor:
        """`op` once per sequence on its rows of every input."""
        ...


class Whole:
    """Outside a pack: every op over all its rows, as the model's forward runs it."""

    def mean(self, x: torch.Tensor) -> torch.Tensor:
        return x.mean(-1, keepdim=True)

    def each(self, op: Callable[..., torch.Tensor], *packed: torch.Tensor) -> torch.Tensor:
        return op(*packed)


def _kernels() -> Any | None:
    try:
        from service.model import fused_kernels
    except ImportError:  # no Triton on this host (CPU-only torch)
        return None
    return fused_kernels


def _bfloat16_in_range(t: torch.Tensor) -> bool:
    return t.dtype == torch.bfloat16 and 0 < t.numel() <= _MAX_ELEMENTS


def _fusable(*tensors: torch.Tensor) -> bool:
    return all(_bfloat16_in_range(t) and t.is_contiguous() for t in tensors)


def _weight_version(weight: torch.Tensor) -> tuple[int, int] | None:
    try:
        return weight.data_ptr(), weight._version
    except RuntimeError:  # an inference tensor has no version counter: never cached
        return None


# Each RMSNorm's `1 + w` in float32 with the weight version it was made from, by module id (FusedForwards owns it);
# None for modules whose weights are copied in before each use (service/extraction/layer_graphs.py's templates)
ScaleCache = dict[int, tuple[tuple[int, int] | None, torch.Tensor]]
Scales = ScaleCache | None


def _rms_norm(kernels: Any, rows: Rows, scales: Scales) -> Callable[[Any, torch.Tensor], torch.Tensor]:

    def forward(module: Any, x: torch.Tensor) -> torch.Tensor:
        if not _bfloat16_in_range(x) or row_stride(x) is None or module.weight.dtype != torch.bfloat16:
            return rows.each(lambda part: type(module).forward(module, part), x)
        # The eager module, step for step: x.float().pow(2).mean(-1) + eps, rsqrt; then (x * r) * (1 + w).
        # `1 + w` is the same torch op on the same weight at every call: computed once, it saves two launches.
        version = _weight_version(module.weight)
        found = scales.get(id(module)) if scales is not None else None
        if version is None or found is None or found[0] != version:
            found = (version, 1.0 + module.weight.float())
            if scales is not None:
                scales[id(module)] = found
        # The square and the tail are pointwise; the mean, a reduction, runs at each sequence's own rows in a pack
        return kernels.rms_tail(x, rows.mean(kernels.square(x)), module.eps, found[1])

    return forward


def _gated_norm(kernels: Any, rows: Rows, _: Scales) -> Callable[[Any, torch.Tensor, torch.Tensor], torch.Tensor]:
    def forward(module: Any, x: torch.Tensor, gate: torch.Tensor) -> torch.Tensor:
        if not _fusable(x, gate, module.weight) or module.activation != "silu" or gate.shape != x.shape:
            return rows.each(lambda *parts: type(module).forward(module, *parts), x, gate)
        variance = rows.mean(kernels.square(x))
        return kernels.gated_tail(x, variance, module.variance_epsilon, module.weight, gate)

    return forward


def _mlp(kernels: Any, _rows: Rows, _: Scales) -> Callable[[Any, torch.Tensor], torch.Tensor]:
    # nothing here reduces: its linear layers run at a pack's rows themselves (own_rows.py), the rest is pointwise
    def forward(module: Any, x: torch.Tensor) -> torch.Tensor:
        gate, up = module.gate_proj(x), module.up_proj(x)
        if not _fusable(gate, up) or module.config.hidden_act != "silu":
            return module.down_proj(module.act_fn(gate) * up)
        return module.down_proj(kernels.silu_mul(gate, up))

    return forward


class FusedForwards:
    """The fused forwards of one model's modules, switched on for the length of a `with applied():` block."""

    def __init__(self, model: Any, kernels: Any) -> None:
        modeling = sys.modules[type(model).__module__]
        self._factories: dict[type, Callable[[Any, Rows, Scales], Callable[..., torch.Tensor]]] = {}
        for class_name, factory in (("RMSNorm", _rms_norm), ("RMSNormGated", _gated_norm), ("MLP", _mlp)):
            cls = next((c for n, c in vars(modeling).items() if n.endswith(class_name) and "Vision" not in n), None)
            if isinstance(cls, type):
                self._factories[cls] = factory
        self._kernels = kernels
        self._scales: ScaleCache = {}
        self._modules = [module for module in model.modules() if type(module) in self._factories]

    @classmethod
    def for_model(cls, model: Any, device: torch.device) -> FusedForwards | None:
        """The fused forwards where they can run and every kernel gives the eager bits on all bfloat16 inputs."""
        kernels = _kernels() if device.type == "cuda" else None
        if kernels is None:
            return None
        fused = cls(model, kernels)
        mismatched = kernel_mismatches(kernels, device, fused.epsilons())
        if mismatched:
            log.warning("fused elementwise kernels differ from eager on %s: %s; running eager", device, mismatched)
            return None
        return fused

    def epsilons(self) -> set[float]:
        """The norms' epsilons, each of which the device check covers."""
        found = (getattr(module, "eps", getattr(module, "variance_epsilon", None)) for module in self._modules)
        return {float(eps) for eps in found if eps is not None}

    def replaces(self, module: Any) -> bool:
        """Whether `applied` gives `module` a fused forward (which then runs at a pack's rows itself)."""
        return type(module) in self._factories

    @contextlib.contextmanager
    def applied(self, rows: Rows | None = None, copied_into: Sequence[Any] = ()) -> Iterator[None]:
        """The fused forwards while the block runs; `rows`: a pack's sequences, at whose own rows every reduction
        (and every eager fallback) runs; `copied_into`: modules outside the model (templates) whose weights are
        copied in before each use, so nothing made from their weights is kept between calls."""
        rows = rows or Whole()
        kept = {id(cls): factory(self._kernels, rows, self._scales) for cls, factory in self._factories.items()}
        fresh = {id(cls): factory(self._kernels, rows, None) for cls, factory in self._factories.items()}
        others = [m for root in copied_into for m in root.modules() if type(m) in self._factories]
        patched = [*((m, kept) for m in self._modules), *((m, fresh) for m in others)]
        try:
            for module, forwards in patched:
                module.forward = types.MethodType(forwards[id(type(module))], module)
            yield
        finally:
            for module, _ in patched:
                module.__dict__.pop("forward", None)


def every_bfloat16(device: torch.device) -> torch.Tensor:
    """All 65,536 bfloat16 bit patterns (NaNs included)."""
    return torch.arange(-(2**15), 2**15, dtype=torch.int32, device=device).to(torch.int16).view(torch.bfloat16)


def every_nonnegative_float32(device: torch.device, chunk: int = 2**27) -> Iterator[torch.Tensor]:
    """All float32 values from +0 to +inf, `chunk` at a time."""
    end = 0x7F800000 + 1
    for start in range(0, end, chunk):
        yield torch.arange(start, min(start + chunk, end), dtype=torch.int32, device=device).view(torch.float32)


def kernel_mismatches(kernels: Any, device: torch.device, epsilons: Iterable[float] = (1e-6,)) -> list[str]:
    """Names of the kernels whose output bits differ from the eager torch ops', over every bfloat16 input paired
    with random partners, and the norms' `rsqrt(variance + eps)` over every non-negative float32 variance for each
    eps. Empty when all agree."""
    from transformers.activations import ACT2FN

    silu = ACT2FN["silu"]
    values = every_bfloat16(device)
    generator = torch.Generator(device=device).manual_seed(0)
    partner = (torch.randn(values.shape, generator=generator, device=device) * 4).to(torch.bfloat16)
    rows = values.view(-1, 128)
    scale = 1.0 + (torch.randn(128, generator=generator, device=device) * 0.1).to(torch.bfloat16).float()
    weight = (1 + torch.randn(128, generator=generator, device=device) * 0.1).to(torch.bfloat16)
    variance = torch.rand((rows.shape[0], 1), generator=generator, device=device) * 4
    eps = 1e-6
    inv_rms = torch.rsqrt(variance + eps)
    gate = partner.view(-1, 128)
    strided = torch.cat([rows, gate], dim=1)[:, :128]  # the rows again, 256 apart, as the query norm sees them
    eager = {
        "square": rows.float().pow(2),
        "rms_tail": ((rows.float() * inv_rms) * scale).to(torch.bfloat16),
        "square(strided)": strided.float().pow(2),
        "rms_tail(strided)": ((strided.float() * inv_rms) * scale).to(torch.bfloat16),
        "silu_mul": silu(values) * partner,
        "silu_mul(gate=partner)": silu(partner) * values,
        "gated_tail": (weight * (rows.float() * inv_rms).to(torch.bfloat16) * silu(gate.float())).to(torch.bfloat16),
        "gated_tail(gate=all)": (weight * (gate.float() * inv_rms).to(torch.bfloat16) * silu(rows.float())).to(
            torch.bfloat16
        ),
    }
    fused = {
        "square": kernels.square(rows),
        "rms_tail": kernels.rms_tail(rows, variance, eps, scale),
        "square(strided)": kernels.square(strided),
        "rms_tail(strided)": kernels.rms_tail(strided, variance, eps, scale),
        "silu_mul": kernels.silu_mul(values, partner),
        "silu_mul(gate=partner)": kernels.silu_mul(partner, values),
        "gated_tail": kernels.gated_tail(rows, variance, eps, weight, gate),
        "gated_tail(gate=all)": kernels.gated_tail(gate, variance, eps, weight, rows),
    }
    mismatched = [name for name in eager if not _same_bits(eager[name], fused[name])]
    for norm_eps in sorted(set(epsilons)):
        if not all(
            _same_bits(torch.rsqrt(v + norm_eps), kernels.inv_rms(v, norm_eps))
            for v in every_nonnegative_float32(device)
        ):
            mismatched.append(f"inv_rms(eps={norm_eps:g})")
    return mismatched


def _same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Bitwise equality, where a NaN matches any NaN: features holding NaN are refused before they are stored, so
    payloads never reach a content hash."""
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    as_int = {torch.bfloat16: torch.int16, torch.float32: torch.int32}[a.dtype]
    return bool(((a.view(as_int) == b.view(as_int)) | (a.isnan() & b.isnan())).all())
