"""Train-side check of hsstore's exports with SpecForge's and speculators' own dataset code, from source trees you point
it at (not part of the test suite: their code is not vendored here, and speculators needs more than hsstore installs).

    git clone https://github.com/sgl-project/SpecForge /tmp/SpecForge          # or any checkout / snapshot
    git clone https://github.com/vllm-project/speculators /tmp/speculators
    .venv/bin/python scripts/check_exports_upstream.py --specforge /tmp/SpecForge --speculators /tmp/speculators

It extracts four demo prompts with the tiny model, exports them in both formats and runs each pipeline's dataset path
on the export folder as it is. SpecForge: the DFlash offline reader (`build_offline_reader`, with file validation),
`load_feature_file`, its normaliser and its collator, and the export's `dflash_draft_config.json` merged into one of
its DFlash configs. speculators: `ArrowDataset(datapath=<the export>, on_missing="raise")` (its `load_from_disk`,
`FileTransfer`, the token check) and `CollateFn`; the vLLM client, the Mooncake store and the noise transforms it
imports are stood in for (nothing is generated: every file is there). Exit 0 when all of it took every entry.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import tempfile
import types
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def load_module(name: str, path: Path) -> types.ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def speculators_dataset(root: Path) -> tuple[type, type]:
    """speculators' ArrowDataset and CollateFn from its source tree, with what they import but never call here
    stood in for."""
    connectors = types.ModuleType("hs_connectors")
    sys.modules["hs_connectors"] = connectors
    mooncake = types.ModuleType("hs_connectors.mooncake_store")
    mooncake.MooncakeHiddenStatesStore = mooncake.MooncakeStoreConfig = object  # type: ignore[attr-defined]
    sys.modules["hs_connectors.mooncake_store"] = mooncake
    transfer = load_module("hs_connectors.transfer", root / "hs_connectors" / "src" / "hs_connectors" / "transfer.py")
    connectors.FileTransfer = transfer.FileTransfer  # type: ignore[attr-defined]
    connectors.HiddenStatesTransfer = getattr(transfer, "HiddenStatesTransfer", object)  # type: ignore[attr-defined]
    for name in ("openai", "speculators", "speculators.data_generation", "speculators.train"):
        sys.modules.setdefault(name, types.ModuleType(name))
    client = types.ModuleType("speculators.data_generation.vllm_client")
    client.DEFAULT_MAX_RETRIES, client.DEFAULT_REQUEST_TIMEOUT = 0, None  # type: ignore[attr-defined]
    client.ClientItem, client.generate_hidden_states = dict, None  # type: ignore[attr-defined]
    sys.modules["speculators.data_generation.vllm_client"] = client
    noise = types.ModuleType("speculators.train.noise_transforms")
    noise.TransformTensors = object  # type: ignore[attr-defined]
    sys.modules["speculators.train.noise_transforms"] = noise
    load_module("speculators.data_generation.offline", root / "src" / "speculators" / "data_generation" / "offline.py")
    data = load_module("speculators.train.data", root / "src" / "speculators" / "train" / "data.py")
    return data.ArrowDataset, data.CollateFn


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--specforge", type=Path, required=True, help="a SpecForge source tree")
    parser.add_argument("--speculators", type=Path, required=True, help="a speculators source tree")
    args = parser.parse_args()

    sys.path.insert(0, str(args.specforge))
    from specforge.algorithms.common.dflash_family_data import (
        build_collator,
        build_offline_normalizer,
        build_offline_reader,
    )
    from specforge.runtime.data_plane.feature_store import load_feature_file

    arrow_dataset, collate_fn = speculators_dataset(args.speculators)

    sys.path.insert(0, str(REPO))
    from client import FeatureClient, FeatureSet
    from client.exchange import export, newest_versions
    from hsstore.demo_prompts import PROMPTS
    from schemas.exchange import ExchangeFormat
    from service.main import create_app
    from service.model.devmodel import build_devmodel
    from service.settings import Settings
    from tests.conftest import LiveServer

    work = Path(tempfile.mkdtemp(prefix="hsstore-upstream-"))
    app = create_app(Settings(data_dir=work / "store", model_dir=build_devmodel(work / "tiny"), device="cpu"))
    prompts = [dict(p) for p in PROMPTS[:4]]
    prompts[1]["completion"] = {"text": "def f(x):\n    return x * 2\n"}
    with LiveServer(app) as url, FeatureClient(url) as client:
        for fmt, layers in ((ExchangeFormat.SPECFORGE, [1, 3, 5]), (ExchangeFormat.SPECULATORS, [1, 3, 7])):
            featureset = FeatureSet(layers=layers)
            client.extract(prompts, featureset=featureset)
            manifests = newest_versions(client.entries(featureset=featureset.id))
            out = work / fmt.value
            index = export(client, manifests, fmt, out, num_layers=8).index()
            if fmt == ExchangeFormat.SPECFORGE:
                reader = build_offline_reader("dflash", str(out), run_id="check", ttt_length=1, max_len=4096)
                normalize = build_offline_normalizer(max_len=4096)
                refs = reader.read()
                samples = [normalize(load_feature_file(ref.feature_store_uri.removeprefix("file://"))) for ref in refs]
                batch = build_collator()(samples)
                shapes = {key: tuple(value.shape) for key, value in batch.items() if hasattr(value, "shape")}
                print(f"specforge   reader, normaliser, collator: {len(samples)} samples, batch {shapes}")
                template = json.loads((args.specforge / "configs" / "qwen3-8b-dflash.json").read_text())
                fragment = json.loads((out / "dflash_draft_config.json").read_text())
                merged = {**template, **fragment}
                merged["dflash_config"] = {**template["dflash_config"], **fragment["dflash_config"]}
                assert merged["dflash_config"]["target_layer_ids"] == index.layer_ids == layers, merged
                print(f"specforge   draft config merged: {merged['dflash_config']}, hidden {merged['hidden_size']}")
                assert len(samples) == len(index.entries)
            else:
                dataset = arrow_dataset(max_len=4096, datapath=str(out), on_missing="raise")
                items = [dataset[i] for i in range(len(dataset))]
                assert len(items) == len(index.entries) and all(item is not None for item in items)
                hidden = int(items[0]["verifier_last_hidden_states"].shape[-1])
                batch = collate_fn(max_len=4096, hidden_size=hidden, num_target_layers=len(layers) - 1)(items)
                shapes = {key: tuple(value.shape) for key, value in batch.items() if hasattr(value, "shape")}
                print(f"speculators ArrowDataset + CollateFn: {len(items)} samples, ids {index.layer_ids}, {shapes}")
    print("both pipelines' dataset code took every exported entry as it is")


if __name__ == "__main__":
    main()
