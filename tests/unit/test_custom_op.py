"""CustomOp dispatch on a built-in platform (this process resolves the CPU platform).

Each test defines its own op classes, so registrations never leak between tests.
"""

from __future__ import annotations

import pytest
import torch

from sglang.multimodal_gen.runtime.layers.custom_op import CustomOp, CustomOpError
from sglang.multimodal_gen.runtime.platforms import current_platform


@pytest.fixture(autouse=True)
def _cpu_platform():
    assert current_platform.get_dispatch_key_name() == "cpu"


def make_ops():
    class Native(CustomOp):
        def forward_native(self, x):
            return ("native", x)

    class WithCpu(Native):
        def forward_cpu(self, x):
            return ("cpu", x)

    return Native, WithCpu


def test_builtin_platform_falls_back_to_forward_native():
    native, _ = make_ops()
    assert native()(1) == ("native", 1)


def test_forward_key_defined_below_the_base_is_preferred():
    _, with_cpu = make_ops()
    op = with_cpu()
    assert op(2) == ("cpu", 2) and op.dispatch_source.endswith("WithCpu.forward_cpu")


def test_registered_function_wins_and_receives_the_op_first():
    _, with_cpu = make_ops()
    seen = []

    def fast(op, x):
        seen.append(op)
        return ("registered", x)

    CustomOp.register_oot_forward(with_cpu, fn=fast, platform_key="cpu")
    op = with_cpu()
    assert op(3) == ("registered", 3) and seen == [op]


def test_registration_matches_the_exact_class_only():
    native, with_cpu = make_ops()
    CustomOp.register_oot_forward(native, fn=lambda op, x: ("registered", x), platform_key="cpu")
    assert native()(1) == ("registered", 1)
    assert with_cpu()(1) == ("cpu", 1)


def test_registration_for_another_key_is_ignored():
    native, _ = make_ops()
    CustomOp.register_oot_forward(native, fn=lambda op, x: ("registered", x), platform_key="my_device")
    assert native()(1) == ("native", 1)


def test_dispatch_is_fixed_when_the_op_is_constructed():
    native, _ = make_ops()
    before = native()
    CustomOp.register_oot_forward(native, fn=lambda op, x: ("registered", x), platform_key="cpu")
    assert before(1) == ("native", 1)
    assert native()(1) == ("registered", 1)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"op_cls": int, "fn": len, "platform_key": "cpu"}, "op_cls must be a CustomOp subclass"),
        ({"op_cls": CustomOp, "fn": len, "platform_key": "cpu"}, "op_cls must be a CustomOp subclass"),
        ({"fn": 3, "platform_key": "cpu"}, "fn must be callable, got int"),
        ({"fn": len, "platform_key": " "}, "platform_key must be the non-blank string your platform's get_dispatch_key_name() returns"),
    ],
)
def test_bad_registrations_are_rejected_when_made(kwargs, message):
    native, _ = make_ops()
    kwargs.setdefault("op_cls", native)
    with pytest.raises(CustomOpError, match=message.replace("(", r"\(").replace(")", r"\)")):
        CustomOp.register_oot_forward(**kwargs)


def test_rmsnorm_and_attention_ops_match_their_references():
    from sglang.multimodal_gen.runtime.layers.attention.backends import AttentionBackendEnum
    from sglang.multimodal_gen.runtime.layers.attention.layer import USPAttention
    from sglang.multimodal_gen.runtime.layers.layernorm import RMSNorm

    x = torch.randn(2, 5, 8)
    norm = RMSNorm(8)
    ref = x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)
    torch.testing.assert_close(norm(x), ref)
    q, k, v = (torch.randn(2, 6, 4, 16) for _ in range(3))
    sdpa = USPAttention(4, 16, backend=AttentionBackendEnum.TORCH_SDPA)
    naive = USPAttention(4, 16, backend=AttentionBackendEnum.NAIVE)
    assert sdpa.backend.name == "torch_sdpa" and naive.backend.name == "naive"
    torch.testing.assert_close(sdpa(q, k, v), naive(q, k, v), atol=1e-5, rtol=1e-5)


def test_attention_backend_names_are_validated():
    from sglang.multimodal_gen.runtime.layers.attention.backends import AttentionBackendEnum

    assert AttentionBackendEnum.parse("torch_sdpa") is AttentionBackendEnum.TORCH_SDPA
    with pytest.raises(ValueError, match="unknown attention backend 'flash' \\(--attention-backend\\); supported: TORCH_SDPA, NAIVE"):
        AttentionBackendEnum.parse("flash")


def test_timestep_embedding_is_a_torch_library_op_under_the_platform_dispatch_key():
    from sglang.multimodal_gen.runtime.layers.torch_ops import ensure_registered, timestep_embedding

    assert ensure_registered() == current_platform.get_torch_library_dispatch_key() == "CPU"
    emb = timestep_embedding(torch.tensor([0, 10]), 8)
    assert emb.shape == (2, 8)
    torch.testing.assert_close(emb[0], torch.tensor([1.0] * 4 + [0.0] * 4))
