"""The fused decode step inside a real scheduler on the default model (float32):
same tokens as the eager step, and the cases where it must stand aside or fail."""

from __future__ import annotations

import logging

import pytest
import torch

from helpers.inproc import generate_ids
from sglang.srt.layers.attention.registry import ATTENTION_BACKENDS, register_attention_backend
from sglang.srt.layers.cpu_kernels import load_decode_kernels
from sglang.srt.managers.scheduler import Scheduler
from sglang.srt.model_executor.forward_batch_info import ForwardMode, ModelWorkerBatch
from sglang.srt.model_executor.fused_decode import FusedDecode, FusedDecodeError
from sglang.srt.runtime_context import get_context, publish, reset_context
from sglang.srt.server_args import ServerArgs
from sglang.utils.process import free_port

pytestmark = [pytest.mark.compiler, pytest.mark.model]

PROMPTS = ["What is the capital of France?", "Write a haiku about the sea.", "List three colors.", "Count to five."]


def make_scheduler(**kw) -> Scheduler:
    # max_running_requests set: no load-time override, so re-publishing in this process drops nothing
    sa = ServerArgs(dtype="float32", max_total_tokens=4096, max_running_requests=32, log_level="warning", **kw)
    publish(sa, role="scheduler")
    return Scheduler(sa, 0, 0, f"tcp://127.0.0.1:{free_port()}")


@pytest.fixture(scope="module")
def sched():
    reset_context()
    yield make_scheduler()
    reset_context()


def generate(s: Scheduler, prompts: list[str], n: int = 24) -> list[list[int]]:
    return generate_ids(s, [s.tokenizer.encode(s.tokenizer.apply_chat_template([{"role": "user", "content": p}])) for p in prompts], n)


def test_the_default_cpu_runner_decodes_through_the_plan(sched):
    assert sched.tp_worker.model_runner.fused_decode is not None


def test_fused_and_eager_steps_give_the_same_tokens(sched):
    runner = sched.tp_worker.model_runner
    fused = [generate(sched, [p])[0] for p in PROMPTS[:2]] + [generate(sched, PROMPTS)]
    plan, runner.fused_decode = runner.fused_decode, None
    try:
        eager = [generate(sched, [p])[0] for p in PROMPTS[:2]] + [generate(sched, PROMPTS)]
    finally:
        runner.fused_decode = plan
    assert fused == eager
    assert fused[-1][:2] == fused[:2]  # batched equals single


def test_the_plan_takes_its_inputs_from_one_kernel_call_unless_a_module_hook_must_run(sched):
    runner = sched.tp_worker.model_runner
    model = runner.model
    kernel = model._inputs_kernel
    assert kernel is not None  # the default model's float32 rows of a Q8_0 embedding
    calls = []
    model._inputs_kernel = lambda *a: calls.append(1) or kernel(*a)
    try:
        reference = generate(sched, PROMPTS[:1])
    finally:
        model._inputs_kernel = kernel
    assert len(calls) == len(reference[0])  # every forward: the short prefill through the plan, then each decode step
    seen = []
    # a torch hook on the embedding: the step runs the module (and the hook) instead of the kernel
    handle = model.embed_tokens.register_forward_hook(lambda mod, args, out: seen.append(args[0].tolist()))
    try:
        hooked = generate(sched, PROMPTS[:1])
    finally:
        handle.remove()
    assert hooked == reference
    assert len(seen) == len(reference[0])  # the prefill and every decode step ran it
    assert all(len(ids) == 1 for ids in seen[1:])  # decode steps: one row each
    assert runner.fused_decode is not None  # a torch hook is not the hook registry's: the plan stayed
    seen.clear()
    handle = torch.nn.modules.module.register_module_forward_pre_hook(
        lambda mod, args: seen.append(1) if mod is model.embed_tokens else None)  # a global one, on every module
    try:
        assert generate(sched, PROMPTS[:1]) == reference
    finally:
        handle.remove()
    assert len(seen) == len(reference[0])
    seen.clear()
    module_forward = model.embed_tokens.forward
    model.embed_tokens.forward = lambda ids: seen.append(1) or module_forward(ids)  # patched on the instance
    try:
        assert generate(sched, PROMPTS[:1]) == reference
    finally:
        del model.embed_tokens.forward
    assert len(seen) == len(reference[0])
    assert "_inputs_embedding" not in dict(model.named_modules())  # held by reference, not a second submodule
    model._inputs_kernel = None
    try:
        assert generate(sched, PROMPTS[:1]) == reference  # the module's rows: the same tokens
    finally:
        model._inputs_kernel = kernel


@pytest.fixture
def renamed_backend():
    register_attention_backend("renamed_native", "helpers.attention:RenamedNativeBackend")
    try:
        yield "renamed_native"
    finally:
        ATTENTION_BACKENDS.pop("renamed_native")


def test_a_plugin_attention_backend_keeps_the_eager_step(sched, renamed_backend, caplog):
    expected = generate(sched, PROMPTS[:1])
    with get_context().preserve_config(), caplog.at_level(logging.INFO, logger="sglang.srt.model_executor.fused_decode"):
        other = make_scheduler(attention_backend=renamed_backend, disable_radix_cache=True)
        assert other.tp_worker.model_runner.fused_decode is None
        assert generate(other, PROMPTS[:1]) == expected
    assert "fused decode: not used, eager decode steps instead: the attention backend is 'renamed_native'" in caplog.text


def test_fused_decode_on_fails_start_up_with_the_reason(sched, renamed_backend):
    with get_context().preserve_config():
        with pytest.raises(FusedDecodeError, match=r"--fused-decode on, but .*the attention backend is 'renamed_native'.*--fused-decode auto"):
            make_scheduler(attention_backend=renamed_backend, fused_decode="on")


def test_fused_decode_off_is_the_eager_step(sched, caplog):
    with caplog.at_level(logging.INFO, logger="sglang.srt.model_executor.fused_decode"):
        assert FusedDecode.create(sched.tp_worker.model_runner, "off") is None
    assert "fused decode: off (--fused-decode off)" in caplog.text


def test_a_missing_compiler_falls_back_with_a_warning_or_fails_under_on(sched, monkeypatch, tmp_path, caplog):
    runner = sched.tp_worker.model_runner
    monkeypatch.setenv("CXX", str(tmp_path / "no-such-c++"))
    monkeypatch.setenv("SGLANG_KERNEL_CACHE", str(tmp_path / "cache"))
    load_decode_kernels.cache_clear()
    try:
        with caplog.at_level(logging.WARNING, logger="sglang.srt.model_executor.fused_decode"):
            assert FusedDecode.create(runner, "auto") is None
        assert "no C++ compiler found" in caplog.text and "--fused-decode off" in caplog.text
        with pytest.raises(FusedDecodeError, match="no C\\+\\+ compiler found"):
            FusedDecode.create(runner, "on")
    finally:
        load_decode_kernels.cache_clear()


def test_a_hook_inside_the_planned_code_keeps_the_eager_step_and_runs(sched):
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType
    from sglang.testing.plugins import restored_hooks

    runner = sched.tp_worker.model_runner
    calls = []
    with restored_hooks():
        HookRegistry.register("sglang.srt.models.llama.LlamaAttention.forward", lambda *a, **k: calls.append(1), HookType.BEFORE)
        HookRegistry.apply_hooks()
        assert FusedDecode.create(runner, "auto") is None
        with pytest.raises(FusedDecodeError, match="hooks are applied to sglang.srt.models.llama.LlamaAttention.forward, which the plan would bypass"):
            FusedDecode.create(runner, "on")
    assert not calls  # deciding runs nothing


def test_a_hook_applied_after_the_runner_was_built_runs_on_the_next_step_and_the_plan_returns_after(sched, caplog):
    # the runner re-checks the hook registry's generation before each forward (the fused plan would bypass the hook)
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType
    from sglang.testing.plugins import restored_hooks

    runner = sched.tp_worker.model_runner
    assert runner.fused_decode is not None
    calls = []
    with restored_hooks(), caplog.at_level(logging.WARNING, logger="sglang.srt.model_executor.model_runner"):
        HookRegistry.register("sglang.srt.models.llama.LlamaAttention.forward", lambda *a, **k: calls.append(1), HookType.BEFORE)
        HookRegistry.apply_hooks()
        hooked = generate(sched, PROMPTS[:1], n=4)
        assert runner.fused_decode is None
    assert "fused decode: off from now on, eager decode steps run the hooks applied to sglang.srt.models.llama.LlamaAttention.forward" in caplog.text
    assert len(calls) == 4 * runner.model_config.num_hidden_layers  # prefill and three decode steps, every layer
    assert generate(sched, PROMPTS[:1], n=4) == hooked  # the hook is gone: the plan is back, same tokens
    assert runner.fused_decode is not None and len(calls) == 4 * runner.model_config.num_hidden_layers


def test_a_weight_reading_hook_applied_after_packing_is_reported_once(sched, caplog):
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType
    from sglang.testing.plugins import restored_hooks

    with restored_hooks(), caplog.at_level(logging.WARNING, logger="sglang.srt.model_executor.model_runner"):
        HookRegistry.register("sglang.srt.layers.parallel.RowParallelLinear.forward", lambda *a, **k: None, HookType.BEFORE)
        HookRegistry.apply_hooks()
        generate(sched, PROMPTS[:1], n=3)
        generate(sched, PROMPTS[:1], n=3)
    said = [r.getMessage() for r in caplog.records if "RowParallelLinear.forward was applied after start-up" in r.getMessage()]
    assert len(said) == 1 and "apply it from a plugin, before the engine starts" in said[0]


def test_a_hook_on_a_linear_kernel_keeps_the_eager_step(sched):
    # the plan calls each layer's kernel itself, so a hook on the kernel object would never see the call
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType
    from sglang.testing.plugins import restored_hooks

    target = "sglang.srt.layers.linear_kernels.Q4F32.__call__"
    with restored_hooks():
        HookRegistry.register(target, lambda *a, **k: None, HookType.BEFORE)
        HookRegistry.apply_hooks()
        with pytest.raises(FusedDecodeError, match=f"hooks are applied to {target}, which the plan would bypass"):
            FusedDecode.create(sched.tp_worker.model_runner, "on")


def test_a_hook_that_may_read_linear_weights_keeps_them_dense(caplog):
    # a LoRA-style hook reads self.weight: packing would have left it a meta tensor
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType
    from sglang.testing.plugins import restored_hooks

    seen = []

    def lora(original_fn, self, x):
        seen.append(self.weight.is_meta)
        return original_fn(self, x) + 0 * (x @ self.weight.t())

    with get_context().preserve_config(), restored_hooks():
        HookRegistry.register("sglang.srt.layers.parallel.ColumnParallelLinear.forward", lora, HookType.AROUND)
        HookRegistry.apply_hooks()
        with caplog.at_level(logging.INFO, logger="sglang.srt.model_executor.model_runner"):
            s = make_scheduler()
        assert "dense weights kept (F.linear) for the hooks on sglang.srt.layers.parallel.ColumnParallelLinear.forward" in caplog.text
        assert s.tp_worker.model_runner.model.layers[0].mlp.gate_up_proj.kernel is None
        assert generate(s, PROMPTS[:1], n=3)[0]
    assert seen and not any(seen)


def test_the_default_runner_computes_on_the_ggufs_blocks_with_one_copy_of_the_weights(sched):
    runner = sched.tp_worker.model_runner
    model = runner.model
    assert runner.quantization == "gguf_q4" and runner.dtype == torch.float32  # no flags: auto
    assert set(runner.weight_format.layers.values()) == {"q4_f32", "q8_f32"} and runner.weight_format.layers["lm_head"] == "q8_f32"
    gu = model.layers[0].mlp.gate_up_proj
    assert gu.kernel.kind == "q4_f32" and gu.weight.is_meta
    assert model.embed_tokens.weight.is_meta and model.lm_head.weight.is_meta  # rows and logits from the Q8_0 blocks


def test_a_subclassed_layer_keeps_the_eager_step(sched):
    from sglang.srt.models.llama import LlamaMLP

    class LoudMLP(LlamaMLP):
        pass

    model = sched.tp_worker.model_runner.model
    mlp = model.layers[3].mlp
    mlp.__class__ = LoudMLP
    try:
        assert model.decode_plan_blockers() == ["test_a_subclassed_layer_keeps_the_eager_step.<locals>.LoudMLP replaces LlamaMLP"]
    finally:
        mlp.__class__ = LlamaMLP
    assert model.decode_plan_blockers() == []


def test_a_short_prefill_runs_through_the_plan_with_the_eager_logits_and_kv(sched):
    # two requests in one EXTEND forward: one whole prompt, one second chunk after a 16-token prefix;
    # every new token is a plan row attending causally to its own request's slots
    runner = sched.tp_worker.model_runner
    ids = sched.tokenizer.encode("Write a short story about a lighthouse keeper who finds a bottle on the shore, "
                                 "with a letter inside it from a sailor lost at sea many years ago.")
    assert len(ids) >= 23
    a, b = ids[:20], ids[:23]
    ps = runner.kv_pool.page_size
    pa, pb = runner.allocator.alloc(-(-20 // ps)), runner.allocator.alloc(-(-23 // ps))  # pages no cached prefix holds
    first = ModelWorkerBatch(ForwardMode.EXTEND, [b[:16]], [0], [pb[: -(-16 // ps)]], [None])
    batch = ModelWorkerBatch(ForwardMode.EXTEND, [a, b[16:]], [0, 16], [pa, pb], [None, None])
    slots = torch.cat([(torch.tensor(p)[:, None] * ps + torch.arange(ps)).reshape(-1)[:n] for p, n in ((pa, 20), (pb, 23))])
    pool = runner.kv_pool

    def run(fused: FusedDecode | None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        saved, runner.fused_decode = runner.fused_decode, fused
        try:
            runner.forward(first)
            logits = runner.forward(batch)
        finally:
            runner.fused_decode = saved
        return logits, torch.stack([pool.k_buffer[i][slots] for i in (0, 29)]), torch.stack([pool.v_buffer[i][slots] for i in (0, 29)])

    plan = FusedDecode.create(runner, "on")
    assert plan.takes_extend(runner.build_forward_batch(batch))
    try:
        eager, fused = run(None), run(plan)
    finally:
        runner.allocator.free(pa + pb)
    assert eager[0].shape == fused[0].shape == (2, runner.model_config.vocab_size)
    for e, f in zip(eager, fused):
        torch.testing.assert_close(f, e, rtol=1e-4, atol=1e-4)  # float32: the same sums in another order
    assert torch.equal(fused[0].argmax(-1), eager[0].argmax(-1))


def test_a_long_prefill_and_a_bfloat16_prefill_stay_eager(sched):
    # a forward whose per-row slot index would pass the limit runs the eager extend; so does any
    # prefill of a bfloat16 model (its logits would move by a few bfloat16 ulps)
    from types import SimpleNamespace

    from sglang.srt.model_executor.fused_decode import EXTEND_INDEX_LIMIT

    plan = FusedDecode.create(sched.tp_worker.model_runner, "on")
    n = int(EXTEND_INDEX_LIMIT ** 0.5)
    short, long = (SimpleNamespace(input_ids=[0] * k, prefix_lens=[0], extend_lens=[k]) for k in (n, n + 1))
    assert plan.takes_extend(short) and not plan.takes_extend(long)
    plan.extend = False  # as create() leaves it for a bfloat16 runner
    assert not plan.takes_extend(short)


def test_int8_gguf_math_serves_the_test_prompts_through_the_plan(sched, monkeypatch, caplog):
    # SGLANG_CPU_GGUF_MATH=int8: every Q4 layer and the tied head on the int8 kernels of this CPU's family,
    # decoded through the fused plan. Not the default: its answers part from the float32 reference's (this
    # prompt's greedy answer changes from its first token; bench/quality.py: 96.5% top-1 agreement, bar 98%)
    monkeypatch.setenv("SGLANG_CPU_GGUF_MATH", "int8")
    with get_context().preserve_config(), caplog.at_level(logging.INFO, logger="sglang.srt.model_executor.model_runner"):
        s = make_scheduler()
        runner = s.tp_worker.model_runner
        assert runner.weight_format.summary() == "120 x q4_i8; 1 x q8_i8" and runner.fused_decode is not None
        assert runner.model.embed_tokens.weight.is_meta  # rows still looked up in the Q8_0 blocks
        got = generate(s, PROMPTS, n=12)
        rev = generate(s, PROMPTS[::-1], n=12)
        alone = [generate(s, [p], n=12)[0] for p in PROMPTS]
    assert "GGUF kernels: int8 math (forced by SGLANG_CPU_GGUF_MATH)" in caplog.text
    # a row's answer does not depend on where it sits in the batch, nor on the batch: each row of x is quantized on
    # its own, the products are row-exact, and a row's attention is summed the same way alone and in a batch
    # (team_step.h's fixed chunks; int8 activations turn a last-bit difference into whole quantization steps, and
    # when a lone request's attention was split over one token range per thread this prompt's 8th token, a near
    # tie of 0.06-0.09 nats on the AVX2 EPYC, flipped between the request alone and in the batch)
    assert all(len(g) == 12 for g in got) and rev[::-1] == got and alone == got


@pytest.mark.parametrize("rows", [(5,), (4, 1, 3)], ids=["one-request", "three-requests"])
def test_a_verify_forward_through_the_plan_keeps_every_rows_eager_logits(sched, rows):
    # TARGET_VERIFY runs as an extend whose every row gives logits: each request's rows attend to its cached prefix
    # and to the rows before them (the one-region step's units: tests/integration/test_integer_kernels.py)
    runner = sched.tp_worker.model_runner
    ids = sched.tokenizer.encode("The lighthouse keeper climbed the spiral stairs every evening at dusk, carrying a lantern, "
                                 "a flask of tea and a notebook in which he wrote the colour of the sea.")
    ps = runner.kv_pool.page_size
    prefixes = [16 + 5 * i for i in range(len(rows))]
    assert len(ids) >= prefixes[-1] + max(rows)
    pages = [runner.allocator.alloc(-(-(p + n) // ps)) for p, n in zip(prefixes, rows)]
    first = ModelWorkerBatch(ForwardMode.EXTEND, [ids[:p] for p in prefixes], [0] * len(rows), pages, [None] * len(rows))
    verify = ModelWorkerBatch(ForwardMode.TARGET_VERIFY, [ids[p : p + n] for p, n in zip(prefixes, rows)], prefixes, pages,
                              [None] * len(rows))

    def run(fused: FusedDecode | None) -> torch.Tensor:
        saved, runner.fused_decode = runner.fused_decode, fused
        try:
            runner.forward(first)
            return runner.forward(verify)
        finally:
            runner.fused_decode = saved

    plan = FusedDecode.create(runner, "on")
    try:
        eager, fused = run(None), run(plan)
    finally:
        runner.allocator.free([p for pg in pages for p in pg])
    assert eager.shape == fused.shape == (sum(rows), runner.model_config.vocab_size)
    torch.testing.assert_close(fused, eager, rtol=1e-4, atol=1e-4)
    assert torch.equal(fused.argmax(-1), eager.argmax(-1))
