"""The cluster shape on real engines: two `hsstore serve` processes on one S3-API bucket (moto's server) and one
Postgres catalog, each with its own local directory. What one writes, the other reads, lists and verifies; what one
sets for every replica (a window override), the other sees."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from client import FeatureClient
from schemas.http import BODY_FORMATS, BodyFormat
from tests.conftest import ServerProcess
from tests.support.s3_server import Bucket

CHUNKS_MEDIA_TYPE = BODY_FORMATS[BodyFormat.CHUNKS].media_type


def _cluster_env(bucket: Bucket, postgres_url: str, data_dir: Path) -> dict[str, str]:
    return {
        **bucket.env(),
        "HSSTORE_CATALOG_URL": postgres_url,
        "HSSTORE_DATA_DIR": str(data_dir),
        "HSSTORE_WINDOWS": '["Sun 00:00-00:01 UTC"]',  # shut but for a manual opening, which every replica sees
    }


def test_written_through_one_replica_read_through_another(
    server_process: Callable[..., ServerProcess],
    bucket: Bucket,
    postgres_url: str,
    tiny_model_dir: Path,
    tmp_path: Path,
) -> None:
    extractor = server_process(
        {
            **_cluster_env(bucket, postgres_url, tmp_path / "a"),
            "HSSTORE_MODEL_DIR": str(tiny_model_dir),
            "HSSTORE_DEVICE": "cpu",
        }
    ).start()
    reader = server_process(_cluster_env(bucket, postgres_url, tmp_path / "b")).start()
    assert "catalog: Postgres at postgresql://hsstore:***@" in reader.output()
    assert f"blobs: {bucket.url}" in reader.output()

    samples = [{"id": f"c{i}", "text": f"def cluster_{i}(): return {i}\n" * (4 + i)} for i in range(3)]
    with FeatureClient(extractor.url) as a, FeatureClient(reader.url) as b:
        # shared state lives in the catalog, not in a process: a window opened through one is open on the other
        a.open_window(30)
        assert b.window().open and b.window().source == "manual"
        written = [r.manifest for r in a.extract(samples, featureset=["embed", 1, 3]).results]
        for manifest in written:
            via_b = b.fetch(manifest.feature_key())
            via_a = a.fetch(manifest.feature_key())
            assert via_b.content_hash == manifest.content_hash
            assert {n: bytes(t.data) for n, t in via_b.tensors.items()} == {
                n: bytes(t.data) for n, t in via_a.tensors.items()
            }
            part = b.fetch(manifest.feature_key(), layers=[3], tokens=(2, 9))
            assert bytes(part.tensors["hidden_states"].data) == bytes(
                a.fetch(manifest.feature_key(), layers=[3], tokens=(2, 9)).tensors["hidden_states"].data
            )
        assert sorted(m.content_hash for m in b.entries()) == sorted(m.content_hash for m in written)
        assert [f.content_hash for f in b.get_batch([m.feature_key() for m in written])] == [
            m.content_hash for m in written
        ]
        # the chunk wire format from the bucket, relayed by the replica, and the safetensors format
        head = b._http.head(f"/v1/features/{written[0].prompt_hash}", headers={"accept": CHUNKS_MEDIA_TYPE})
        assert head.status_code == 200 and head.headers["content-type"] == CHUNKS_MEDIA_TYPE
        plain = FeatureClient(reader.url, wire_format="safetensors")
        assert plain.fetch(written[0].feature_key()).content_hash == written[0].content_hash
        b.close_window()
        assert not a.window().open
        assert b.info().model is None and a.info().model is not None
