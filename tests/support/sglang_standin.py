"""A stand-in for SGLang that speaks the endpoints hsstore uses, as SGLang documents them: `/health`,
`/health_generate`, `/generate` (greedy completions computed with the tiny model), and the memory saver's
`/release_memory_occupation` / `/resume_memory_occupation`. It records the order of calls into a shared log, and
refuses to generate while its memory is released, as SGLang does."""

from __future__ import annotations

import threading
from typing import Any

import torch
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from service.model.loader import LoadedModel


class SGLangStandIn:
    def __init__(self, model: LoadedModel, log: list[str] | None = None) -> None:
        self.model = model
        self.log = log if log is not None else []
        self.released = False
        # faults an operator's bad day brings: /generate failing for everything, or refusing long prompts
        self.generate_fails = False
        self.refuse_prompts_longer_than: int | None = None
        # an SGLang that comes back from a release with broken weights, answering 200 with other tokens: the next
        # `wrong_answers` completions are off by one token id; `broken_by_resume` sets it (for good) at a resume
        self.wrong_answers = 0
        self.broken_by_resume = False
        self._lock = threading.Lock()
        self.app = self._build()

    def record(self, event: str) -> None:
        with self._lock:
            self.log.append(event)

    def _greedy(self, ids: list[int], max_new_tokens: int) -> list[int]:
        with torch.inference_mode():
            prompt = torch.tensor([ids])
            out = self.model.model.generate(
                prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=max_new_tokens, do_sample=False
            )
        tokens = out[0, len(ids) :].tolist()
        with self._lock:
            if self.wrong_answers > 0:
                self.wrong_answers -= 1
                return [(t + 1) % self.model.spec.vocab_size for t in tokens]
        return tokens

    def _build(self) -> FastAPI:
        app = FastAPI()

        @app.get("/health")
        def health() -> dict[str, str]:
            self.record("sglang:/health")
            return {"status": "ok"}

        @app.get("/health_generate")
        def health_generate() -> JSONResponse:
            self.record("sglang:/health_generate")
            if self.released:
                return JSONResponse({"error": "memory released"}, status_code=503)
            return JSONResponse({"status": "ok"})

        @app.post("/release_memory_occupation")
        async def release(request: Request) -> dict[str, Any]:
            await request.body()
            self.record("sglang:/release_memory_occupation")
            self.released = True
            return {}

        @app.post("/resume_memory_occupation")
        async def resume(request: Request) -> dict[str, Any]:
            await request.body()
            self.record("sglang:/resume_memory_occupation")
            self.released = False
            if self.broken_by_resume:
                self.wrong_answers = 10**9
            return {}

        @app.post("/generate")
        def generate(body: dict[str, Any]) -> JSONResponse:
            self.record("sglang:/generate")
            if self.released:
                return JSONResponse({"error": "memory released"}, status_code=503)
            if self.generate_fails:
                return JSONResponse({"error": "internal error"}, status_code=500)
            params = body.get("sampling_params", {})
            assert params.get("temperature", 1.0) == 0.0, "hsstore asks for greedy completions"
            prompts = body["input_ids"]
            single = bool(prompts) and isinstance(prompts[0], int)
            limit = self.refuse_prompts_longer_than
            if limit is not None and any(len(ids) > limit for ids in ([prompts] if single else prompts)):
                return JSONResponse({"error": f"prompt longer than {limit} tokens"}, status_code=400)
            outputs = [
                {
                    "text": "",
                    "output_ids": self._greedy(ids, int(params["max_new_tokens"])),
                    "meta_info": {"prompt_tokens": len(ids)},
                }
                for ids in ([prompts] if single else prompts)
            ]
            return JSONResponse(outputs[0] if single else outputs)

        return app
