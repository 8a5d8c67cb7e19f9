"""The platform contract is checked when a platform class is defined (vendor mixins included)."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

import sglang
from sglang.multimodal_gen.runtime.platforms import DiffusionPlatformContractError, Platform
from sglang.plugin_core.contract import signature_problem
from sglang.srt.platforms import (
    CpuArchEnum,
    DeviceCapability,
    DeviceMixin,
    PlatformCapabilities,
    PlatformContractError,
    PlatformEnum,
    PlatformError,
    SRTPlatform,
)


def test_undeclared_public_method_is_a_type_error():
    with pytest.raises(TypeError, match=r"get_default_attn_backend is not part of the SRT platform interface: rename it to '_get_default_attn_backend'"):

        class Typo(SRTPlatform):
            def get_default_attn_backend(self) -> str:
                return "x"


def test_every_problem_of_a_class_is_named_in_one_error():
    # the names a ported plugin carried over from an older core, plus one bad override: all reported at once
    stale = ("page_size_default", "get_nsa_kv_pool_cls", "supports_torch_compile", "use_pynccl", "fallback_rope", "coordinator_device")
    with pytest.raises(PlatformContractError) as info:

        class Ported(SRTPlatform):
            page_size_default = 32

            def get_nsa_kv_pool_cls(self) -> type:
                return object

            @classmethod
            def supports_torch_compile(cls) -> bool:
                return True

            @staticmethod
            def use_pynccl(backend: str) -> bool:
                return False

            def fallback_rope(self, *, head_size: int) -> bool:
                return False

            @property
            def coordinator_device(self) -> None:
                return None

            def is_pin_memory_available(self) -> bool:
                return False

    msg = str(info.value)
    assert isinstance(info.value, TypeError) and isinstance(info.value, PlatformError)
    assert "Ported does not match the SRT platform interface (7 problems" in msg
    for name in stale:
        assert f"  - {name} is not part of the SRT platform interface: rename it to '_{name}'" in msg
    assert "is_pin_memory_available overrides SRT platform.is_pin_memory_available incompatibly" in msg and "'device'" in msg


def test_private_helpers_and_declared_values_are_allowed():
    class Vendor(SRTPlatform):
        device_name = "npu"
        capabilities = PlatformCapabilities(supports_triton=True)
        _vendor_revision = 3

        def _probe(self) -> bool:
            return True

    assert Vendor()._probe() and Vendor._vendor_revision == 3 and Vendor.capabilities.supports_triton


def test_an_undeclared_public_value_is_a_type_error():
    # core never reads it, so a vendor setting it expects an effect that never happens
    with pytest.raises(TypeError, match="vendor_revision is not part of the SRT platform interface"):

        class Vendor(SRTPlatform):
            vendor_revision = 3


def test_a_value_where_the_interface_declares_a_method_is_a_type_error():
    with pytest.raises(TypeError, match=r"is_cuda is a bool where the SRT platform interface declares a method") as info:

        class Vendor(SRTPlatform):
            is_cuda = True

            @property
            def is_cpu(self) -> bool:
                return False

    assert "is_cpu is a property where" in str(info.value)


def test_a_device_mixin_is_checked_where_it_is_mixed_in_in_either_order():
    class VendorMixin(DeviceMixin):  # not a platform yet: defining it is fine
        def vendor_only(self) -> int:
            return 1

        def get_device_total_memory(self) -> int:  # drops device_id
            return 0

    assert VendorMixin().vendor_only() == 1
    for bases in ((SRTPlatform, VendorMixin), (VendorMixin, SRTPlatform)):
        with pytest.raises(PlatformContractError) as info:
            type("P", bases, {})
        msg = str(info.value)
        assert "(2 problems" in msg, bases
        assert "vendor_only (from test_platform_contract.test_a_device_mixin_is_checked_where_it_is_mixed_in_in_either_order.<locals>.VendorMixin) is not part" in msg
        assert "get_device_total_memory (from " in msg and "does not accept the interface's parameter 'device_id'" in msg


def test_a_name_defined_by_the_platform_and_its_mixin_is_reported_once():
    class VendorMixin(DeviceMixin):
        def warm_up(self) -> None:
            pass

    with pytest.raises(TypeError) as info:

        class P(SRTPlatform, VendorMixin):
            def warm_up(self) -> None:
                pass

    assert str(info.value).count("warm_up") == 2  # the bullet and its suggested '_warm_up'
    assert "(1 problem;" in str(info.value)


def test_a_renamed_positional_parameter_is_accepted():
    # the engine passes these positionally (test_engine_calls_interface_methods_positionally), so names do not matter
    class Vendor(SRTPlatform):
        def get_device(self, device_id=0) -> str:
            return f"dev:{device_id}"

        def get_quantization_config(self, quant: str | None) -> str | None:
            return quant

        def get_device_total_memory(self, idx: int = 0) -> int:
            return 7 + idx

        @classmethod
        def seed_everything(cls, seed=None) -> None:
            pass

    v = Vendor()
    assert (v.get_device(2), v.get_quantization_config("fp8"), v.get_device_total_memory(1)) == ("dev:2", "fp8", 8)


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


def test_override_requiring_an_extra_keyword_parameter_is_a_type_error():
    with pytest.raises(TypeError, match="requires the extra keyword parameter 'must'"):

        class Bad(SRTPlatform):
            def get_compile_backend(self, mode=None, extra=None, *, must) -> str:
                return "x"


def test_keyword_only_parameters_keep_their_names():
    def base(self, x, *, flag=False):
        pass

    def renamed(self, y, *, flg=False):
        pass

    def kept(self, y, *, flag=False, extra=None):
        pass

    assert signature_problem(base, renamed) == "it does not accept the keyword parameter 'flag'"
    assert signature_problem(base, kept) is None


def test_override_with_varargs_is_compatible():
    class Ok(SRTPlatform):
        def get_compile_backend(self, *args, **kwargs) -> str:
            return "eager"

    assert Ok().get_compile_backend("max-autotune") == "eager"


def test_diffusion_platform_uses_the_same_rules():
    class Mine(Platform):
        def get_device(self, idx: int) -> str:  # renamed positional: accepted
            return f"d{idx}"

    assert Mine().get_device(1) == "d1"
    with pytest.raises(DiffusionPlatformContractError) as info:

        class Bad(Platform):
            vae_tiling = True

            def warm_up(self) -> None:
                pass

            def get_device_name(self) -> str:
                return ""

    msg = str(info.value)
    assert isinstance(info.value, TypeError) and "(3 problems" in msg
    assert "vae_tiling is not part" in msg and "warm_up is not part" in msg and "get_device_name overrides" in msg


def _positional_names() -> dict[str, set[str]]:
    """For each interface method, the names of its positional parameters (after self)."""
    out: dict[str, set[str]] = {}
    for cls in (SRTPlatform, DeviceMixin, Platform):
        for name, attr in cls.__dict__.items():
            if name.startswith("_") or not callable(attr):
                continue
            params = list(inspect.signature(attr).parameters.values())[1:]
            out.setdefault(name, set()).update(p.name for p in params if p.kind is p.POSITIONAL_OR_KEYWORD)
    return out


def test_engine_calls_interface_methods_positionally():
    """A vendor may rename a positional parameter, so no caller may pass one by keyword."""
    names = _positional_names()
    root = Path(sglang.__file__).parent
    bad = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in names):
                continue
            for kw in node.keywords:
                if kw.arg is None or kw.arg in names[node.func.attr]:
                    bad.append(f"{path.relative_to(root)}:{node.lineno}: {ast.unparse(node)}")
    assert not bad, "pass interface parameters positionally:\n" + "\n".join(bad)


def test_the_positional_scan_finds_a_keyword_call():
    names = _positional_names()
    call = ast.parse("current_platform.get_device_total_memory(device_id=0)").body[0].value
    assert call.func.attr in names and call.keywords[0].arg in names[call.func.attr]


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
