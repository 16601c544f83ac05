"""Extraction as a Ray Data stage: `extract_samples(samples)` maps a Ray Dataset of samples over a pool of actors that
each hold the target through the service's own composition (`build_services`: the extraction, the canary, the
content checks and the writers `hsstore worker` runs) and write into the store their settings name (for a fleet, an
S3 bucket and a Postgres catalog), exactly as a worker does: content-addressed, written once, the catalog the one
ledger. What is stored is skipped, so a run again after a crash extracts only what is missing.

A row in is one sample's fields as `POST /v1/extract` takes them (`text`, `messages` or `token_ids`, an optional
`id`, ...), read from any source Ray has (`from_items`, `read_json`, `read_parquet`, `from_pandas`): the sample's key
is the same whatever carried it, as its normal form leaves out the nulls Arrow fills in and pandas' NaN
(`schemas/prompt_hash.py`). A row out names what was stored, never the features (about 50 KB a token stays out of
Ray's object store): `sample_id`, `prompt_hash`, `model_revision`, `backend`, `featureset`, `content_hash`,
`num_tokens`, `status` (`extracted`, `existing` or `failed`) and `error` (why a sample was refused, naming the row by
its `id`; the others of its batch are stored).

Ray restarts a killed actor and runs its batch again (Ray Data's defaults for actor pools): what the dead one stored
is then found and skipped, and an entry is never half written, so nothing is lost or stored twice. A host whose GPU
SGLang owns (windows, a hand-over) extracts only while a window is open and waits at a batch boundary otherwise. A
pool the cluster cannot place (more actors than its CPUs leave room for beside the reading tasks, GPUs it does not
have) is refused before anything runs, naming what is missing, instead of waiting on Ray's scheduler for ever.

    import ray
    from hsstore.ray_stage import extract_samples
    stored = extract_samples(ray.data.read_json("s3://bucket/samples.jsonl"), concurrency=8, num_gpus=1)
    stored.write_parquet("s3://bucket/extracted/")   # or .take_all(), .count()

`ray` is an optional extra: `pip install 'hsstore[ray]'`.
"""

from __future__ import annotations

import contextlib
import time
from typing import TYPE_CHECKING, Any

from client.training.ray_pools import check_fits, runs_tasks
from schemas.api import ExtractResult
from schemas.featureset import FeatureSet
from schemas.prompt_hash import normal_form, prompt_hash

if TYPE_CHECKING:
    import pyarrow as pa
    import ray.data

    from service.core.write.writer import FeatureWriter
    from service.settings import Settings

FAILED = "failed"  # a row's status when its sample was refused (the others are ExtractStatus values)


class ExtractSamples:
    """One actor of the stage: the service's object graph around one loaded target, built once per actor."""

    def __init__(self, settings: Settings | None, featureset: FeatureSet | None, backend: str, poll_s: float) -> None:
        from service.main import build_services
        from service.settings import Settings

        settings = settings if settings is not None else Settings.load()
        if settings.model_dir is None:
            raise ValueError("an extracting actor needs a model: model_dir in its settings, or HSSTORE_MODEL_DIR")
        self.services = build_services(settings.model_copy(update={"run_jobs": True}))  # a worker: it loads weights
        self._lifecycle = contextlib.ExitStack()
        self._lifecycle.enter_context(self.services.running(jobs=False))  # its batches only, not the warm-job queue
        self.featureset = featureset
        self.backend = backend
        self.poll_s = poll_s

    def __call__(self, batch: pa.Table) -> pa.Table:
        self._wait_for_window()
        rows = extract_rows(self.services.writer, batch, self.featureset, self.backend)
        if not self.services.windows.usable() and self.services.models is not None:
            self.services.models.give_back_if_idle()  # the window is over: SGLang has its GPU back between batches
        return rows

    def _wait_for_window(self) -> None:
        windows = self.services.windows
        while not windows.usable():
            if self.services.models is not None:
                self.services.models.give_back_if_idle()
            time.sleep(self.poll_s)

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self._lifecycle.close()


def extract_rows(writer: FeatureWriter, batch: pa.Table, featureset: FeatureSet | None, backend: str) -> pa.Table:
    """One batch of sample rows extracted (or found stored) through `writer`, as the stage's rows out."""
    import pyarrow as pa

    from service.core.write.each_sample import extract_each

    samples = batch.to_pylist()  # as Arrow holds them, nulls filled in: the sample's normal form drops them
    places = [_place(sample) for sample in samples]
    outcomes = extract_each(writer, samples, featureset, backend, places=places)
    rows = [_row(sample, outcome) for sample, outcome in zip(samples, outcomes, strict=True)]
    return pa.Table.from_pylist(rows, schema=_schema())


def _schema() -> pa.Schema:
    """Every batch's rows, failed or not, under one schema (a failed row's entry columns are null)."""
    import pyarrow as pa

    texts = ("sample_id", "prompt_hash", "model_revision", "backend", "featureset", "content_hash")
    fields = [*((name, pa.string()) for name in texts), ("num_tokens", pa.int64())]
    return pa.schema([*fields, ("status", pa.string()), ("error", pa.string())])


def _place(sample: dict[str, Any]) -> str:
    """How an error names a row: by its `id` label, else by its prompt hash (a batch's positions are Ray's)."""
    label = _label(sample)
    if label is not None:
        return f"row id {label!r}"
    try:
        return f"row with prompt_hash {prompt_hash(sample)[:12]}"
    except ValueError:  # past a JSON limit, or not JSON at all: the error itself says what is wrong
        return "row"


def _label(sample: dict[str, Any]) -> str | None:
    """The row's `id` label as text, if it has one (a row past a JSON limit has none that can be read)."""
    try:
        label = normal_form(sample).get("id")
    except ValueError:
        return None
    return None if label is None else str(label)


def _row(sample: dict[str, Any], outcome: ExtractResult | str) -> dict[str, Any]:
    sample_id = _label(sample)
    if isinstance(outcome, str):
        return {"sample_id": sample_id, "status": FAILED, "error": outcome}
    manifest = outcome.manifest
    return {
        "sample_id": sample_id,
        "prompt_hash": manifest.prompt_hash,
        "model_revision": manifest.model_revision,
        "backend": manifest.backend,
        "featureset": manifest.featureset_id,
        "content_hash": manifest.content_hash,
        "num_tokens": manifest.num_tokens,
        "status": outcome.status.value,
        "error": None,
    }


def extract_samples(
    samples: ray.data.Dataset,
    *,
    settings: Settings | None = None,
    featureset: FeatureSet | None = None,
    backend: str = "auto",
    concurrency: int | tuple[int, int] = 1,
    num_gpus: float = 1.0,
    batch_size: int = 64,
    window_poll_s: float = 30.0,
    **ray_remote_args: Any,
) -> ray.data.Dataset:
    """`samples` extracted on `concurrency` actors (or (min, max): as many as the load asks) of `num_gpus` GPUs each
    (0 on CPU hosts), `batch_size` samples a call; `settings`: the service's settings every actor builds from (None:
    each actor's own environment, HSSTORE_* variables as `hsstore worker` reads them, e.g. through Ray's
    `runtime_env`); `featureset` None: the model's default; `ray_remote_args` go to the actors (`runtime_env`,
    `accelerator_type`, ...). Lazy, as Ray Data is: the rows come as the returned dataset is consumed."""
    import ray.data

    check_fits(concurrency, num_gpus, float(ray_remote_args.get("num_cpus", 1)), runs_tasks(samples))
    pool = (
        ray.data.ActorPoolStrategy(size=concurrency)
        if isinstance(concurrency, int)
        else ray.data.ActorPoolStrategy(min_size=concurrency[0], max_size=concurrency[1])
    )
    return samples.map_batches(
        ExtractSamples,
        fn_constructor_args=(settings, featureset, backend, window_poll_s),
        batch_size=batch_size,
        batch_format="pyarrow",
        compute=pool,
        num_gpus=num_gpus,
        **ray_remote_args,
    )
