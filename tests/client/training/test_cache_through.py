"""Cache-through reads: a dataset of samples extracts what is missing once, as one warm job, and waits only for
the sample it reads next; a later epoch makes no extraction request."""

from __future__ import annotations

import re

import httpx
import pytest
import torch
from torch.utils.data import DataLoader

from client import EntryStream, ExtractionFailedError, FeatureClient, FeatureDataset, NotFoundError, pad_collate
from client.training.cache_through import ExtractAhead
from schemas.featureset import FeatureSet
from tests.conftest import wait_for

FEATURESET = ["embed", 1, 2]


def _samples(count: int) -> list[dict]:
    return [{"id": f"c{i}", "text": f"def handler_{i}(event): return event " * (i + 1)} for i in range(count)]


def _writes(http: httpx.Client) -> float:
    """Requests that can extract: jobs submitted and extractions asked for."""
    text = http.get("/metrics").text
    counts = re.findall(r'hsstore_http_requests_total\{method="POST",route="/v1/(?:jobs|extract)"[^}]*\} (\S+)', text)
    return sum(float(c) for c in counts)


def test_an_epoch_extracts_exactly_the_missing_samples_once(
    client: FeatureClient, live_url: str, http: httpx.Client
) -> None:
    samples = _samples(6)
    client.extract(samples[:2], featureset=FEATURESET)  # two are stored already
    dataset = FeatureDataset(live_url, samples=samples, featureset=FEATURESET, on_missing="extract")
    loader = DataLoader(dataset, batch_size=2, num_workers=2, collate_fn=pad_collate)
    first = [h for batch in loader for h in batch["content_hash"]]
    assert len(first) == 6
    job = client.jobs()[0]
    assert (job.total, job.existing, job.done - job.existing, job.failed) == (6, 2, 4, 0)  # 4 extracted, once
    assert len(list(client.entries())) == 6
    before = _writes(http)
    second = [h for batch in loader for h in batch["content_hash"]]
    assert second == first and _writes(http) == before  # epoch 2: reads only
    for index in (0, 5):  # what the dataset gives is what the store gives
        want = client.get(samples[index], layers=FEATURESET)
        assert torch.equal(dataset[index]["hidden_states"], want.hidden_states)


def test_a_shuffled_stream_of_samples_extracts_the_missing_ones_once_in_its_first_epoch_s_order(
    client: FeatureClient, live_url: str, http: httpx.Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    samples = _samples(6)
    client.extract(samples[4:], featureset=FEATURESET)
    submitted: list[list[dict]] = []
    submit = FeatureClient.submit_job
    monkeypatch.setattr(
        FeatureClient, "submit_job", lambda self, s, **kw: submitted.append(list(s)) or submit(self, s, **kw)
    )
    stream = EntryStream.of_samples(live_url, samples, FEATURESET, seed=3, on_missing="extract", prefetch=2)
    job = client.jobs()[0]
    order = stream.order(list(range(6)))  # the first epoch's order is the job's
    assert submitted == [[samples[i] for i in order]] and order != list(range(6))
    loader = DataLoader(stream, batch_size=2, num_workers=2, collate_fn=pad_collate)
    first = sorted(h for batch in loader for h in batch["content_hash"])
    assert len(first) == 6
    job = client.job(job.id)
    assert (job.total, job.existing, job.done - job.existing, job.failed) == (6, 2, 4, 0)
    before = _writes(http)
    stream.set_epoch(1)
    assert sorted(h for batch in loader for h in batch["content_hash"]) == first and _writes(http) == before


def test_without_extract_a_missing_sample_is_not_found_and_a_job_that_did_not_store_it_is_an_error(
    client: FeatureClient, live_url: str
) -> None:
    with pytest.raises(NotFoundError):
        FeatureDataset(live_url, samples=_samples(1), featureset=FEATURESET)[0]
    other = ExtractAhead.submit(client, _samples(2)[1:], FeatureSet(layers=FEATURESET), None, 0)
    wait_for(lambda: not client.job(other.job_id).state.active, what="the job to end")
    lone = _samples(1)[0]
    with pytest.raises(ExtractionFailedError, match=r"is done .* did not store"):
        other.wait(client, lone, lambda: client.get(lone, layers=FEATURESET))


def test_a_dataset_of_samples_needs_its_featureset(live_url: str) -> None:
    with pytest.raises(ValueError, match="featureset"):
        FeatureDataset(live_url, samples=_samples(1))
    with pytest.raises(ValueError, match="keys or samples"):
        FeatureDataset(live_url)
