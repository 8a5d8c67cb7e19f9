"""The one-region step's redo (csrc/team_redo.h): a thread that finds another's share of a phase overdue computes it
itself. Whatever thread computes a share, and however often, the step's logits, residual stream and K/V are the
same bits as the barrier step's; a thread taken off its core (the library's test stall: it sleeps before its share
of one phase) is covered by the other, at every phase of a step, in decode and in a verify's rows. Needs g++.
"""

from __future__ import annotations

import pytest
import torch

from sglang.srt.layers.cpu_kernels.build import load_decode_kernels

pytestmark = [pytest.mark.compiler]

STALL_US = 3000  # far past any phase of the tiny model: only the other thread can finish it in time


def _setup(rows: tuple[int, ...], decode: bool, lens_kind: str = "short", bias: bool = False):
    from helpers.tiny_llama import gguf_model_and_pool
    from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode

    model, pool = gguf_model_and_pool(7, bias)
    gen = torch.Generator().manual_seed(8)
    if decode:  # one row a request of 2-59 tokens ("short"), its first ("first"), or past a chunk of the attention
        # ("long": team_step.h's kChunkTokens, 512)
        lo, hi = {"short": (2, 60), "first": (1, 2), "long": (600, 1000)}[lens_kind]
        lens = torch.randint(lo, hi, (len(rows),), generator=gen)
        width = 1024 if lens_kind == "long" else 64
        slots = torch.arange(len(rows) * width).view(len(rows), width) + 16
        fb = ForwardBatch(ForwardMode.DECODE, torch.randint(0, 300, (len(rows),), generator=gen), lens - 1,
                          slots[torch.arange(len(rows)), lens - 1], (lens - 1).tolist(), [1] * len(rows), torch.arange(len(rows)),
                          kv_index=slots, kv_lens=lens)
    else:  # a verify: each request's rows attend to its prefix and the rows before them
        prefixes = [40 + 9 * i for i in range(len(rows))]
        kv = [torch.arange(p + n) + 16 + 256 * i for i, (p, n) in enumerate(zip(prefixes, rows))]
        fb = ForwardBatch(ForwardMode.EXTEND, torch.randint(0, 300, (sum(rows),), generator=gen),
                          torch.cat([torch.arange(p, p + n) for p, n in zip(prefixes, rows)]),
                          torch.cat([s[p:] for s, p in zip(kv, prefixes)]), prefixes, list(rows), torch.arange(sum(rows)), kv_slots=kv)
    return model, pool, fb


def _step(model, pool, fb, kernels) -> list[torch.Tensor]:
    """The step's logits (the head in the step's region), K/V written, and for decode its residual stream (a
    step without the head, whose last layer's sum is the region's last phase)."""
    from sglang.srt.model_executor.forward_batch_info import ForwardMode
    from sglang.srt.model_executor.fused_decode import FusedDecode

    plan = model.build_decode_plan(kernels, pool)
    with torch.inference_mode():
        if fb.mode == ForwardMode.DECODE:
            assert plan.fuses_head(fb.input_ids.numel(), fb.logits_indices.numel())
            out = [model.forward_decode_plan(plan, fb)]
            h, cos, sin = model._plan_inputs(fb)
            out.append(plan.run(h, cos, sin, fb.kv_index, fb.kv_lens, fb.out_cache_loc, lora_slots=None, lora_mask=None))
        else:
            out = [FusedDecode(model, plan, extend=True).run_extend(fb)]
    return [t.clone() for t in out] + [b[fb.out_cache_loc].clone() for b in (*pool.k_buffer, *pool.v_buffer)]


@pytest.fixture()
def kernels(monkeypatch):
    monkeypatch.setenv("SGLANG_CPU_GGUF_MATH", "mixed16")
    lib = load_decode_kernels()
    saved = torch.get_num_threads()
    torch.set_num_threads(2)  # a team of two even on one core: the redo is between threads, not cores
    yield lib
    lib.set_step_redo(True)
    lib.stall_step_thread(-1, -1, 0)
    torch.set_num_threads(saved)


@pytest.mark.parametrize("rows,decode,lens_kind", [((1,), True, "short"), ((1,), True, "first"), ((1, 1, 1), True, "short"),
                                                   ((1,) * 9, True, "short"), ((6,), False, "short"), ((4, 3), False, "short"),
                                                   ((1, 1), True, "long")],
                         ids=["one-row", "one-row-first-token", "three-rows", "nine-rows", "verify-6", "verify-4-3", "two-long-rows"])
def test_a_stalled_thread_is_covered_at_every_phase_and_the_step_keeps_its_bits(kernels, rows, decode, lens_kind):
    model, pool, fb = _setup(rows, decode, lens_kind)
    assert sum(rows) <= kernels.step_redo_rows()
    kernels.set_step_redo(False)
    want = _step(model, pool, fb, kernels)
    kernels.set_step_redo(True)
    assert all(torch.equal(a, b) for a, b in zip(_step(model, pool, fb, kernels), want, strict=True))
    # 3 layers of 9-10 phases, the last layer's sum and the head's 2: every phase of the step, each thread in turn,
    # stalled before its share (taken over unbegun) or in the middle of it (taken over begun, then written again by
    # the stalled thread once the others have finished the step: what per-layer buffers make harmless)
    covered = 0
    for phase in range(34):
        for replay in (False, True):
            thread = (phase + replay) % 2
            kernels.stall_step_thread(thread, phase, STALL_US, replay)
            before = kernels.step_redo_taken()
            got = _step(model, pool, fb, kernels)
            covered += kernels.step_redo_taken() > before
            names = ["logits", "h"][: len(want) - 2 * len(pool.k_buffer)] + ["K/V"] * (2 * len(pool.k_buffer))
            for name, a, b in zip(names, got, want, strict=True):
                assert torch.equal(a, b), f"phase {phase}, thread {thread} stalled (replay {replay}): the {name} moved"
    kernels.stall_step_thread(-1, -1, 0)
    # a phase whose stalled thread has items in it is taken over (one row: a rows phase is thread 1's alone)
    assert covered >= 56, covered


@pytest.mark.parametrize("case", ["rows", "bias"])
def test_redo_serves_steps_of_at_most_its_rows_without_biases_and_off_the_barrier_waits(kernels, case):
    # past step_redo_rows(), or with a qkv bias (added to the product's output in place: a share computed twice at
    # once could add it twice), the step keeps its barriers
    rows = (1,) * (kernels.step_redo_rows() + 1) if case == "rows" else (1, 1)
    model, pool, fb = _setup(rows, True, bias=case == "bias")
    kernels.set_step_redo(False)
    want = _step(model, pool, fb, kernels)
    kernels.set_step_redo(True)
    for stalled_thread in (0, 1):
        kernels.stall_step_thread(stalled_thread, 1, STALL_US)
        before = kernels.step_redo_taken()
        got = _step(model, pool, fb, kernels)
        assert kernels.step_redo_taken() == before  # the barrier step, which waits out the stall
        assert all(torch.equal(a, b) for a, b in zip(got, want, strict=True))
    model, pool, fb = _setup((1,), True)
    kernels.set_step_redo(False)
    kernels.stall_step_thread(1, 1, STALL_US)
    before = kernels.step_redo_taken()
    _step(model, pool, fb, kernels)
    assert kernels.step_redo_taken() == before  # redo off: nothing taken over


def test_the_stall_is_checked(kernels):
    with pytest.raises(RuntimeError, match="0..1000000 us"):
        kernels.stall_step_thread(1, 0, -5)


def test_sglang_cpu_step_redo_sets_the_library_and_a_malformed_value_names_the_variable(kernels, monkeypatch):
    from sglang.srt.layers.cpu_kernels.build import apply_step_redo

    monkeypatch.setenv("SGLANG_CPU_STEP_REDO", "off")
    assert apply_step_redo(kernels) is False and kernels.step_redo() is False
    monkeypatch.setenv("SGLANG_CPU_STEP_REDO", " ON ")
    assert apply_step_redo(kernels) is True and kernels.step_redo() is True
    monkeypatch.setenv("SGLANG_CPU_STEP_REDO", "sometimes")
    with pytest.raises(ValueError, match="SGLANG_CPU_STEP_REDO='sometimes'"):
        apply_step_redo(kernels)
    assert kernels.step_redo() is True  # left as it was
