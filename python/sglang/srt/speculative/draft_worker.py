"""The draft model of STANDALONE speculative decoding: a second ``ModelRunner`` beside the target's.

Its per-runner values are constructor arguments that live on the runner (the process-wide bags describe the
target): the model (``--speculative-draft-model-path``), its weight format (``--speculative-draft-load-format``),
its attention backend (``--speculative-draft-attention-backend``, default the target's) and the target's
context length. Its KV pool is its own but is indexed by the target allocator's slots: the scheduler's page
ids cover both pools, so allocating, caching in the radix tree and freeing a page does it for both.
"""

from __future__ import annotations

import logging
from typing import Any

import torch

from sglang.srt.model_executor.forward_batch_info import ForwardMode, ModelWorkerBatch
from sglang.srt.runtime_context import get_spec

logger = logging.getLogger(__name__)


class DraftWorker:
    def __init__(self, target_worker: Any) -> None:
        from sglang.srt.model_executor.model_runner import ModelRunner
        from sglang.srt.model_loader.errors import ModelLoadError

        spec = get_spec()
        target = target_worker.model_runner
        try:
            self.runner = self._build(ModelRunner, target_worker, target, spec)
        except ModelLoadError as exc:  # its messages name --model-path: say which model it was
            raise ModelLoadError(f"the draft model (--speculative-draft-model-path, --speculative-draft-load-format): {exc}") from None
        mine, theirs = self.runner.model_config.vocab_size, target.model_config.vocab_size
        if mine != theirs:
            raise ValueError(f"the draft model {spec.speculative_draft_model_path} has {mine} tokens in its vocabulary, the target "
                             f"{theirs}: --speculative-draft-model-path needs a model with the target's tokenizer")

    @staticmethod
    def _build(runner_cls: Any, target_worker: Any, target: Any, spec: Any) -> Any:
        return runner_cls(target_worker.server_args, target_worker.gpu_id, target_worker.tp_rank, 1, target_worker.dist_init,
                          is_draft_worker=True, model_path=spec.speculative_draft_model_path, context_length=target.context_length,
                          load_format=spec.speculative_draft_load_format, allocator=target.allocator,
                          attention_backend=spec.speculative_draft_attention_backend or target.attention_backend)

    def forward(self, mode: ForwardMode, tokens: list[list[int]], prefix_lens: list[int], pages: list[list[int]]) -> torch.Tensor:
        """Logits ``[B, V]`` after each request's last new token; their KV goes to the draft pool's slots of ``pages``."""
        return self.runner.forward(ModelWorkerBatch(mode, tokens, prefix_lens, pages, [None] * len(tokens)))
