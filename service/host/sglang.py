"""The SGLang calls hsstore makes outside a hand-over: health, and greedy reference completions via `/generate`."""

from __future__ import annotations

import httpx

from service.errors import SGLangUnavailable


class SGLangClient:
    def __init__(self, url: str, timeout_s: float = 600.0) -> None:
        self.url = url.rstrip("/")
        self.http = httpx.Client(base_url=self.url, timeout=timeout_s)

    def healthy(self) -> bool:
        try:
            return self.http.get("/health", timeout=5).status_code == 200
        except httpx.HTTPError:
            return False

    def greedy(self, prompts: list[list[int]], max_new_tokens: int) -> list[list[int]]:
        """Greedy (temperature 0) completions of token-id prompts, as SGLang's native `/generate` returns them."""
        body = {"input_ids": prompts, "sampling_params": {"max_new_tokens": max_new_tokens, "temperature": 0.0}}
        try:
            response = self.http.post("/generate", json=body)
        except httpx.HTTPError as exc:
            raise SGLangUnavailable(f"SGLang at {self.url} did not answer /generate: {exc!r}") from None
        if response.status_code != 200:
            raise SGLangUnavailable(f"SGLang /generate answered {response.status_code}: {response.text[:300]}")
        outputs = response.json()
        if isinstance(outputs, dict):
            outputs = [outputs]
        if len(outputs) != len(prompts):
            raise SGLangUnavailable(f"asked SGLang for {len(prompts)} completions, got {len(outputs)}")
        return [list(out["output_ids"]) for out in outputs]
