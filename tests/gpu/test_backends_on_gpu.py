"""The GPU path (marked gpu, skipped without CUDA + fla + causal-conv1d): all three backends on one host, each
manifest naming the kernels that ran, compare, the causal-conv1d-less host, the layer convention, and packs' bits.
Run on the device with: python -m pytest -m gpu tests/gpu"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from client import FeatureClient
from compute.forward import attention_pinned
from schemas.backend import PINNED_ATTENTION
from schemas.featureset import FeatureSet
from service.main import create_app
from service.model.devmodel import build_devmodel
from service.model.fused import EAGER, FUSED
from service.settings import Settings
from tests.conftest import REPO, LiveServer
from tests.gpu.marks import needs_gpu_with

pytestmark = needs_gpu_with("fla", "causal_conv1d")
SAMPLE = {"messages": [{"role": "user", "content": "Implement an LRU cache in Python. " * 12}]}


@pytest.fixture(scope="module")
def gpu_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_devmodel(tmp_path_factory.mktemp("gpu-model") / "small", head_dim=64)


@pytest.fixture
def gpu_settings(tmp_path: Path, gpu_model_dir: Path) -> Settings:
    return Settings(data_dir=tmp_path / "store", model_dir=gpu_model_dir, device="cuda")


@pytest.fixture
def gpu_client(gpu_settings: Settings) -> Iterator[FeatureClient]:
    with LiveServer(create_app(gpu_settings)) as url, FeatureClient(url) as client:
        yield client


def test_three_backends_on_one_host_each_labelled_by_its_kernels(gpu_client: FeatureClient) -> None:
    info = gpu_client.info()
    assert info.backends_available == ["fla", "fla-noconv", "torch"] and info.default_backend == "fla"
    expected = {
        "fla": ("causal_conv1d", "fla"),
        "fla-noconv": ("transformers", "fla"),
        "torch": ("transformers", "transformers"),
    }
    hashes = {}
    for backend, (conv, rule) in expected.items():
        manifest = gpu_client.extract([SAMPLE], backend=backend).results[0].manifest
        assert manifest.backend == backend
        kernels = manifest.fingerprint.kernels
        assert kernels["causal_conv1d_fn"].startswith(conv), kernels
        assert kernels["torch_chunk_gated_delta_rule"].startswith(rule), kernels
        assert manifest.fingerprint.device.startswith("NVIDIA")
        hashes[backend] = manifest.content_hash
    assert len(set(hashes.values())) == 3, "the backends should differ in bits"
    for other in ("torch", "fla-noconv"):
        report = gpu_client.compare(SAMPLE, a="fla", b=other)
        assert all(row.cosine_mean > 0.9 for row in report.layers), report
        assert any(row.bitwise_equal_fraction < 1.0 for row in report.layers), report


def test_served_layers_equal_hf_hidden_states_on_gpu(gpu_client: FeatureClient, gpu_settings: Settings) -> None:
    from transformers import AutoModelForCausalLM

    featureset = FeatureSet(layers=[0, 1, 2, 3, 4, 5, 6])
    manifest = gpu_client.extract([SAMPLE], featureset=featureset, backend="fla").results[0].manifest
    # whichever the device's probe chose (fused on the H200), the served bits must be HF's; the fused kernels' own
    # bit-equality on this device is checked in test_fused_on_gpu.py
    assert manifest.fingerprint.elementwise in (FUSED, EAGER)
    served = gpu_client.get(SAMPLE, featureset=featureset, backend="fla")
    model = AutoModelForCausalLM.from_pretrained(gpu_settings.model_dir, dtype=torch.bfloat16).cuda().eval()
    assert manifest.fingerprint.attention_kernel == PINNED_ATTENTION
    with torch.inference_mode(), attention_pinned(PINNED_ATTENTION):
        ids = served.input_ids.long().unsqueeze(0).cuda()
        hf = model(input_ids=ids, output_hidden_states=True, use_cache=False).hidden_states
    for layer in range(7):
        assert torch.equal(served.hidden_states[:, layer], hf[layer + 1][0].cpu()), f"layer {layer}"


def test_without_causal_conv1d_fla_is_refused_and_auto_is_fla_noconv(gpu_model_dir: Path, tmp_path: Path) -> None:
    script = textwrap.dedent(f"""
        import sys
        sys.modules["causal_conv1d"] = None  # as on a host where causal-conv1d is not installed
        sys.path.insert(0, {str(REPO)!r})
        from pathlib import Path
        from fastapi.testclient import TestClient
        from service.main import create_app
        from service.settings import Settings
        app = create_app(Settings(data_dir=Path({str(tmp_path / "noconv")!r}), model_dir=Path({str(gpu_model_dir)!r}),
                                  device="cuda"))
        http = TestClient(app)
        assert http.get("/v1/info").json()["backends_available"] == ["fla-noconv", "torch"]
        refused = http.post("/v1/extract", json={{"samples": [{{"text": "x"}}], "backend": "fla"}})
        assert refused.status_code == 409, refused.text
        assert "causal-conv1d" in refused.json()["error"]["message"], refused.text
        auto = http.post("/v1/extract", json={{"samples": [{{"text": "x"}}]}})
        assert auto.json()["results"][0]["manifest"]["backend"] == "fla-noconv", auto.text
        assert http.get("/v1/entries", params={{"backend": "fla"}}).json()["entries"] == []
        print("ok")
    """)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=REPO, timeout=600)
    assert result.returncode == 0 and "ok" in result.stdout, result.stderr[-3000:]


def test_one_by_one_and_packed_extraction_store_the_same_bits_and_audit_on_gpu(gpu_settings: Settings) -> None:
    """One sequence per forward and packs are one computation: the same content hashes, and both audit."""
    from schemas.api import ExtractRequest
    from service.main import build_services

    samples = [{"token_ids": [(7 * i + n) % 1000 + 5 for i in range(n)]} for n in (17, 300, 1024, 1023, 64, 2048)]
    request = ExtractRequest(samples=samples, featureset=FeatureSet(layers=[1, 3, 5]), backend="fla")
    hashes = []
    for name, pack_tokens in (("single", 0), ("packed", 8192)):
        services = build_services(
            gpu_settings.model_copy(update={"data_dir": gpu_settings.data_dir / name, "pack_tokens": pack_tokens})
        )
        hashes.append([r.manifest.content_hash for r in services.writer.extract(request).results])
        report = services.auditor.audit(len(samples))
        assert (report.total, report.reproduced) == (len(samples), len(samples))
        services.close()
    assert hashes[0] == hashes[1]
