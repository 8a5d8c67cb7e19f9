"""``TpModelWorker``: one tensor-parallel rank's model execution.

``forward_batch_generation`` is the hook target that wraps the forward pass.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import torch

from sglang.srt.distributed.communication_op import broadcast_from_first
from sglang.srt.layers.sampler import prompt_logprobs, sample
from sglang.srt.model_executor.forward_batch_info import ForwardMode, ModelWorkerBatch
from sglang.srt.model_executor.model_runner import ModelRunner

if TYPE_CHECKING:
    from sglang.srt.server_args import ServerArgs

logger = logging.getLogger(__name__)


class TpModelWorker:
    def __init__(self, server_args: ServerArgs, gpu_id: int, tp_rank: int, dist_init: str) -> None:
        self.server_args = server_args
        self.gpu_id, self.tp_rank, self.dist_init = gpu_id, tp_rank, dist_init
        self.model_runner = ModelRunner(server_args, gpu_id, tp_rank, server_args.tp_size, dist_init)
        self.max_total_tokens = self.model_runner.max_total_tokens
        self.context_length = self.model_runner.context_length
        self._verify_greedy: bool | None = None  # SGLANG_NGRAM_FORCE_GREEDY_VERIFY for this server, read at its first verify

    def forward_batch_generation(self, batch: ModelWorkerBatch) -> tuple[list[int | None], list[Any]]:
        """Run one forward; sample a token for every request that has a sampler.

        Returns (token or None per request, logprob info or None per request).
        All TP ranks end with rank 0's tokens. A ``TARGET_VERIFY`` batch (speculative decoding, one
        rank) returns per request the list of tokens it emits and the list of their infos instead.
        """
        logits = self.model_runner.forward(batch)
        fused = getattr(self.model_runner, "fused_decode", None)
        argmax = fused.argmax if fused is not None else None  # the CPU kernels' row argmax for greedy rows
        if batch.mode is ForwardMode.TARGET_VERIFY:
            from sglang.srt.runtime_context import get_spec
            from sglang.srt.speculative.verify import force_greedy, verify

            spec = get_spec()
            if self._verify_greedy is None:  # checked at start-up by the scheduler's Speculator; not per step
                self._verify_greedy = force_greedy(spec.speculative_algorithm)
            return verify(logits, batch.drafts, batch.samplers, spec.speculative_accept_threshold_single,  # type: ignore[return-value]
                          spec.speculative_accept_threshold_acc, batch.draft_probs, self._verify_greedy, argmax)
        n = len(batch.samplers)
        if logits.shape[0] > n:
            batch.input_logprobs = prompt_logprobs(logits[n:], batch)
            logits = logits[:n]
        rows = [i for i, s in enumerate(batch.samplers) if s is not None]
        tokens: list[int | None] = [None] * len(batch.samplers)
        infos: list[Any] = [None] * len(batch.samplers)
        if rows:
            picked = logits if len(rows) == len(batch.samplers) else logits[rows]  # decode: every row samples, no 6 MB gather
            ids, inf = sample(picked, [batch.samplers[i] for i in rows], argmax)
            if self.server_args.tp_size > 1:
                ids = broadcast_from_first(torch.tensor(ids, dtype=torch.long)).tolist()
            for i, t, f in zip(rows, ids, inf):
                tokens[i], infos[i] = t, f
        return tokens, infos
