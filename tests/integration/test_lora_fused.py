"""LoRA adapters through the fused decode plan inside a real scheduler on the default model (float32):
forwards with adapter rows run the plan (not the eager model), give the eager model's tokens, and a mixed
batch gives each request's single-run tokens. Adapters are loaded at run time, after the plan was built."""

from __future__ import annotations

import pytest

from helpers.lora_adapters import PEFT, write_adapter
from sglang.srt.arg_groups.lora_hook import check_lora_server_args
from sglang.srt.lora.lora_registry import LoRARef
from sglang.srt.lora.messages import LoRAUpdateOutput, LoRAUpdateReq
from sglang.srt.managers.io_struct import BatchTokenIDOut, TokenizedGenerateReqInput
from sglang.srt.managers.scheduler import Scheduler
from sglang.srt.runtime_context import publish, reset_context
from sglang.srt.server_args import ServerArgs
from sglang.utils.process import free_port

pytestmark = [pytest.mark.compiler, pytest.mark.model]

ADAPTERS = {"a": (8, list(PEFT), 1), "b": (3, ["q_proj", "v_proj", "down_proj"], 2)}  # name: rank, modules, seed


@pytest.fixture(scope="module")
def sched(tmp_path_factory):
    reset_context()
    sa = ServerArgs(dtype="float32", max_total_tokens=4096, max_running_requests=32, log_level="warning", enable_lora=True,
                    max_lora_rank=8, lora_target_modules=["all"], max_loras_per_batch=3)
    check_lora_server_args(sa)
    publish(sa, role="scheduler")
    s = Scheduler(sa, 0, 0, f"tcp://127.0.0.1:{free_port()}")
    mgr = s.tp_worker.model_runner.lora_manager
    root = tmp_path_factory.mktemp("adapters")
    ids = {}
    for name, (r, modules, seed) in ADAPTERS.items():
        write_adapter(root / name, mgr.dims, mgr.num_layers, r, modules, seed)
        ref = LoRARef.make(name, str(root / name))
        s.update_lora(LoRAUpdateReq(f"load-{name}", ref))
        (out,) = [o for o in s.outbox if isinstance(o, LoRAUpdateOutput)]
        s.outbox.clear()
        assert out.success, out.error
        ids[name] = ref.lora_id
    yield s, ids
    reset_context()


def generate(s: Scheduler, prompts: list[str], loras: list[str | None], n: int = 8) -> list[list[int]]:
    tok = s.tokenizer
    rids = [f"r{i}-{id(prompts)}" for i in range(len(prompts))]
    for rid, p, lora in zip(rids, prompts, loras):
        ids = tok.encode(tok.apply_chat_template([{"role": "user", "content": p}]))
        s.add_request(TokenizedGenerateReqInput(rid, ids, {"temperature": 0, "max_new_tokens": n, "ignore_eos": True}, lora_id=lora))
    while s.has_work():
        s.step()
    out: dict[str, list[int]] = {r: [] for r in rids}
    for o in s.outbox:
        if isinstance(o, BatchTokenIDOut):
            for rid, new in zip(o.rids, o.new_token_ids):
                out[rid] += new
    s.outbox.clear()
    s.tree.reset()
    return [out[r] for r in rids]


PROMPTS = ["Write a haiku about the sea.", "List three colors.", "Count to five."]


def test_adapter_forwards_run_the_plan_and_equal_the_eager_model(sched):
    s, ids = sched
    fused = s.tp_worker.model_runner.fused_decode
    assert fused is not None and fused.takes_adapters()
    loras = [ids["a"], None, ids["b"]]
    before = fused.adapter_forwards
    mixed = generate(s, PROMPTS, loras)
    assert fused.adapter_forwards - before >= 8  # the prefill and every decode step of the batch went through the plan
    singles = [generate(s, [p], [lora])[0] for p, lora in zip(PROMPTS, loras)]
    assert mixed == singles  # a mixed batch equals the single runs
    runner = s.tp_worker.model_runner
    runner.fused_decode = None  # the eager model with the torch_native backend
    try:
        eager = generate(s, PROMPTS, loras)
    finally:
        runner.fused_decode = fused
    assert mixed == eager
    assert generate(s, PROMPTS[:1], [None])[0] != mixed[0]  # the adapter matters
