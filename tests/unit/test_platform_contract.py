"""The platform contract is checked when a subclass is defined."""

from __future__ import annotations

import pytest

from sglang.srt.platforms import CpuArchEnum, DeviceCapability, DeviceMixin, PlatformEnum, SRTPlatform


def test_undeclared_public_method_is_a_type_error():
    with pytest.raises(TypeError, match=r"get_default_attn_backend is not part of the SRT platform interface: rename it to '_get_default_attn_backend'"):

        class Typo(SRTPlatform):
            def get_default_attn_backend(self) -> str:
                return "x"


def test_private_helpers_are_allowed():
    class Vendor(SRTPlatform):
        def _probe(self) -> bool:
            return True

    assert Vendor()._probe()


def test_public_data_attributes_are_allowed():
    class Vendor(SRTPlatform):
        device_name = "npu"
        vendor_revision = 3

    assert Vendor().vendor_revision == 3


def test_override_missing_a_base_parameter_is_a_type_error():
    with pytest.raises(TypeError, match=r"get_device_total_memory overrides SRT platform.get_device_total_memory incompatibly: it does not accept the interface's parameter 'device_id'"):

        class Bad(SRTPlatform):
            def get_device_total_memory(self) -> int:
                return 0


def test_override_dropping_a_default_is_a_type_error():
    with pytest.raises(TypeError, match="needs a default"):

        class Bad(SRTPlatform):
            def get_device_name(self, device_id) -> str:
                return ""


def test_override_requiring_an_extra_parameter_is_a_type_error():
    with pytest.raises(TypeError, match="requires the extra parameter 'flavour'"):

        class Bad(SRTPlatform):
            def init_backend(self, flavour) -> None:
                pass


def test_override_with_varargs_is_compatible():
    class Ok(SRTPlatform):
        def get_compile_backend(self, *args, **kwargs) -> str:
            return "eager"

    assert Ok().get_compile_backend("max-autotune") == "eager"


def test_device_mixin_subclasses_are_checked_too():
    with pytest.raises(TypeError, match="not part of the SRT platform interface"):

        class Mixin(DeviceMixin):
            def warm_up(self) -> None:
                pass


def test_vendor_mixin_methods_win_over_the_interface_in_the_documented_layout():
    class MyDeviceMixin(DeviceMixin):
        _enum = PlatformEnum.OOT
        device_name = "my_device"
        device_type = "my_device"

        def get_device_total_memory(self, device_id=0) -> int:
            return 123

    class MySRTPlatform(SRTPlatform, MyDeviceMixin):
        def get_default_attention_backend(self) -> str:
            return "torch_native"

    p = MySRTPlatform()
    assert p.get_device_total_memory() == 123
    assert p.is_out_of_tree() and not p.is_cuda()
    assert repr(p) == "MySRTPlatform(device=my_device)"


def test_documented_defaults():
    p = SRTPlatform()
    assert (p.support_cuda_graph(), p.support_piecewise_cuda_graph(), p.supports_fp8()) == (False, False, False)
    assert p.get_compile_backend() == "inductor" and p.get_dispatch_key_name() == "native"
    assert p.is_pin_memory_available() is False and p.get_communicator_class() is None
    assert p.empty_cache() is None and p.synchronize() is None and p.verify_quantization("fp8") is None
    assert p.apply_server_args_defaults(object()) is None and p.init_backend() is None
    assert p._enum is PlatformEnum.UNSPECIFIED and not p.is_out_of_tree()
    assert p.get_cpu_architecture() in (CpuArchEnum.X86, CpuArchEnum.ARM, CpuArchEnum.UNSPECIFIED)
    for name in [
        "get_default_attention_backend", "get_graph_runner_cls", "get_mha_kv_pool_cls", "get_mla_kv_pool_cls",
        "get_dsa_kv_pool_cls", "get_paged_allocator_cls", "get_piecewise_backend_cls", "get_torch_distributed_backend_str",
    ]:
        with pytest.raises(NotImplementedError, match=name):
            getattr(p, name)()
    for name in ["get_device_name", "get_device_uuid", "get_device_capability", "get_device_total_memory", "get_available_memory"]:
        with pytest.raises(NotImplementedError):
            getattr(p, name)(0)
    with pytest.raises(NotImplementedError):
        p.get_quantization_config("fp8")


def test_is_cuda_alike_covers_cuda_rocm_musa():
    def make(enum):
        return type("P", (SRTPlatform,), {"_enum": enum})()

    assert [make(e).is_cuda_alike() for e in (PlatformEnum.CUDA, PlatformEnum.ROCM, PlatformEnum.MUSA, PlatformEnum.CPU, PlatformEnum.OOT)] == [True, True, True, False, False]


def test_device_capability_orders_and_encodes():
    assert DeviceCapability(8, 0) < DeviceCapability(9, 0) < DeviceCapability(9, 1)
    assert DeviceCapability(9, 0).as_version_str() == "9.0" and DeviceCapability(8, 6).to_int() == 86


def test_capabilities_are_a_frozen_set_of_flags_all_false_by_default():
    import dataclasses

    from sglang.srt.platforms import PlatformCapabilities, SRTPlatform

    caps = SRTPlatform.capabilities
    flags = {f.name for f in dataclasses.fields(PlatformCapabilities)}
    assert {"supports_triton", "supports_cuda_graph", "supports_torch_compile", "supports_fp8", "supports_pin_memory"} <= flags
    assert not any(getattr(caps, f) for f in flags)
    with pytest.raises(dataclasses.FrozenInstanceError):
        caps.supports_triton = True  # type: ignore[misc]


def test_a_vendor_declares_capabilities_on_its_subclass_and_the_engine_reads_them():
    from sglang.srt.platforms import PlatformCapabilities, SRTPlatform

    class Vendor(SRTPlatform):  # the contract check accepts the attribute
        capabilities = PlatformCapabilities(supports_triton=True, supports_cuda_graph=True, supports_fp8=True)

    v = Vendor()
    assert v.capabilities.supports_triton and not v.capabilities.supports_pin_memory
    assert v.support_cuda_graph() and v.supports_fp8()  # the capability methods answer from the flags
    assert not SRTPlatform().support_cuda_graph()


def test_built_in_platforms_declare_their_capabilities():
    from sglang.srt.platforms.cpu import CpuSRTPlatform
    from sglang.srt.platforms.cuda import CudaSRTPlatform
    from sglang.srt.platforms.xpu import XpuSRTPlatform

    assert CudaSRTPlatform.capabilities.supports_triton and CudaSRTPlatform.capabilities.supports_pin_memory
    assert XpuSRTPlatform.capabilities.supports_pin_memory
    cpu = CpuSRTPlatform()
    assert not cpu.capabilities.supports_pin_memory and not cpu.is_pin_memory_available()
