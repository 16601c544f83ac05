"""Export to and import from SpecForge's and speculators' offline datasets, against real servers and real files:
each export read back as its own pipeline reads it (torch.load of the dict, safetensors of the file) with shapes and
layer ids pinned to HF's `hidden_states`; export -> import into another store gives identical content hashes; a
re-import adds nothing; foreign dumps import under backend `unknown`; bad input changes nothing."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import torch
from datasets import load_from_disk
from fastapi import FastAPI
from safetensors import safe_open
from safetensors.torch import load_file
from typer.testing import CliRunner

from client import FeatureClient, InvalidRequestError, NotFoundError, compute_features
from client.exchange import ExportChoice, choose, export, import_dir, newest_versions, plan_import
from compute.tensors import from_torch
from hsstore.cli import app as cli
from schemas import safetensors_body
from schemas.api import IMPORT_METADATA, ImportRequest
from schemas.content_hash import content_hash
from schemas.exchange import EXPORT_INDEX, ExchangeFormat, ExportIndex
from schemas.featureset import FeatureSet
from schemas.tensors import RawTensor
from service.main import create_app
from service.model.loader import LoadedModel
from service.settings import Settings
from tests.conftest import LiveServer, coding_prompts

NUM_LAYERS, HIDDEN = 8, 64  # the tiny model's


def samples() -> list[dict]:
    """Chat prompts, one with a token-id completion (a loss mask) and one with a text completion."""
    prompts = coding_prompts()[:3]
    prompts[1] = {**prompts[1], "completion": {"token_ids": [11, 12, 13, 14, 15]}}
    prompts[2] = {**prompts[2], "completion": {"text": "def f():\n    return 1\n"}}
    return prompts


def hf_hidden_states(loaded: LoadedModel, ids: list[int]) -> tuple[torch.Tensor, ...]:
    with torch.inference_mode():
        out = loaded.model(input_ids=torch.tensor([ids]), output_hidden_states=True, use_cache=False)
    return tuple(h[0] for h in out.hidden_states)


@pytest.fixture
def other_store(tmp_path: Path, tiny_model_dir: Path, tiny_loaded: LoadedModel) -> Iterator[FeatureClient]:
    """A second service on a store of its own, running the same model (so imports are checked against it)."""
    settings = Settings(data_dir=tmp_path / "other", model_dir=tiny_model_dir, device="cpu")
    app: FastAPI = create_app(settings, tiny_loaded)
    with LiveServer(app) as url, FeatureClient(url) as client:
        yield client


def _export(client: FeatureClient, featureset: FeatureSet, fmt: ExchangeFormat, out: Path) -> ExportIndex:
    client.extract(samples(), featureset=featureset)
    manifests = newest_versions(client.entries(featureset=featureset.id))
    return export(client, manifests, fmt, out, num_layers=NUM_LAYERS).index()


def test_a_specforge_export_is_what_its_dflash_loader_reads_with_layer_ids_pinned_to_hf(
    client: FeatureClient, tiny_loaded: LoadedModel, tmp_path: Path
) -> None:
    featureset = FeatureSet(layers=[1, 4, 6])
    index = _export(client, featureset, ExchangeFormat.SPECFORGE, tmp_path / "sf")
    assert index.layer_ids == [1, 4, 6] and index.layers == [1, 4, 6]  # DFlash's ids are hsstore's
    assert index.layer_convention.startswith("dflash") and index.backend == "torch"
    files = sorted(p.relative_to(tmp_path / "sf").as_posix() for p in (tmp_path / "sf").rglob("*.ckpt"))
    assert files == [f"rows_0-2000/data_{i}.ckpt" for i in range(3)]
    for entry in index.entries:
        # SpecForge's load_feature_file: torch.load(path, weights_only=False, mmap=True)
        record = torch.load(tmp_path / "sf" / entry.file, weights_only=False, mmap=True)
        assert set(record) == {"input_ids", "loss_mask", "hidden_states"}
        ids = record["input_ids"]
        tokens = ids.shape[0]
        assert ids.dtype == record["loss_mask"].dtype == torch.int64 and record["loss_mask"].shape == (tokens,)
        assert record["hidden_states"].shape == (1, tokens, 3 * HIDDEN)
        assert record["hidden_states"].dtype == torch.bfloat16
        hf = hf_hidden_states(tiny_loaded, ids.tolist())
        for position, layer_id in enumerate(index.layer_ids):  # id L is HF's hidden_states[L + 1]
            piece = record["hidden_states"][0, :, position * HIDDEN : (position + 1) * HIDDEN]
            assert torch.equal(piece, hf[layer_id + 1]), layer_id
        completion = entry.sample.get("completion")
        assert entry.loss_mask == ("entry" if completion else "ones")
        if not completion:
            assert bool(record["loss_mask"].all())
    # what SpecForge's draft config must say to train on these files: their layers, the target's shape
    fragment = json.loads((tmp_path / "sf" / "dflash_draft_config.json").read_text())
    assert fragment == {"dflash_config": {"target_layer_ids": [1, 4, 6]}, "hidden_size": HIDDEN, "num_target_layers": 8}


def test_a_speculators_export_is_what_its_loader_reads_and_ends_with_the_final_layer(
    client: FeatureClient, tiny_loaded: LoadedModel, tmp_path: Path
) -> None:
    featureset = FeatureSet(layers=["embed", 2, 5, 7])
    index = _export(client, featureset, ExchangeFormat.SPECULATORS, tmp_path / "spec")
    assert index.layer_ids == [0, 3, 6, 8]  # vLLM's: id k is the input of layer k, the last the final layer
    for position, entry in enumerate(index.entries):
        assert entry.file == f"hidden_states/hs_{position}.safetensors"
        path = tmp_path / "spec" / entry.file
        loaded = load_file(path)  # as hs_connectors' FileTransfer reads it
        assert set(loaded) == {"token_ids", "hidden_states"}
        ids, hidden = loaded["token_ids"], loaded["hidden_states"]
        assert ids.dtype == torch.int64 and hidden.shape == (ids.shape[0], 4, HIDDEN)
        hf = hf_hidden_states(tiny_loaded, ids.tolist())
        for column, layer_id in enumerate(index.layer_ids[:-1]):  # id k is HF's hidden_states[k]
            assert torch.equal(hidden[:, column], hf[layer_id]), layer_id
        # the last id, num_layers, is the final layer's raw output: what speculators puts through its own norm
        assert not torch.equal(hidden[:, -1], hf[NUM_LAYERS])  # HF's last element is already normed (5.x)
        assert torch.equal(tiny_loaded.body.norm(hidden[:, -1].unsqueeze(0))[0], hf[NUM_LAYERS])
        with safe_open(str(path), framework="pt") as handle:
            provenance = json.loads(handle.metadata()["hsstore"])
        assert provenance["layer_ids"] == [0, 3, 6, 8] and provenance["content_hash"] == entry.content_hash
        # speculators' data.py: hidden_states[:, :-1].flatten(1) and hidden_states[:, -1]
        assert hidden[:, :-1].flatten(1).shape == (ids.shape[0], 3 * HIDDEN)
    # speculators' ArrowDataset(datapath): load_from_disk(datapath), then per index the cached file's token_ids must
    # torch.equal the row's input_ids, the row's loss_mask trains, and its lengths come from seq_len
    rows = load_from_disk(str(tmp_path / "spec"))
    assert len(rows) == len(index.entries) and rows.format["type"] == "torch"
    assert list(rows.with_format(None)["seq_len"]) == [int(rows[i]["input_ids"].shape[0]) for i in range(len(rows))]
    for position, entry in enumerate(index.entries):
        row, loaded = rows[position], load_file(tmp_path / "spec" / entry.file)
        assert torch.equal(loaded["token_ids"], row["input_ids"])
        assert row["loss_mask"].shape == row["input_ids"].shape
        assert bool(row["loss_mask"].all()) == (entry.loss_mask == "ones")


@pytest.mark.parametrize("fmt", list(ExchangeFormat))
def test_export_then_import_into_another_store_gives_identical_content_hashes_and_reimport_adds_nothing(
    client: FeatureClient, other_store: FeatureClient, tmp_path: Path, fmt: ExchangeFormat
) -> None:
    featureset = FeatureSet(layers=[2, 5, 7])
    index = _export(client, featureset, fmt, tmp_path / "out")
    plan = plan_import(other_store, tmp_path / "out", None, None, None)
    summary = import_dir(other_store, tmp_path / "out", plan)
    assert summary.counts["imported"] == 3 and not summary.warnings
    imported = {r.prompt_hash: r.manifest for r in summary.results}
    for entry in index.entries:
        manifest = imported[entry.prompt_hash]  # the export's own sample: the same prompt hash
        assert manifest.content_hash == entry.content_hash
        assert manifest.backend == "unknown" and manifest.fingerprint.imported_from.startswith(f"{fmt}:")
        assert manifest.featureset_id == featureset.id
        original = client.get(prompt_hash=entry.prompt_hash, featureset=featureset)
        copy = other_store.get(prompt_hash=entry.prompt_hash, featureset=featureset)
        assert torch.equal(original.hidden_states, copy.hidden_states)
        assert (original.loss_mask is None) == (copy.loss_mask is None)
    again = import_dir(other_store, tmp_path / "out", plan)
    assert again.counts["existing"] == 3 and again.counts["imported"] == 0
    assert len(list(other_store.entries())) == 3


def test_the_cli_exports_and_imports_with_a_stated_backend_recorded_as_stated(
    live_url: str, client: FeatureClient, other_store: FeatureClient, tmp_path: Path
) -> None:
    runner = CliRunner()
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps(s) + "\n" for s in samples()))
    extracted = runner.invoke(cli, ["extract", str(prompts), "--url", live_url, "--json", "--layers", "1,3,7"])
    assert extracted.exit_code == 0, extracted.output
    hashes = tmp_path / "hashes.jsonl"
    hashes.write_text("".join(line + "\n" for line in extracted.output.splitlines() if line.startswith("{")))
    out = tmp_path / "spec"
    result = runner.invoke(
        cli, ["export", str(out), "--format", "speculators", "--url", live_url, "--hashes", str(hashes)]
    )
    assert result.exit_code == 0, result.output
    assert "exported 3 entries" in result.output and "[2, 4, 8]" in result.output

    other = str(other_store._http.base_url)
    stated = runner.invoke(cli, ["import", str(out), "--url", other, "--backend", "torch"])
    assert stated.exit_code == 0, stated.output
    assert "3 imported" in stated.output and "as the importer stated it" in stated.output
    manifests = list(other_store.entries())
    assert {m.backend for m in manifests} == {"torch"} and all(m.fingerprint.backend_stated for m in manifests)

    refused = runner.invoke(cli, ["export", str(out), "--format", "specforge", "--url", live_url])
    assert refused.exit_code != 0 and "not empty" in refused.output


def test_reads_and_exports_that_name_no_backend_take_the_extracted_entry_over_an_imported_one(
    live_url: str, client: FeatureClient, tmp_path: Path
) -> None:
    featureset = FeatureSet(layers=[2, 5, 7])
    index = _export(client, featureset, ExchangeFormat.SPECFORGE, tmp_path / "out")
    import_dir(client, tmp_path / "out", plan_import(client, tmp_path / "out", None, None, None))
    assert {m.backend for m in client.entries(featureset=featureset.id)} == {"torch", "unknown"}
    for entry in index.entries:  # both exist; naming no backend means the one measured here
        assert client.get(prompt_hash=entry.prompt_hash, featureset=featureset).manifest.backend == "torch"
        assert client.get(prompt_hash=entry.prompt_hash, backend="unknown").manifest.backend == "unknown"

    runner = CliRunner()
    command = ["export", str(tmp_path / "out"), "--format", "specforge", "--featureset", featureset.id]
    refused = runner.invoke(cli, [*command, "--url", live_url])
    assert refused.exit_code == 1 and "--replace" in refused.output
    for _ in range(2):  # again and again: an earlier export is replaced, never mixed with
        replaced = runner.invoke(cli, [*command, "--url", live_url, "--replace"])
        assert replaced.exit_code == 0, replaced.output
        said = " ".join(replaced.output.split())  # the console wraps
        assert "exported 3 entries" in said and "backend torch" in said
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("mine")
    mine = ["export", str(tmp_path / "other"), "--format", "specforge", "--url", live_url, "--replace"]
    kept = runner.invoke(cli, mine)
    assert kept.exit_code == 1 and (tmp_path / "other" / "notes.txt").read_text() == "mine"


def test_a_foreign_specforge_dump_imports_under_backend_unknown_with_its_mask_as_a_completion(
    other_store: FeatureClient, tmp_path: Path
) -> None:
    """A directory as SpecForge's prepare_hidden_states.py writes it (no hsstore index): the ids must be given. Its
    random states are of a revision this service does not run (so no spot check against the model refuses them, as
    it refuses them under its own: test_import_trust.py)."""
    dump = tmp_path / "dump" / "rows_0-2000"
    dump.mkdir(parents=True)
    torch.manual_seed(0)
    ids = torch.randint(5, 1000, (40,))
    mask = torch.cat([torch.zeros(25), torch.ones(15)]).long()
    hidden = torch.randn(1, 40, 2 * HIDDEN).to(torch.bfloat16)
    torch.save({"input_ids": ids, "loss_mask": mask, "hidden_states": hidden}, dump / "data_0.ckpt")
    torch.save(
        {"input_ids": ids[:30], "loss_mask": torch.ones(30).long(), "hidden_states": hidden[:, :30]},
        dump / "data_1.ckpt",
    )

    foreign = "f" * 40
    with pytest.raises(ValueError, match="layer-ids"):
        import_dir(
            other_store,
            tmp_path / "dump",
            plan_import(other_store, tmp_path / "dump", ExchangeFormat.SPECFORGE, foreign, None),
        )
    plan = plan_import(other_store, tmp_path / "dump", ExchangeFormat.SPECFORGE, foreign, [6, 3])
    summary = import_dir(other_store, tmp_path / "dump", plan)
    assert summary.counts["imported"] == 2
    first, second = (r.manifest for r in summary.results)
    assert first.backend == "unknown" and first.featureset.layers == [3, 6]  # sorted, axis 1 reordered with them
    assert first.sample == {"token_ids": ids[:25].tolist(), "completion": {"token_ids": ids[25:].tolist()}}
    assert (first.prompt_tokens, first.completion_tokens, first.completion_source) == (25, 15, "token_ids")
    assert second.sample == {"token_ids": ids[:30].tolist()} and "loss_mask" not in second.tensors
    features = other_store.get(prompt_hash=first.prompt_hash, model_revision=foreign)
    assert torch.equal(features.hidden_states[:, 0], hidden[0].view(40, 2, HIDDEN)[:, 1])  # layer 3: the 2nd id
    assert torch.equal(features.loss_mask, mask.to(torch.uint8))


def _import_body(tensors: list[RawTensor], request: ImportRequest) -> bytes:
    return b"".join(safetensors_body.encode_parts(tensors, {IMPORT_METADATA: request.model_dump_json()}))


def test_bad_imports_are_refused_with_a_4xx_and_store_nothing(http: httpx.Client, tiny_loaded: LoadedModel) -> None:
    ids = torch.arange(10, 16, dtype=torch.int32)
    # the model's own features (an import of them passes its spot check), each case then wrong in one way
    hidden = compute_features(tiny_loaded.model, ids, FeatureSet(layers=[1, 3]))["hidden_states"]
    good = [from_torch("hidden_states", hidden), from_torch("input_ids", ids)]
    base = ImportRequest(
        sample={"token_ids": ids.tolist()},
        layers=[1, 3],
        model_revision=tiny_loaded.revision,
        source="test:inline",
        content_hash=content_hash(good),
        prompt_tokens=6,
    )
    nan = hidden.clone()
    nan[2, 1, 5] = float("nan")
    cases = {
        "hash": (good, base.model_copy(update={"content_hash": "sha256:" + "0" * 64})),
        "order": (good, base.model_copy(update={"layers": [3, 1]})),
        "layers": (good, base.model_copy(update={"layers": [1, 3, 5]})),
        "tokens": (good, base.model_copy(update={"sample": {"token_ids": [1, 2, 3, 4, 5, 6]}})),
        "width": ([from_torch("hidden_states", hidden[..., :32]), good[1]], base),
        "dtype": ([from_torch("hidden_states", hidden.float()), good[1]], base),
        "extra": ([*good, from_torch("target_ids", ids)], base),
        "nan": ([from_torch("hidden_states", nan), good[1]], base),
        "range": (good, base.model_copy(update={"layers": [1, 30]})),
    }
    for name, (tensors, request) in cases.items():
        if name != "hash":  # every other case is a consistent body that is wrong in one way
            request = request.model_copy(update={"content_hash": content_hash(tensors)})
        response = http.post("/v1/entries:import", content=_import_body(tensors, request))
        assert 400 <= response.status_code < 500, (name, response.status_code, response.text)
        assert response.json()["error"]["code"], name
    for body in (b"not safetensors", safetensors_body.encode_parts(good, {"import": "{}"})[0]):
        response = http.post("/v1/entries:import", content=body)
        assert response.status_code == 422 and response.json()["error"]["code"] == "invalid_request"
    assert http.get("/v1/entries").json()["entries"] == []
    accepted = http.post("/v1/entries:import", content=_import_body(good, base))
    assert accepted.status_code == 200 and accepted.json()["status"] == "imported"


def test_exports_refuse_what_their_format_cannot_hold(client: FeatureClient, tmp_path: Path) -> None:
    client.extract(samples()[:1], featureset=FeatureSet(layers=[1, 3]))
    client.extract(samples()[:1], featureset=FeatureSet(layers=["embed", 7, "final_norm"]))
    by_featureset = {m.featureset_id: m for m in client.entries()}
    plain = [m for m in by_featureset.values() if m.featureset.layers == [1, 3]]
    with_norm = [m for m in by_featureset.values() if "final_norm" in m.featureset.layers]
    with pytest.raises(ValueError, match="final layer"):
        export(client, plain, ExchangeFormat.SPECULATORS, tmp_path / "a", num_layers=NUM_LAYERS)
    with pytest.raises(ValueError, match="final_norm"):
        export(client, with_norm, ExchangeFormat.SPECFORGE, tmp_path / "b", num_layers=NUM_LAYERS)
    with pytest.raises(ValueError, match="embed"):
        export(client, with_norm, ExchangeFormat.SPECFORGE, tmp_path / "c", layers=["embed", 7], num_layers=NUM_LAYERS)
    with pytest.raises(ValueError, match="2 featuresets"):
        export(client, list(by_featureset.values()), ExchangeFormat.SPECFORGE, tmp_path / "d")
    written = export(client, with_norm, ExchangeFormat.SPECULATORS, tmp_path / "e", layers=["embed", 7], num_layers=8)
    assert written.header.layer_ids == [0, 8] and (tmp_path / "e" / EXPORT_INDEX).is_file()
    assert {p.name for p in tmp_path.iterdir()} - {"store"} == {"e"}  # refused before anything was written


def test_an_export_streams_from_keys_and_one_that_fails_midway_leaves_nothing(
    client: FeatureClient, tmp_path: Path
) -> None:
    featureset = FeatureSet(layers=[1, 7])
    client.extract(samples(), featureset=featureset)
    picked = choose(client, [{"featureset": featureset.id}])
    assert picked == ExportChoice.of(newest_versions(client.entries(featureset=featureset.id)))  # the reads' rule
    written = export(client, picked, ExchangeFormat.SPECULATORS, tmp_path / "out", num_layers=NUM_LAYERS)
    index = written.index()  # the spooled entries, as the index reads them
    assert written.entries == len(index.entries) == 3 and [e.prompt_hash for e in index.entries] == [
        k.prompt_hash for k in picked.keys
    ]
    from datasets import load_from_disk

    rows = load_from_disk(str(tmp_path / "out"))  # the spooled rows, as speculators' ArrowDataset opens them
    assert [int(n) for n in rows["seq_len"]] == [k.num_tokens for k in picked.keys]
    assert {p.name for p in tmp_path.iterdir()} - {"store"} == {"out"}  # no spool or staging left beside it
    gone = picked.keys[1]._replace(content_hash="sha256:" + "0" * 64)  # a version not stored: the second fetch fails
    broken = ExportChoice([picked.keys[0], gone, picked.keys[2]], picked.featuresets)
    with pytest.raises(NotFoundError):
        export(client, broken, ExchangeFormat.SPECFORGE, tmp_path / "half")
    assert {p.name for p in tmp_path.iterdir()} - {"store"} == {"out"}  # whole or absent: no half an export


def test_a_stated_backend_never_puts_other_bits_over_features_extracted_here(
    client: FeatureClient, tmp_path: Path
) -> None:
    index = _export(client, FeatureSet(layers=[1, 3]), ExchangeFormat.SPECFORGE, tmp_path / "sf")
    path = tmp_path / "sf" / index.entries[0].file
    record = torch.load(path, weights_only=True)
    record["hidden_states"][0, 0, 0] += 1  # still a valid file, other bits
    torch.save(record, path)
    plan = plan_import(client, tmp_path / "sf", None, None, None)  # the export's samples: the measured entries' keys
    with pytest.raises(InvalidRequestError, match="extracted here"):
        import_dir(client, tmp_path / "sf", plan, backend="torch")
    assert len(list(client.entries(backend="torch"))) == 3  # the measured versions, untouched
    summary = import_dir(client, tmp_path / "sf", plan)  # as "unknown": beside them, to compare
    assert summary.counts["imported"] == 3
    changed = summary.results[0].manifest
    report = client.compare(prompt_hash=changed.prompt_hash, a="torch", b="unknown", featureset=changed.featureset_id)
    assert report.layers[0].bitwise_equal_fraction < 1 and report.layers[1].bitwise_equal_fraction == 1
