"""The extractor: one loaded model, one forward at a time, every result labelled with the kernels that ran."""

from __future__ import annotations

import threading
from dataclasses import dataclass

import torch
import transformers

from schemas.backend import Backend, Fingerprint
from schemas.featureset import FINAL_NORM, FeatureSet
from schemas.manifest import LayerStats
from schemas.samples import ParsedSample
from schemas.tensors import RawTensor
from schemas.torch_tensors import from_torch
from service.extraction.encode import EncodedPrompt, encode
from service.extraction.lean_forward import capture, chunked_argmax
from service.extraction.stats import layer_stats
from service.model.kernels import version_of
from service.model.loader import LoadedModel


@dataclass(frozen=True, slots=True)
class Extraction:
    tensors: list[RawTensor]
    layer_stats: list[LayerStats]
    fingerprint: Fingerprint
    prompt_tokens: int
    completion_tokens: int
    completion_source: str | None


class Extractor:
    def __init__(self, loaded: LoadedModel, max_sample_tokens: int, target_ids_chunk: int = 1024) -> None:
        self.loaded = loaded
        self.max_sample_tokens = max_sample_tokens
        self.target_ids_chunk = target_ids_chunk
        self._lock = threading.Lock()  # one model, one forward at a time: kernels are bound process-wide

    @property
    def num_layers(self) -> int:
        return self.loaded.num_layers

    @property
    def revision(self) -> str:
        return self.loaded.revision

    def available_backends(self) -> list[str]:
        return self.loaded.kernels.available(self.loaded.device.type)

    def resolve_backend(self, requested: str) -> Backend:
        return self.loaded.kernels.resolve(requested, self.loaded.device.type)

    def encode(self, parsed: ParsedSample, index: int | None = None) -> EncodedPrompt:
        """Tokenise without running the model, so bad input is refused before any work."""
        return encode(parsed, self.loaded.tokenizer, int(self.loaded.config.vocab_size), self.max_sample_tokens, index)

    def fingerprint(self, backend: Backend) -> Fingerprint:
        device = self.loaded.device
        device_name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
        return Fingerprint(
            torch=torch.__version__,
            transformers=transformers.__version__,
            fla=version_of("flash-linear-attention"),
            causal_conv1d=version_of("causal-conv1d"),
            device=device_name,
            dtype=str(self.loaded.model.dtype).removeprefix("torch."),
            attn_implementation=str(self.loaded.config._attn_implementation),
            kernels=self.loaded.kernels.plan(backend),
        )

    def extract(self, encoded: EncodedPrompt, featureset: FeatureSet, backend: Backend, label: str) -> Extraction:
        loaded = self.loaded
        device = loaded.device
        with self._lock, torch.inference_mode(), loaded.kernels.running(backend):
            prompt = torch.tensor([encoded.prompt_ids], dtype=torch.long, device=device)
            if encoded.greedy_max_new_tokens is not None:
                generated = loaded.model.generate(
                    prompt,
                    attention_mask=torch.ones_like(prompt),
                    max_new_tokens=encoded.greedy_max_new_tokens,
                    do_sample=False,
                )
                completion = generated[0, prompt.shape[1] :].tolist()
            else:
                completion = encoded.completion_ids or []
            ids = torch.tensor([encoded.prompt_ids + completion], dtype=torch.long, device=device)
            captured = capture(loaded.body, ids, featureset, self.num_layers)
            hidden = torch.stack([captured[layer] for layer in featureset.layers], dim=1)
            stats = layer_stats(hidden, list(featureset.layers), label)
            tensors = [
                from_torch("hidden_states", hidden),
                from_torch("input_ids", ids[0].to(torch.int32)),
            ]
            if featureset.target_ids:
                lm_head = loaded.model.get_output_embeddings()
                target = chunked_argmax(lm_head, captured[FINAL_NORM], self.target_ids_chunk)
                tensors.append(from_torch("target_ids", target))
            if encoded.completion_source is not None:
                mask = torch.zeros(ids.shape[1], dtype=torch.uint8)
                mask[len(encoded.prompt_ids) :] = 1
                tensors.append(from_torch("loss_mask", mask))
        return Extraction(
            tensors=tensors,
            layer_stats=stats,
            fingerprint=self.fingerprint(backend),
            prompt_tokens=len(encoded.prompt_ids),
            completion_tokens=len(completion),
            completion_source=encoded.completion_source,
        )
