"""Batch invariance of the one-region step (csrc/team_step.h): a request's logits are the same bits whatever else runs
in its step. Alone or beside other requests, as a decode row or as any row of a speculative verify, at lengths up to,
across and past a chunk of the attention (kChunkTokens, 512): so greedy answers do not change with the concurrency,
and NGRAM's verified tokens are the ones decoding emits. Before the fixed chunks, a lone request's attention was
split over one token range per thread and merged, a batch's was not, and the two parted by up to 0.3 in the default
model's logits. Needs g++.
"""

from __future__ import annotations

import pytest
import torch

from sglang.srt.layers.cpu_kernels.build import load_decode_kernels

pytestmark = [pytest.mark.compiler]

CHUNK = 512  # team_step.h's kChunkTokens
WIDTH = 1024  # slots a request may use (the tiny model's positions): its cached prefix, its new rows


@pytest.fixture(scope="module")
def setup():
    from helpers.tiny_llama import gguf_model_and_pool

    mp = pytest.MonkeyPatch()
    mp.setenv("SGLANG_CPU_GGUF_MATH", "mixed16")  # int8 and int16 products: a last-bit change anywhere moves a rounding
    saved = torch.get_num_threads()
    torch.set_num_threads(2)  # a team of two, as on the 2-core machines: a lone request has fewer tasks than threads
    try:
        kernels = load_decode_kernels()
        model, pool = gguf_model_and_pool(11)
        yield kernels, model, pool
    finally:
        torch.set_num_threads(saved)
        mp.undo()


def _slots(req: int) -> torch.Tensor:
    return torch.arange(WIDTH) + 1 + req * WIDTH  # request req's slots (the pool has 4,096)


def _decode(setup, reqs: list[tuple[int, int, int]]) -> torch.Tensor:
    """Logits of one decode row per (request, cached tokens, token id), in one step."""
    from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode

    kernels, model, pool = setup
    lens = torch.tensor([p + 1 for _, p, _ in reqs])
    slots = torch.stack([_slots(r) % pool.size for r, _, _ in reqs])
    fb = ForwardBatch(ForwardMode.DECODE, torch.tensor([t for _, _, t in reqs]), lens - 1, slots[torch.arange(len(reqs)), lens - 1],
                      (lens - 1).tolist(), [1] * len(reqs), torch.arange(len(reqs)), kv_index=slots, kv_lens=lens)
    with torch.inference_mode():
        return model.forward_decode_plan(model.build_decode_plan(kernels, pool), fb).clone()


def _verify(setup, reqs: list[tuple[int, int, list[int]]]) -> torch.Tensor:
    """Logits of every row of a verify (an extend whose rows all give logits) per (request, cached tokens, tokens)."""
    from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode
    from sglang.srt.model_executor.fused_decode import FusedDecode

    kernels, model, pool = setup
    kv = [_slots(r)[: p + len(toks)] % pool.size for r, p, toks in reqs]
    n = sum(len(toks) for _, _, toks in reqs)
    fb = ForwardBatch(ForwardMode.EXTEND, torch.tensor([t for _, _, toks in reqs for t in toks]),
                      torch.cat([torch.arange(p, p + len(toks)) for _, p, toks in reqs]),
                      torch.cat([s[p:] for s, (_, p, _) in zip(kv, reqs)]), [p for _, p, _ in reqs], [len(toks) for _, _, toks in reqs],
                      torch.arange(n), kv_slots=kv)
    with torch.inference_mode():
        return FusedDecode(model, model.build_decode_plan(kernels, pool), extend=True).run_extend(fb).clone()


@pytest.mark.parametrize("cached", [40, CHUNK - 1, CHUNK, CHUNK + 1, 700, 1000])  # the tiny model has 1,024 positions
def test_a_decode_row_is_the_same_bits_alone_and_in_any_batch(setup, cached):
    alone = _decode(setup, [(0, cached, 17)])[0]
    # beside a short request, a long one, and both: the batch's tasks, chunks and merges change, the row does not
    for others in ([(1, 30, 5)], [(1, CHUNK + 300, 6)], [(1, 30, 5), (2, CHUNK + 77, 9)]):
        got = _decode(setup, [*others[:1], (0, cached, 17), *others[1:]])
        assert torch.equal(got[1], alone), f"{cached} cached tokens beside {others}: max diff {(got[1] - alone).abs().max()}"


@pytest.mark.parametrize("cached", [40, CHUNK - 3, 700])
def test_every_verify_row_is_the_decode_row_at_its_position(setup, cached):
    toks = [17, 250, 3, 99, 41, 8]  # the last token and five drafts; rows 3.. cross the chunk boundary at CHUNK - 3
    rows = _verify(setup, [(0, cached, toks)])
    # each row against a lone decode at its position, over the K/V the verify wrote for the rows before it
    for j, t in enumerate(toks):
        dec = _decode(setup, [(0, cached + j, t)])[0]
        assert torch.equal(rows[j], dec), f"verify row {j} at {cached + j} cached tokens: max diff {(rows[j] - dec).abs().max()}"
    # and beside another request's verify (two units in one step)
    both = _verify(setup, [(1, CHUNK + 40, [5, 6, 7]), (0, cached, toks)])
    assert torch.equal(both[3:], rows)


def test_the_chunked_attention_still_attends_to_every_token(setup):
    # a change far back in a long row's context (the first chunk) moves its logits: the merge keeps every chunk
    kernels, model, pool = setup
    before = _decode(setup, [(0, 1000, 17)])[0]
    slot = int(_slots(0)[3])
    saved = [(b[slot].clone(), c[slot].clone()) for b, c in zip(pool.k_buffer, pool.v_buffer)]
    try:
        for b, c in zip(pool.k_buffer, pool.v_buffer):
            b[slot] *= -4.0
            c[slot] += 3.0
        after = _decode(setup, [(0, 1000, 17)])[0]
    finally:
        for (k, v), b, c in zip(saved, pool.k_buffer, pool.v_buffer):
            b[slot], c[slot] = k, v
    assert not torch.equal(before, after)
