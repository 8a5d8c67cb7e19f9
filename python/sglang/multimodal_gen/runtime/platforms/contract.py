"""The diffusion platform contract table (see :mod:`sglang.plugin_core.contract_table`)."""

from __future__ import annotations

from sglang.plugin_core.contract_table import ContractItem as C

_WORKER = "sglang.multimodal_gen.runtime.managers.gpu_worker"
_ARGS = "sglang.multimodal_gen.runtime.server_args"
_LOADER = "sglang.multimodal_gen.runtime.loader.model_loader"

DIFFUSION_CONTRACT: list[C] = [
    *(C(n, "identity", "Identity") for n in ("device_name", "device_type")),
    C("dispatch_key", "dispatch", "Active", ("sglang.multimodal_gen.runtime.platforms.interface",)),
    *(C(n, "identity", "Identity") for n in ("is_cuda", "is_rocm", "is_cuda_alike", "is_xpu", "is_mps", "is_npu", "is_musa", "is_cpu")),
    C("is_out_of_tree", "identity", "Identity"),
    C("init_backend", "initialization", "Active", ("sglang.multimodal_gen.runtime.platforms",)),
    C("apply_server_args_defaults", "configuration", "Active", (_ARGS,)),
    C("get_device", "device and memory", "Active", (_WORKER,)),
    C("set_device", "device and memory", "Active", (_WORKER,)),
    C("get_local_torch_device", "device and memory", "Active", (_WORKER,)),
    C("get_device_name", "device and memory", "Active", (_ARGS, _WORKER)),
    C("get_device_uuid", "device and memory", "Active", (_WORKER,)),
    C("get_device_total_memory", "device and memory", "Active", (_ARGS,)),
    C("get_available_gpu_memory", "device and memory", "Active", (_ARGS, _WORKER)),
    C("get_device_capability", "device and memory", "Active", (_WORKER,)),
    C("get_torch_distributed_backend_str", "distributed", "Active", (_WORKER,)),
    C("supports_distributed_device_id", "distributed", "Active", (_WORKER,)),
    C("get_device_communicator_cls", "communicator", "Compatibility", ("sglang.multimodal_gen.runtime.platforms.interface",)),
    C("get_all_to_all_communicator_cls", "distributed", "Active", ("sglang.multimodal_gen.runtime.distributed.communication",)),
    C("get_cpu_architecture", "distributed", "Active", (_WORKER,)),
    C("get_torch_library_dispatch_key", "dispatch and model", "Active", ("sglang.multimodal_gen.runtime.layers.torch_ops",)),
    C("get_dispatch_key_name", "dispatch and model", "Active", ("sglang.multimodal_gen.runtime.layers.custom_op",)),
    C("get_attn_backend_cls_str", "dispatch and model", "Active", ("sglang.multimodal_gen.runtime.layers.attention.selector",)),
    C("verify_model_arch", "dispatch and model", "Active", (_LOADER,)),
    C("optimize_vae", "dispatch and model", "Active", (_LOADER,)),
    C("get_compile_backend", "execution", "Active", (_LOADER,)),
    C("get_compile_options", "execution", "Active", (_LOADER,)),
    C("inference_mode", "execution", "Active", ("sglang.multimodal_gen.runtime.pipelines.digits_pipeline",)),
    C("seed_everything", "execution", "Active", (_WORKER,)),
    C("enable_dit_layerwise_offload_by_default", "execution", "Active", (_ARGS,)),
]


def diffusion_classes() -> tuple[type, ...]:
    from sglang.multimodal_gen.runtime.platforms.interface import Platform

    return (Platform,)
