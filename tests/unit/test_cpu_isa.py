"""Which CPU kernel family and which GGUF arithmetic a CPU gets: decided from its flags (no compiler needed)."""

from __future__ import annotations

import pytest

from sglang.srt.layers.cpu_kernels import build
from sglang.srt.layers.cpu_kernels.isa import FAMILIES, IsaError, choose, supported
from sglang.srt.model_executor.weight_format import GGUF_MATH_BY_FAMILY, gguf_math

AVX2 = frozenset({"sse2", "avx", "avx2", "fma", "f16c"})
VNNI = AVX2 | {"avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512_vnni", "avx512_bf16"}
AMX = VNNI | {"amx_tile", "amx_int8", "amx_bf16"}


def test_the_best_family_the_cpu_has_is_chosen():
    assert choose(AVX2, None).family.name == "avx2"
    assert choose(VNNI, None).family.name == "avx512_vnni"
    assert choose(VNNI, "auto").family.name == "avx512_vnni"
    assert supported(VNNI) == ["avx512_vnni", "avx2"] and supported(AVX2) == ["avx2"]
    # AVX-512 without VNNI (Skylake-X) runs the avx2 family
    assert choose(AVX2 | {"avx512f", "avx512bw", "avx512vl", "avx512dq"}, None).family.name == "avx2"


def test_the_reason_names_the_flags_and_amx_is_reported_not_used():
    c = choose(AMX, None)
    assert c.family.name == "avx512_vnni"
    assert "avx512_vnni" in c.reason and "SGLANG_CPU_ISA unset" in c.reason and "amx_int8 present" in c.reason
    assert c.format().startswith("avx512_vnni (the best this CPU has: ")


def test_a_forced_family_is_honoured_when_the_cpu_has_it():
    c = choose(VNNI, "avx2")
    assert c.family.name == "avx2" and c.reason == "forced by SGLANG_CPU_ISA"


def test_a_forced_family_the_cpu_lacks_is_refused_naming_the_missing_flags():
    with pytest.raises(IsaError, match=r"SGLANG_CPU_ISA=avx512_vnni: this CPU lacks avx512_vnni, avx512bw, avx512dq, avx512f, avx512vl; "
                                       r"it runs avx2 \(unset SGLANG_CPU_ISA"):
        choose(AVX2, "avx512_vnni")
    with pytest.raises(IsaError, match="'amx' is not a kernel family: use auto or one of avx512_vnni, avx2"):
        choose(AMX, "amx")
    with pytest.raises(IsaError, match="need at least avx2, fma and f16c; run with --fused-decode off and --quantization none"):
        choose(frozenset({"sse2", "avx"}), None)


def test_every_family_is_built_with_its_own_flags_never_march_native():
    for fam in FAMILIES.values():
        assert not any("native" in f for f in fam.cflags)
    assert "-mavx512vnni" in FAMILIES["avx512_vnni"].cflags and not any("512" in f for f in FAMILIES["avx2"].cflags)


def test_the_kernel_cache_key_holds_the_cpu_feature_set(monkeypatch):
    # a cache copied to a CPU with other flags builds anew instead of loading a library that would fault
    import sglang.host

    fam = FAMILIES["avx2"]
    monkeypatch.setattr(sglang.host, "cpu_signature", lambda: "model name: A\nflags: avx2 fma f16c\n")
    a = build._build_key("c++", build.DECODE_SOURCE, fam)
    assert build._build_key("c++", build.DECODE_SOURCE, fam) == a
    monkeypatch.setattr(sglang.host, "cpu_signature", lambda: "model name: A\nflags: avx2 fma f16c avx512f\n")
    assert build._build_key("c++", build.DECODE_SOURCE, fam) != a
    assert build._build_key("c++", build.DECODE_SOURCE, FAMILIES["avx512_vnni"]) != build._build_key("c++", build.DECODE_SOURCE, fam)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_the_gguf_arithmetic_follows_the_measured_table_per_family(family):
    got = gguf_math(family, None)
    assert got.math == GGUF_MATH_BY_FAMILY[family] and family in got.reason and "SGLANG_CPU_GGUF_MATH=float32" in got.reason
    assert gguf_math(family, "float32").math == "float32" and gguf_math(family, " INT8 ").math == "int8"
    assert gguf_math(family, "mixed").math == "mixed"
    assert gguf_math(family, "auto") == got


def test_an_unknown_gguf_arithmetic_names_the_variable_and_the_choices():
    with pytest.raises(ValueError, match="SGLANG_CPU_GGUF_MATH='fp16': use auto, float32, int8 or mixed"):
        gguf_math("avx2", "fp16")
