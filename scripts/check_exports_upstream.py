"""Read hsstore's exports with SpecForge's and speculators' own reader code, from source trees you point it at (not
part of the test suite: their code is not vendored here, and speculators needs more than hsstore installs).

    git clone https://github.com/sgl-project/SpecForge /tmp/SpecForge          # or any checkout / snapshot
    git clone https://github.com/vllm-project/speculators /tmp/speculators
    .venv/bin/python scripts/check_exports_upstream.py --specforge /tmp/SpecForge --speculators /tmp/speculators

It extracts four demo prompts with the tiny model, exports them in both formats and runs: SpecForge's
`list_feature_files`, `OfflineManifestReader(validate_files=True)`, `load_feature_file` and the DFlash
`normalize_offline_sample`; speculators' `hs_connectors` `FileTransfer.get_cached` and `check_hidden_states`, and the
split its `ArrowDataset` makes (`hidden_states[:, :-1].flatten(1)`, `hidden_states[:, -1]`). Exit 0 when all read.
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


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--specforge", type=Path, required=True, help="a SpecForge source tree")
    parser.add_argument("--speculators", type=Path, required=True, help="a speculators source tree")
    args = parser.parse_args()

    sys.path.insert(0, str(args.specforge))
    from specforge.algorithms.common.dflash_family_data import normalize_offline_sample
    from specforge.runtime.data_plane.feature_store import load_feature_file
    from specforge.runtime.data_plane.offline_reader import OfflineManifestReader, list_feature_files

    # hs_connectors' file transfer without its Mooncake backend (a distributed store we do not run)
    sys.modules["hs_connectors"] = types.ModuleType("hs_connectors")
    mooncake = types.ModuleType("hs_connectors.mooncake_store")
    mooncake.MooncakeHiddenStatesStore = mooncake.MooncakeStoreConfig = object  # type: ignore[attr-defined]
    sys.modules["hs_connectors.mooncake_store"] = mooncake
    connectors = args.speculators / "hs_connectors" / "src" / "hs_connectors"
    transfer = load_module("hs_connectors.transfer", connectors / "transfer.py")
    offline = load_module(
        "speculators_offline", args.speculators / "src" / "speculators" / "data_generation" / "offline.py"
    )

    sys.path.insert(0, str(REPO))
    from client import FeatureClient, FeatureSet
    from client.exchange import export, newest_versions
    from hsstore.demo_prompts import PROMPTS
    from schemas.exchange import ExportFormat
    from service.main import create_app
    from service.model.devmodel import build_devmodel
    from service.settings import Settings
    from tests.conftest import LiveServer

    work = Path(tempfile.mkdtemp(prefix="hsstore-upstream-"))
    app = create_app(Settings(data_dir=work / "store", model_dir=build_devmodel(work / "tiny"), device="cpu"))
    prompts = [dict(p) for p in PROMPTS[:4]]
    prompts[1]["completion"] = {"text": "def f(x):\n    return x * 2\n"}
    with LiveServer(app) as url, FeatureClient(url) as client:
        for fmt, layers in ((ExportFormat.SPECFORGE, [1, 3, 5]), (ExportFormat.SPECULATORS, [1, 3, 7])):
            featureset = FeatureSet(layers=layers)
            client.extract(prompts, featureset=featureset)
            manifests = newest_versions(client.entries(featureset=featureset.id))
            out = work / fmt.value
            index = export(client, manifests, fmt, out, num_layers=8)
            if fmt == ExportFormat.SPECFORGE:
                keys = ("input_ids", "loss_mask", "hidden_states")
                refs = OfflineManifestReader(str(out), strategy="dflash", feature_keys=keys, validate_files=True).read()
                for path, ref in zip(list_feature_files(str(out)), refs, strict=True):
                    sample = normalize_offline_sample(load_feature_file(path), max_len=4096)
                    shapes = {k: tuple(v.shape) for k, v in sample.items()}
                    print(f"specforge   {Path(path).name}: {shapes}, {ref.num_tokens} tokens")
            else:
                files = transfer.FileTransfer(out / "hidden_states")
                rows = [json.loads(line) for line in (out / "rows.jsonl").read_text().splitlines()]
                for i, row in enumerate(rows):
                    loaded = files.get_cached(i)
                    offline.check_hidden_states(loaded, row["input_ids"])
                    hidden = loaded["hidden_states"]
                    aux, last = hidden[:, :-1].flatten(1), hidden[:, -1]
                    print(
                        f"speculators hs_{i}: aux {tuple(aux.shape)}, last {tuple(last.shape)}, ids {index.layer_ids}"
                    )
    print("both pipelines' readers took every exported file")


if __name__ == "__main__":
    main()
