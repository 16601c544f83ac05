"""prompt_hash and content_hash recomputed from docs/design.md's words alone (no project import for the hashing), and
matched against what the service stores and the client receives."""

from __future__ import annotations

import hashlib
import json
import struct

import httpx
import numpy as np

from tests.conftest import coding_prompts


def design_prompt_hash(sample: dict) -> str:
    body = {k: v for k, v in sample.items() if k != "id"}
    return hashlib.sha256(
        json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    ).hexdigest()


def design_content_hash(body: bytes) -> str:
    """Parse the safetensors body by hand and hash each tensor in name order as docs/design.md says."""
    (length,) = struct.unpack("<Q", body[:8])
    header = json.loads(body[8 : 8 + length])
    header.pop("__metadata__", None)
    data = body[8 + length :]
    names = {"BF16": "bfloat16", "I32": "int32", "U8": "uint8"}
    digest = hashlib.sha256()
    for name in sorted(header):
        info = header[name]
        start, end = info["data_offsets"]
        digest.update(f"{name}|{names[info['dtype']]}|{','.join(map(str, info['shape']))}\n".encode())
        digest.update(data[start:end])
    return "sha256:" + digest.hexdigest()


def test_hashes_match_design(http: httpx.Client) -> None:
    samples = [*coding_prompts()[:3], {"id": "ünïcode", "text": "naïve café — 東京"}, {"token_ids": [5, 6, 7]}]
    response = http.post("/v1/extract", json={"samples": samples})
    assert response.status_code == 200, response.text
    for sample, result in zip(samples, response.json()["results"], strict=True):
        assert result["prompt_hash"] == design_prompt_hash(sample)
        body = http.get(f"/v1/features/{result['prompt_hash']}").content
        assert design_content_hash(body) == result["manifest"]["content_hash"]


def test_bf16_bytes_are_the_raw_little_endian_patterns(http: httpx.Client) -> None:
    result = http.post("/v1/extract", json={"samples": [{"text": "bits"}]}).json()["results"][0]
    body = http.get(f"/v1/features/{result['prompt_hash']}").content
    (length,) = struct.unpack("<Q", body[:8])
    info = json.loads(body[8 : 8 + length])["hidden_states"]
    start, end = info["data_offsets"]
    patterns = np.frombuffer(body[8 + length + start : 8 + length + end], dtype="<u2")
    floats = (patterns.astype(np.uint32) << 16).view(np.float32)
    assert np.isfinite(floats).all() and floats.std() > 0
