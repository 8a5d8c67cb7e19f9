"""The SRT platform contract table (see :mod:`sglang.plugin_core.contract_table`)."""

from __future__ import annotations

from sglang.plugin_core.contract_table import ContractItem as C

_RUNNER = "sglang.srt.model_executor.model_runner"
_IDENTITY = tuple(
    C(n, "identity", "Identity")
    for n in ("device_name", "device_type", "is_cuda", "is_rocm", "is_npu", "is_cpu", "is_xpu", "is_musa", "is_tpu", "is_mps", "is_cuda_alike")
)

SRT_CONTRACT: list[C] = [
    *_IDENTITY,
    C("is_out_of_tree", "identity", "Identity"),
    C("get_device", "device", "Active", (_RUNNER,), "Planned"),
    C("set_device", "device", "Active", (_RUNNER,), "Planned"),
    C("get_device_name", "device", "Planned"),
    C("get_device_uuid", "device", "Planned"),
    C("get_device_capability", "device", "Planned"),
    C("empty_cache", "device", "Planned"),
    C("synchronize", "device", "Planned"),
    C("get_device_total_memory", "memory", "Active", (_RUNNER,)),
    C("get_available_memory", "memory", "Active", (_RUNNER,), "Planned"),
    C("get_current_memory_usage", "memory", "Active", (_RUNNER,)),
    C("is_pin_memory_available", "memory", "Active", (_RUNNER,)),
    C("get_torch_distributed_backend_str", "distributed", "Active", (_RUNNER,), "Planned"),
    C("get_communicator_class", "distributed", "Planned"),
    C("get_ray_bundle", "distributed", "Active", ("sglang.srt.ray.engine",)),
    C("inference_mode", "execution", "Active", (_RUNNER,), "Planned"),
    C("seed_everything", "execution", "Planned"),
    C("verify_quantization", "execution", "Active", (_RUNNER,), "Planned"),
    C("get_cpu_architecture", "execution", "Planned"),
    C("capabilities", "capability", "Active", (_RUNNER,)),
    C("support_cuda_graph", "capability", "Active", (_RUNNER,)),
    C("support_piecewise_cuda_graph", "capability", "Planned"),
    C("supports_fp8", "capability", "Planned"),
    C("get_default_attention_backend", "factory", "Active", (_RUNNER,)),
    C("get_graph_runner_cls", "factory", "Active", (_RUNNER,)),
    C("get_mha_kv_pool_cls", "factory", "Active", (_RUNNER,)),
    C("get_mla_kv_pool_cls", "factory", "Planned"),
    C("get_dsa_kv_pool_cls", "factory", "Planned"),
    C("get_paged_allocator_cls", "factory", "Active", (_RUNNER,)),
    C("get_quantization_config", "factory", "Active", (_RUNNER,)),
    C("get_piecewise_backend_cls", "factory", "Planned"),
    C("get_compile_backend", "factory", "Active", (_RUNNER,)),
    C("get_dispatch_key_name", "factory", "Planned"),
    C("apply_server_args_defaults", "lifecycle", "Active", ("sglang.srt.arg_groups.pipeline",)),
    C("init_backend", "lifecycle", "Active", ("sglang.srt.platforms",)),
]


def srt_classes() -> tuple[type, ...]:
    from sglang.srt.platforms.device_mixin import DeviceMixin
    from sglang.srt.platforms.interface import SRTPlatform

    return (SRTPlatform, DeviceMixin)
