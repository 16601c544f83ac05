"""The importer: features computed elsewhere (a SpecForge or speculators dump, an hsstore export) stored as a
version, once checked: the sample parses, the tensors have hsstore's layout and agree with each other, with the
sample's token ids and, where this service runs that model revision, with the model (shapes, tokenisation, and the
spot check of import_checks.py); nothing non-finite, nothing the content checks refuse; and the tensors hash to the
content hash the importer computed from its files. What ran is unknown, so the backend is
`unknown` unless the importer states one (recorded as stated, with a warning); a stated backend never puts other
bits over versions extracted here."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from compute.tensors import to_torch
from schemas.api import ImportRequest, ImportResult
from schemas.backend import UNKNOWN_BACKEND, Fingerprint
from schemas.content_hash import content_hash
from schemas.featureset import FeatureSet
from schemas.keys import EntryKey
from schemas.manifest import HIDDEN_STATES
from schemas.samples import InvalidSampleError, ParsedSample, parse_sample
from schemas.states import ImportStatus
from schemas.tensors import RawTensor
from service.catalog.protocol import VersionCatalog
from service.core.trust.import_checks import ImportChecks
from service.core.write.content_checks import ContentChecks
from service.core.write.recorder import Recorder, new_manifest
from service.errors import InvalidRequest, InvalidSample
from service.extraction.extractor import Extractor
from service.extraction.stats import layer_stats, layer_summary, row_counts
from service.model.manager import ModelManager

_LAYOUT = {HIDDEN_STATES: "bfloat16", "input_ids": "int32", "loss_mask": "uint8"}
_REQUIRED = (HIDDEN_STATES, "input_ids")


class FeatureImporter:
    def __init__(
        self,
        recorder: Recorder,
        versions: VersionCatalog,
        models: ModelManager[Extractor] | None,
        checks: ContentChecks,
        spot_checks: ImportChecks,
        max_tokens: int,
    ) -> None:
        self.recorder = recorder
        self.checks = checks
        self.spot_checks = spot_checks
        self.versions = versions
        self.models = models  # None on a replica without a model: nothing is checked against one
        self.max_tokens = max_tokens

    def import_entry(self, request: ImportRequest, tensors: Mapping[str, RawTensor]) -> ImportResult:
        try:
            parsed = parse_sample(request.sample)
        except InvalidSampleError as exc:
            raise InvalidSample(str(exc)) from None
        try:
            featureset = FeatureSet(layers=request.layers)
        except ValueError as exc:  # pydantic's ValidationError included
            raise InvalidRequest(f"layers {request.layers}: {exc}"[:2000]) from None
        if list(featureset.layers) != list(request.layers):
            raise InvalidRequest(
                f"layers {request.layers} are not in featureset order {featureset.layers}: hidden_states' axis 1 "
                "follows that order, so send them sorted (embed first, ascending, final_norm last)"
            )
        tokens = self._check_layout(tensors, featureset)
        warnings = self._check_against_model(request, parsed, featureset, tensors)
        if request.prompt_tokens > tokens:
            raise InvalidRequest(f"prompt_tokens {request.prompt_tokens} exceed the {tokens} tokens sent")
        if (actual := content_hash(tensors.values())) != request.content_hash:
            raise InvalidRequest(f"the tensors sent hash to {actual}, not to the content hash {request.content_hash}")
        hidden = to_torch(tensors[HIDDEN_STATES])
        ids = to_torch(tensors["input_ids"])
        summary = layer_summary(hidden, ids)
        stats = layer_stats(summary, list(featureset.layers), request.source)  # refuses NaN / Inf
        backend = request.backend or UNKNOWN_BACKEND
        stated = backend != UNKNOWN_BACKEND
        if stated:
            warnings.append(
                f"backend {backend!r} is as the importer stated it, not measured: the manifest records it as stated"
            )
        key = EntryKey(parsed.prompt_hash, request.model_revision, backend, featureset.id)
        flags = self.checks.check(key, stats, row_counts(summary), tokens)
        existing = self.versions.versions(key)
        measured = [m for m in existing if m.fingerprint.imported_from is None]
        if measured and request.content_hash not in {m.content_hash for m in existing}:
            # reads get the newest version: a stated backend must never put other bits over measured ones
            raise InvalidRequest(
                f"this key's features were extracted here under backend {backend!r} and the imported bits differ: "
                "import them without --backend (as 'unknown') and compare the two"
            )
        verdict = None
        if self.models is not None and self.models.spec.revision == request.model_revision:
            # last: the checks above need no forward, and name what a damaged dump got wrong
            verdict, checked = self.spot_checks.before_storing(request, parsed, featureset, tensors)
            warnings.extend(checked)
        manifest = new_manifest(
            key,
            featureset,
            parsed,
            request.content_hash,
            prompt_tokens=request.prompt_tokens,
            completion_tokens=tokens - request.prompt_tokens,
            completion_source=request.completion_source,
            tensors=tensors.values(),
            layer_stats=stats,
            fingerprint=Fingerprint.of_import(request.source, stated, request.run),
            flags=flags,
        )
        stored, added = self.recorder.add(manifest, list(tensors.values()))
        self.spot_checks.after_storing(request, stored, verdict)
        if not added:
            status = ImportStatus.EXISTING
        else:
            status = ImportStatus.VERSION_ADDED if existing else ImportStatus.IMPORTED
        return ImportResult(prompt_hash=parsed.prompt_hash, status=status, manifest=stored, warnings=warnings)

    def _check_layout(self, tensors: Mapping[str, RawTensor], featureset: FeatureSet) -> int:
        """The number of tokens, once every tensor is one of hsstore's, in its dtype, and they agree."""
        unknown = sorted(set(tensors) - set(_LAYOUT))
        missing = [name for name in _REQUIRED if name not in tensors]
        if unknown or missing:
            raise InvalidRequest(
                f"an import holds {list(_LAYOUT)} (loss_mask optional); unknown {unknown}, missing {missing}"
            )
        for name, tensor in tensors.items():
            if tensor.dtype != _LAYOUT[name]:
                raise InvalidRequest(f"{name} is {tensor.dtype}; an import sends it as {_LAYOUT[name]}")
        hidden = tensors[HIDDEN_STATES]
        tokens = hidden.shape[0] if hidden.shape else 0
        if len(hidden.shape) != 3 or hidden.shape[1] != len(featureset.layers) or 0 in hidden.shape:
            raise InvalidRequest(
                f"hidden_states has shape {list(hidden.shape)}; want [tokens, {len(featureset.layers)} layers, hidden]"
            )
        for name in ("input_ids", "loss_mask"):
            if name in tensors and tensors[name].shape != (tokens,):
                raise InvalidRequest(f"{name} has shape {list(tensors[name].shape)}; want [{tokens}]")
        if tokens > self.max_tokens:
            raise InvalidRequest(f"{tokens} tokens exceed the limit of {self.max_tokens} tokens per sample")
        if "loss_mask" in tensors and int(tensors["loss_mask"].numpy().max()) > 1:
            raise InvalidRequest("loss_mask holds values other than 0 and 1")
        if int(tensors["input_ids"].numpy().min()) < 0:
            raise InvalidRequest("input_ids holds a negative token id")
        return tokens

    def _check_against_model(
        self,
        request: ImportRequest,
        parsed: ParsedSample,
        featureset: FeatureSet,
        tensors: Mapping[str, RawTensor],
    ) -> list[str]:
        """The sample's own token ids must be the tensors'; where this service runs the revision, the shapes and the
        tokenisation of text and messages are checked against its model too."""
        ids = tensors["input_ids"].numpy()
        sample = parsed.sample
        completion = sample.completion
        # ids throughout (a text or greedy completion is tokenised by the model, checked below where it runs here)
        if sample.token_ids is not None and (completion is None or completion.token_ids is not None):
            expected = [*sample.token_ids, *(completion.token_ids or [] if completion else [])]
            if not np.array_equal(ids, np.asarray(expected, dtype=ids.dtype)):
                raise InvalidRequest("input_ids are not the sample's token_ids (and completion token_ids)")
        models = self.models
        if models is None or models.spec.revision != request.model_revision:
            if sample.token_ids is not None:
                return []
            return [
                "the tokens were not checked against the sample's text: this service does not run "
                f"model_revision {request.model_revision}"
            ]
        spec = models.spec
        hidden_size = int(spec.config.hidden_size)
        if tensors[HIDDEN_STATES].shape[2] != hidden_size:
            raise InvalidRequest(
                f"hidden_states are {tensors[HIDDEN_STATES].shape[2]} wide; model_revision "
                f"{request.model_revision} has hidden size {hidden_size}"
            )
        try:
            featureset.check_against(spec.num_layers, spec.vocab_size)
        except ValueError as exc:
            raise InvalidRequest(str(exc)) from None
        if int(ids.max()) >= spec.vocab_size:
            raise InvalidRequest(f"input_ids hold a token id outside the model's vocabulary of {spec.vocab_size}")
        if sample.token_ids is None:
            encoded = spec.encode(parsed, self.max_tokens)
            prompt = encoded.prompt_ids
            if list(ids[: len(prompt)]) != prompt or request.prompt_tokens != len(prompt):
                raise InvalidRequest("input_ids do not start with the sample's prompt as this model tokenises it")
            if encoded.completion_ids is not None and list(ids[len(prompt) :]) != encoded.completion_ids:
                raise InvalidRequest("input_ids do not end with the sample's completion as this model tokenises it")
        return []
