"""What int8 compute (W8A8) would buy on the default model, and what it would cost.

Run: .venv/bin/python bench/int8_probe.py

The one offline target still open in bfloat16 (64 requests, 3x Hugging Face in
bfloat16) is bound by bfloat16 matrix products running at this CPU's peak.
int8 products run about twice as many operations per cycle, so this script
measures both sides of that trade in one process:

1. speed: the model's decode matrix products at 64 rows, bfloat16 (oneDNN,
   packed weights, as the engine runs them) against ``torch._int_mm``;
2. accuracy: the logits of a teacher-forced chat (float32 engine model, every
   position) with each linear layer's weight quantized per output row and its
   input per token (the usual dynamic W8A8), and with bfloat16 for comparison:
   top-1 agreement and relative L2 error against float32.

Nothing here is used by the engine.
"""

from __future__ import annotations

import os

import torch

from linear_backends import SHAPES, median_ms  # bench/ is the script's directory

TEXT = ("Once upon a time, in a land far, far away, there was a dragon named Ember. Ember was a magnificent creature "
        "with scales as red as the setting sun and eyes that")


def speed() -> None:
    from sglang.srt.layers.onednn_linear import onednn_linear, prepack

    print("matrix products of one decode step at 64 rows (30 layers + LM head), median ms")
    tot_bf, tot_i8 = 0.0, 0.0
    for name, (n, k) in SHAPES.items():
        reps = 1 if name == "lm_head" else 30
        x, w = torch.randn(64, k, dtype=torch.bfloat16), torch.randn(n, k, dtype=torch.bfloat16)
        wp = prepack(w, 64)
        xi, wi = torch.randint(-127, 128, (64, k), dtype=torch.int8), torch.randint(-127, 128, (n, k), dtype=torch.int8)
        bf = median_ms(lambda x=x, wp=wp: onednn_linear(x, wp, None)) * reps
        i8 = median_ms(lambda xi=xi, wi=wi: torch._int_mm(xi, wi.t())) * reps
        tot_bf, tot_i8 = tot_bf + bf, tot_i8 + i8
        print(f"  {name:<8} bfloat16 {bf:7.2f}   int8 {i8:7.2f}")
    print(f"  {'total':<8} bfloat16 {tot_bf:7.2f}   int8 {tot_i8:7.2f}   ({tot_bf / tot_i8:.2f}x)")


def _w8a8(x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    wf, xf = w.float(), x.float()
    sw = wf.abs().amax(1, keepdim=True).clamp(min=1e-12) / 127
    sx = xf.abs().amax(-1, keepdim=True).clamp(min=1e-12) / 127
    y = (torch.round(xf / sx).double() @ torch.round(wf / sw).double().t()).float() * sx * sw.t()  # exact integer sums
    return (y if bias is None else y + bias.float()).to(x.dtype)


def accuracy() -> None:
    from inproc_scheduler import scheduler  # bench/ is the script's directory
    from sglang.srt.layers import parallel
    from sglang.srt.model_executor.forward_batch_info import ForwardMode, ModelWorkerBatch
    from sglang.srt.runtime_context import reset_context

    def logits_for(dtype: str, w8a8: bool) -> torch.Tensor:
        reset_context()
        sched = scheduler(dtype=dtype, quantization="none", fused_decode="off", page_size=16, max_total_tokens=4096,
                          max_running_requests=4)  # pages of 16: the prompt's page list below
        runner, tok = sched.tp_worker.model_runner, sched.tokenizer
        ids = tok.encode(tok.apply_chat_template([{"role": "user", "content": "Write a short story about a dragon."}]) + TEXT)
        if w8a8:  # dense copies to quantize from: the runner dropped them for oneDNN's packed ones
            mods = [m for m in runner.model.modules() if isinstance(m, (parallel.ColumnParallelLinear, parallel.RowParallelLinear))]
            for m in mods:
                m.w_dense = torch.ops.mkldnn._linear_pointwise(torch.eye(m.weight.shape[1], dtype=m.weight.dtype), m.kernel.weight, None, "none", [None], "").t().contiguous()
            parallel.ColumnParallelLinear._mm = parallel.RowParallelLinear._mm = lambda self, x, bias: _w8a8(x, self.w_dense, bias)
        n = len(ids)
        fb = runner.build_forward_batch(ModelWorkerBatch(ForwardMode.EXTEND, [ids], [0], [list(range(1, 1 + -(-n // 16)))], [None]))
        fb.logits_indices = torch.arange(n)
        with torch.inference_mode():
            return runner._run_model(fb).float()

    base = logits_for("float32", False)
    print("logits of every position of a teacher-forced chat, against float32")
    for label, dtype, w8a8 in (("bfloat16", "bfloat16", False), ("float32, W8A8 linears", "float32", True)):
        got = logits_for(dtype, w8a8)
        top1 = (got.argmax(-1) == base.argmax(-1)).float().mean().item()
        err = ((got - base).norm(dim=-1) / base.norm(dim=-1)).mean().item()
        print(f"  {label:<24} top-1 agreement {top1:.3f}   relative L2 error {err:.4f}")


def main() -> None:
    os.environ["SGLANG_QUIET_LOAD"] = "1"
    speed()
    accuracy()


if __name__ == "__main__":
    main()
