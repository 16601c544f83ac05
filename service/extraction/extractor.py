"""The extractor: one loaded model, one forward at a time, every result labelled with the kernels that ran.

Batches run on the calling thread, which never waits for the GPU: token ids go up from pinned memory, and each
result's tensors and layer summary come down on a side stream into pinned memory, so the next forward overlaps the
copy (`host_copies.py`), and the caller's writer threads (which wait for it) overlap hashing, compression and writing.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Iterator, Sequence
from typing import Literal

import torch

from compute.forward import ForwardPlan
from schemas.backend import PINNED_ATTENTION, AttentionKernel, Backend, Fingerprint
from schemas.batching import PackPolicy
from schemas.device_run import DeviceRun, LayerMode
from schemas.featureset import FeatureSet
from schemas.manifest import HIDDEN_STATES
from service.extraction.alone import TokenSequence, forward_alone, heads
from service.extraction.bit_checks import BitChecks
from service.extraction.fingerprints import degraded_modes, device_name
from service.extraction.host_copies import HostCopies
from service.extraction.layer_graphs import LayerGraphs, LayerRecorder
from service.extraction.memory_plan import MemoryPlans
from service.extraction.own_rows import PackRows, own_rows
from service.extraction.packing import Pack, Segment, pack_inputs, per_sequence, plan_packs
from service.extraction.results import Extraction, Labels, PendingExtraction
from service.extraction.run_plan import RunPlan
from service.extraction.stats import layer_summary
from service.model.encode import EncodedPrompt
from service.model.fused import FusedForwards
from service.model.loader import LoadedModel

log = logging.getLogger("hsstore.extraction")
# Device kinds where packs run (service/extraction/packing.py). Not the CPU, a development device: what stays packed is
# row-wise, and torch's vectorised CPU kernels round an element by where its thread's chunk ends (SIMD body or scalar
# tail), so there a row's bits can follow its offset. CUDA's pointwise kernels run one function per element.
PACKING_DEVICES = frozenset({"cuda"})
_SUMMARY = "layer summary"


class Extractor:
    # the attention kernel new extractions pin (an audit runs the one its entry's fingerprint names)
    attention_kernel: AttentionKernel | None = PINNED_ATTENTION

    def __init__(
        self,
        loaded: LoadedModel,
        fuse: bool = True,
        pack_tokens: int = 0,
        recorder: LayerRecorder | None = None,
        layer_mode_reason: str = "the caller's recorder",
    ) -> None:
        """`recorder`: what records an own-rows pack's decoder layers for replay (CUDA graphs; None: every layer
        runs eagerly), chosen for `layer_mode_reason`."""
        self.loaded = loaded
        self.pack_tokens = pack_tokens
        self.recorder = recorder
        self.layer_mode_reason = layer_mode_reason
        self.graphs: LayerGraphs | None = None  # made at the first pack: its templates hold a layer of each kind
        self._lock = threading.Lock()  # one model, one forward at a time: kernels are bound process-wide
        self.copies = HostCopies(loaded.device)
        self.checks = BitChecks(loaded, fuse)  # which faster ways of running keep the bits, here
        self.memory = MemoryPlans(loaded, pack_tokens, self._calibration_pack, replayed=recorder is not None)

    @property
    def pack_policy(self) -> PackPolicy | None:
        """The packed policy new extractions run under here, if any."""
        if self.pack_tokens <= 0 or self.loaded.device.type not in PACKING_DEVICES:
            return None
        return PackPolicy(self.pack_tokens)

    def _replays(self, pack: PackPolicy | None) -> bool:
        """Whether `pack`'s forwards are to replay recorded layers: the same kernels on the same arguments as eager,
        so the same bits (layer_graphs.py). Each pack's entries are then named by what did run (`RunPlan.ran`)."""
        failed = self.graphs is not None and self.graphs.failure is not None
        return pack is not None and pack.own_rows and self.recorder is not None and not failed

    def device_run(self, featureset: FeatureSet, backend: Backend = Backend.FLA) -> DeviceRun:
        """How this device runs this model now (`/v1/info`): layer mode, what could not run, `backend`'s memory plan."""
        failure = self.graphs.failure if self.graphs is not None else None
        mode = LayerMode.REPLAYED if self.recorder is not None and failure is None else LayerMode.EAGER
        return DeviceRun(
            device=device_name(self.loaded),  # read at every scrape: not a whole fingerprint
            layer_mode=mode,
            layer_mode_reason=self.layer_mode_reason,
            degraded=degraded_modes(failure, self.checks.refusals()),
            memory=plan.info(featureset) if (plan := self.memory.known(backend)) is not None else None,
        )

    def _layer_graphs(self) -> LayerGraphs | None:
        if self.recorder is not None and self.graphs is None:
            self.graphs = LayerGraphs(self.loaded.body.layers, self.recorder)
        return self.graphs if self.recorder is not None else None

    def extract(
        self,
        encoded: EncodedPrompt,
        featureset: FeatureSet,
        backend: Backend,
        label: str,
        policy: str | None = None,
        attention: AttentionKernel | Literal["default"] | None = "default",
    ) -> Extraction:
        """One sequence alone, under the policy and attention kernel a fingerprint names (`batching`,
        `attention_kernel`; what an audit reproduces): alone in a pack for a packed one, else one sequence per forward
        (what an earlier release's right-padded batches were probed against)."""
        pack = PackPolicy.parse(policy) if policy is not None else self.pack_policy
        ((_, pending),) = self.extract_many([(encoded, label)], featureset, backend, pack=pack, attention=attention)
        return pending.wait()

    def extract_many(
        self,
        items: Sequence[tuple[EncodedPrompt, str]],
        featureset: FeatureSet,
        backend: Backend,
        pack: PackPolicy | Literal["default"] | None = "default",
        attention: AttentionKernel | Literal["default"] | None = "default",
    ) -> Iterator[tuple[int, PendingExtraction]]:
        """Yield (index into `items`, pending extraction) as packs or forwards finish, longest sequences first;
        full attention on `attention`'s kernel (None: torch's choice, as entries before the pin), packed by `pack` as
        this card holds it (None: one sequence per forward); "default": the extractor's."""
        loaded = self.loaded
        plan = ForwardPlan.of(featureset, len(loaded.body.layers))
        with self._lock, self._on_device(), torch.inference_mode(), loaded.kernels.running(backend) as kernels:
            sequences = [self._complete(encoded) for encoded, _ in items]
            kernels.verify()
            lengths = [len(s.ids) for s in sequences]
            run = self._plan(backend, featureset, lengths, pack, attention)
            if run.pack is not None:
                for forward, planned in enumerate(plan_packs(lengths, run.pack)):
                    hidden, normed, ids, replayed = self._forward_pack(planned, sequences, plan, run)
                    kernels.verify()
                    fingerprint = run.ran(replayed)  # what ran, not what was asked
                    staged = self.copies.of_pack(hidden, planned, plan)
                    for segment in planned.segments:
                        seq = sequences[segment.index]
                        rows = slice(segment.start, segment.start + segment.length)
                        taken = heads(loaded, plan, normed[0, rows] if normed is not None else None)
                        finished = self._finish(
                            seq,
                            hidden[0, rows],
                            ids[0, rows],
                            taken,
                            plan,
                            fingerprint,
                            items[segment.index][1],
                            forward,
                            staged[0, rows] if staged is not None else None,
                        )
                        yield segment.index, finished
                return
            longest_first = sorted(range(len(sequences)), key=lambda i: (-len(sequences[i].ids), i))
            for forward, index in enumerate(longest_first):
                seq = sequences[index]
                hidden, taken, ids = forward_alone(loaded, seq, plan, run.fused, run.attention, self.copies.pinned)
                kernels.verify()  # nothing leaves this function labelled with kernels that did not run
                yield index, self._finish(seq, hidden, ids, taken, plan, run.fingerprint, items[index][1], forward)

    def plan(
        self,
        backend: Backend,
        pack: PackPolicy | Literal["default"] | None = "default",
        attention: AttentionKernel | Literal["default"] | None = "default",
    ) -> RunPlan:
        """How a call under `backend` runs here (packs of the default featureset), its one-time work done now: the
        fused forwards' proof and, on CUDA, the memory plan's calibration."""
        with self._lock, self._on_device(), torch.inference_mode(), self.loaded.kernels.running(backend):
            return self._plan(backend, FeatureSet.default_for(self.loaded.num_layers), [], pack, attention)

    def _plan(
        self,
        backend: Backend,
        featureset: FeatureSet,
        lengths: Sequence[int],
        pack: PackPolicy | Literal["default"] | None,
        attention: AttentionKernel | Literal["default"] | None,
    ) -> RunPlan:
        """The plan of a call of sequences of `lengths` under `featureset`, under the caller's lock and `backend`'s
        kernels: its pack as this card holds it (TooLarge where a sequence is longer than the card holds)."""
        fused = self.checks.fusion(backend)
        memory = self.memory.plan(backend, fused)
        pack = self.pack_policy if pack == "default" else pack
        pack = memory.holding(pack, featureset, lengths) if memory is not None else pack
        attention = self.attention_kernel if attention == "default" else attention
        return RunPlan.of(self.loaded, backend, fused, pack, attention, self._replays(pack), memory)

    def _on_device(self) -> contextlib.AbstractContextManager:
        """The model's (first) GPU as this thread's current device: Triton kernels (fla's, ours) launch on the
        current device, which is per thread and cuda:0 unless set (a worker on cuda:1 runs in threads of its own)."""
        device = self.loaded.device
        return torch.cuda.device(device) if device.type == "cuda" else contextlib.nullcontext()

    def _complete(self, encoded: EncodedPrompt) -> TokenSequence:
        completion = encoded.completion_ids or []
        if encoded.greedy_max_new_tokens is not None:
            prompt = torch.tensor([encoded.prompt_ids], dtype=torch.long, device=self.loaded.device)
            generated = self.loaded.model.generate(
                prompt,
                attention_mask=torch.ones_like(prompt),
                max_new_tokens=encoded.greedy_max_new_tokens,
                do_sample=False,
            )
            completion = generated[0, prompt.shape[1] :].tolist()
        return TokenSequence(encoded.prompt_ids + completion, len(encoded.prompt_ids), encoded.completion_source)

    def _forward_pack(
        self, pack: Pack, sequences: list[TokenSequence], plan: ForwardPlan, run: RunPlan
    ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor, bool]:
        """[1, shape, n_layers, H] hidden states of one pack, the final norm's output when logits are needed, the
        pack's token ids [1, shape] on the device, and whether layers were replayed."""
        policy = run.pack
        assert policy is not None, "a pack runs under a pack policy"
        inputs = pack_inputs(pack, [s.ids for s in sequences], self.loaded.device, self.copies.pinned)
        ids = inputs.pop("input_ids")
        rows = PackRows([(s.start, s.start + s.length) for s in pack.segments], pack.shape) if policy.own_rows else None
        graphs = self._layer_graphs() if run.replays else None
        templates = graphs.templates if graphs is not None else []  # run as the layers they stand in for
        fused = run.fused
        with (
            fused.applied(rows, templates) if fused is not None else contextlib.nullcontext(),
            own_rows([self.loaded.body, *templates], rows, fused) if rows is not None else contextlib.nullcontext(),
            per_sequence(self.loaded.kernels.module, pack, policy, run.fast),
            graphs.routed(plan.layers_run - 1) if graphs is not None else contextlib.nullcontext(),
        ):
            hidden, normed = plan.capture(self.loaded.body, ids, run.attention, **inputs)
        return hidden, normed, ids, graphs is not None and graphs.replays > 0

    def _calibration_pack(self, rows: int, backend: Backend, fused: FusedForwards | None) -> None:
        """One own-rows pack of `rows` random tokens through every decoder layer, its layers eager: recordings stay
        the real packs' (their pools are counted apart). The memory plan's calibration, under the caller's lock."""
        ids = torch.randint(0, int(self.loaded.config.vocab_size), (rows,), generator=torch.Generator().manual_seed(0))
        plan = ForwardPlan.of(FeatureSet(layers=[self.loaded.num_layers - 1]), self.loaded.num_layers)
        run = RunPlan.of(self.loaded, backend, fused, PackPolicy(rows), PINNED_ATTENTION, False, None)
        self._forward_pack(Pack(rows, (Segment(0, 0, rows),)), [TokenSequence(ids.tolist(), rows, None)], plan, run)

    def _finish(
        self,
        seq: TokenSequence,
        hidden: torch.Tensor,
        ids: torch.Tensor,
        taken: dict[str, torch.Tensor],
        plan: ForwardPlan,
        fingerprint: Fingerprint,
        label: str,
        forward: int,
        staged: torch.Tensor | None = None,
    ) -> PendingExtraction:
        """`staged`: the hidden states already on their way to host memory with the pack (`HostCopies.of_pack`); the
        copy stream runs in order, so this entry's event, recorded after its own copies, also marks that copy done."""
        length = len(seq.ids)
        device_tensors: dict[str, torch.Tensor] = {**taken, _SUMMARY: layer_summary(hidden, ids)}  # what ran
        if staged is None:
            device_tensors.update(plan.stored(hidden))
        host, done = self.copies.of(device_tensors)
        summary = host.pop(_SUMMARY)
        if staged is not None:
            host[HIDDEN_STATES] = staged
        host["input_ids"] = torch.tensor(seq.ids, dtype=torch.int32)
        if seq.completion_source is not None:
            mask = torch.zeros(length, dtype=torch.uint8)
            mask[seq.prompt_tokens :] = 1
            host["loss_mask"] = mask
        labels = Labels(
            list(plan.layers),
            label,
            fingerprint,
            seq.prompt_tokens,
            length - seq.prompt_tokens,
            seq.completion_source,
        )
        return PendingExtraction(host, summary, done, labels, forward)
