"""Rollouts for GRPO: sample a group of responses per prompt from the current policy.

Two engines behind one interface. On a CUDA host with vLLM installed, a vLLM engine shares the GPU
with the policy and receives the policy's weights before every rollout (`sync`). Elsewhere (CPU,
tests) transformers' generate samples from the policy module itself, so there is nothing to sync.
Editable: ideas may change sampling, filtering or the engine.
"""

from __future__ import annotations

import time

from generation import Completion, hf_generate, pick_backend, vllm_engine, vllm_generate


class Rollouts:
    def __init__(self, backend: str, model, tokenizer, model_path: str, *, max_tokens: int,
                 temperature: float, top_p: float, seed: int, hf_batch: int,
                 gpu_memory_utilization: float, max_model_len: int):
        self.backend = pick_backend(backend)
        self.model, self.tok = model, tokenizer
        self.max_tokens, self.temperature, self.top_p = max_tokens, temperature, top_p
        self.seed, self.hf_batch, self.calls = seed, hf_batch, 0
        self.llm = (vllm_engine(model_path, gpu_memory_utilization, max_model_len, seed)
                    if self.backend == "vllm" else None)

    def sync(self) -> float:
        """Write the policy's current weights into the vLLM engine; returns seconds taken."""
        if self.llm is None:
            return 0.0
        t = time.time()
        load_weights_into_vllm(self.llm, self.model)
        return time.time() - t

    def sample(self, prompts: list[str], group_size: int) -> list[list[Completion]]:
        self.calls += 1
        seed = self.seed * 100_003 + self.calls
        if self.llm is not None:
            return vllm_generate(self.llm, prompts, group_size, self.max_tokens, self.temperature,
                                 self.top_p, seed)
        return hf_generate(self.model, self.tok, prompts, group_size, self.max_tokens,
                           self.temperature, self.top_p, self.hf_batch, seed)


def load_weights_into_vllm(llm, model) -> None:
    """Weight sync for vLLM's V1 engine run in-process (VLLM_ENABLE_V1_MULTIPROCESSING=0, set by
    generation.vllm_engine): collective_rpc hands our function the worker, whose model runner's
    model loads HF-named tensors directly (it fuses q/k/v and gate/up itself). Stale prefix-cache
    blocks were computed with the old weights, so the cache is reset."""
    weights = list(model.state_dict().items())

    def _load(worker):
        runner = worker.model_runner
        target = runner.model if hasattr(runner, "model") else runner.get_model()
        target.load_weights(weights=weights)

    if hasattr(llm, "collective_rpc"):
        llm.collective_rpc(_load)
    else:  # the V0 engine (vLLM <= 0.10 with VLLM_USE_V1=0), as in the paper's own code
        llm.llm_engine.model_executor.driver_worker.model_runner.model.load_weights(weights)
    if hasattr(llm, "reset_prefix_cache"):
        llm.reset_prefix_cache()
