"""Which CPU kernel family and which GGUF arithmetic a CPU gets: decided from its flags (no compiler needed)."""

from __future__ import annotations

import pytest

from sglang.srt.layers.cpu_kernels import build, isa
from sglang.srt.layers.cpu_kernels.isa import (
    BUCKETS,
    FAMILIES,
    MEASURED,
    IsaError,
    Measured,
    choose,
    eligible,
    gguf_math,
    pick,
    supported,
)

AVX2 = frozenset({"sse2", "avx", "avx2", "fma", "f16c"})
VNNI = AVX2 | {"avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512_vnni", "avx512_bf16"}
AMX = VNNI | {"amx_tile", "amx_int8", "amx_bf16"}


def test_the_best_family_the_cpu_has_is_chosen():
    assert choose(AVX2, None).family.name == "avx2"
    assert choose(VNNI, None).family.name == "avx512_vnni"
    assert choose(VNNI, "auto").family.name == "avx512_vnni"
    assert supported(VNNI) == ["avx512_vnni", "avx2"] and supported(AVX2) == ["avx2"]
    assert supported(AMX) == ["amx", "avx512_vnni", "avx2"]
    # AMX tiles without AVX512-BF16, or tiles without the bfloat16 ones: the AVX-512 family
    assert choose(VNNI - {"avx512_bf16"} | {"amx_tile", "amx_bf16"}, None).family.name == "avx512_vnni"
    assert choose(VNNI | {"amx_tile", "amx_int8"}, None).family.name == "avx512_vnni"
    # AVX-512 without VNNI (Skylake-X) runs the avx2 family
    assert choose(AVX2 | {"avx512f", "avx512bw", "avx512vl", "avx512dq"}, None).family.name == "avx2"


def test_an_amx_cpu_runs_the_amx_family_and_the_reason_names_the_flags():
    c = choose(AMX, None)
    assert c.family.name == "amx"
    assert "amx_bf16, amx_int8, amx_tile" in c.reason and "SGLANG_CPU_ISA unset" in c.reason
    assert c.format().startswith("amx (the best this CPU has: ")
    # its library is the AVX-512 one's sources and flags plus the tile instructions (amx_int16.h), built apart
    assert FAMILIES["amx"].cflags == (*FAMILIES["avx512_vnni"].cflags, "-mamx-tile", "-mamx-int8")
    assert FAMILIES["amx"].features > FAMILIES["avx512_vnni"].features | {"amx_int8"}
    assert choose(AMX, "avx512_vnni").family.name == "avx512_vnni"


def test_a_forced_family_is_honoured_when_the_cpu_has_it():
    c = choose(VNNI, "avx2")
    assert c.family.name == "avx2" and c.reason == "forced by SGLANG_CPU_ISA"


def test_a_forced_family_the_cpu_lacks_is_refused_naming_the_missing_flags():
    with pytest.raises(IsaError, match=r"SGLANG_CPU_ISA=avx512_vnni: this CPU lacks avx512_vnni, avx512bw, avx512dq, avx512f, avx512vl; "
                                       r"it runs avx2 \(unset SGLANG_CPU_ISA"):
        choose(AVX2, "avx512_vnni")
    with pytest.raises(IsaError, match="'amx512' is not a kernel family: use auto or one of amx, avx512_vnni, avx2"):
        choose(AMX, "amx512")
    with pytest.raises(IsaError, match=r"SGLANG_CPU_ISA=amx: this CPU lacks amx_bf16, amx_int8, amx_tile; it runs avx512_vnni, avx2"):
        choose(VNNI, "amx")
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


EPYC = "AMD EPYC"
# a made-up run (ms per bucket 1 / 2-8 / 9-32 / >32): mixed 1.02x at 1 row (a tie), 1.25x at 2-8, 1.10x at 9-32,
# 0.89x above 32; int8 fastest everywhere but under the quality bar
RUN = Measured(EPYC, "bench", {"float32": (10.0, 40.0, 100.0, 400.0), "mixed": (9.8, 32.0, 90.9, 450.0),
                               "int8": (7.0, 20.0, 60.0, 250.0)})


PASSING = {"float32": (100.0,) * 4, "mixed": (99.4,) * 4, "int8": (96.5,) * 4}  # mixed measured at every size


@pytest.fixture
def mixed_passes(monkeypatch):
    monkeypatch.setattr(isa, "AGREEMENT", PASSING)
    monkeypatch.setattr(isa, "HELD", {})


def test_an_arithmetic_is_a_candidate_where_it_meets_the_quality_bar():
    assert eligible(PASSING) == ["float32", "mixed"]  # int8: 96.5% < 98%
    assert eligible({"float32": (100.0,) * 4, "mixed": (99.0,) * 4, "int8": (98.5,) * 4}) == ["float32", "mixed", "int8"]
    assert eligible({"float32": (100.0,) * 4, "mixed": (99.0, 99.0, 97.9, 99.0)}) == ["float32"]  # under the bar in one
    # bucket by bucket: a candidate where it was measured to meet the bar
    under_in_one = {"float32": (100.0,) * 4, "mixed": (99.0, None, 97.9, 99.0)}
    assert [eligible(under_in_one, bucket=b) for b in range(4)] == [["float32", "mixed"], ["float32"], ["float32"], ["float32", "mixed"]]
    assert eligible({"float32": (100.0,) * 4, "mixed": (99.0, None, 99.0, 99.0)}) == ["float32"]  # not measured in one


def test_a_bucket_goes_to_its_clear_winner_and_a_tie_to_the_usual_winner():
    # per-bucket candidates: mixed out at 2-8, so float32 takes it (a lone candidate wins nothing); mixed and float32
    # then won one bucket each, so the 1-row tie goes to the most exact
    assert pick(RUN.ms, (["float32", "mixed"], ["float32"], ["float32", "mixed"], ["float32", "mixed"])) == \
        ("float32", "float32", "mixed", "float32")
    assert pick(RUN.ms, (["float32"], ["float32"], ["float32"], ["int8"])) == ("float32", "float32", "float32", "int8")
    allowed = ["float32", "mixed"]
    # 1 row: a tie (2%), taken by mixed, which won 2-8 and 9-32 outright; >32: float32 wins outright
    assert pick(RUN.ms, allowed) == ("mixed", "mixed", "mixed", "float32")
    assert pick(RUN.ms, ["float32", "mixed", "int8"]) == ("int8",) * 4  # allowed, int8 is the fastest by far
    # margin 1.2: only 2-8 is won outright (by mixed); every other bucket ties and goes to mixed
    assert pick(RUN.ms, allowed, margin=1.2) == ("mixed",) * 4
    tie = {"float32": (10.0, 10.0, 10.0, 10.0), "mixed": (10.1, 9.9, 10.2, 9.8)}
    assert pick(tie, allowed) == ("float32",) * 4  # nothing won outright: the exact weights
    assert pick({"float32": (1.0,) * 4}, allowed) == ("float32",) * 4  # mixed not measured: not chosen
    assert pick({}, allowed) == ("float32",) * 4


@pytest.mark.parametrize("rows,bucket", [(1, 0), (2, 1), (8, 1), (9, 2), (32, 2), (33, 3), (4096, 3)])
def test_each_batch_size_runs_its_buckets_arithmetic(monkeypatch, mixed_passes, rows, bucket):
    monkeypatch.setitem(MEASURED, "avx512_vnni", (RUN,))
    slow_at_1 = Measured(EPYC, "bench", {**RUN.ms, "mixed": (11.0, 32.0, 90.9, 450.0)})
    monkeypatch.setitem(MEASURED, "avx512_vnni", (slow_at_1,))
    plan = gguf_math("avx512_vnni", EPYC, None)
    assert plan.by_bucket == ("float32", "mixed", "mixed", "float32")
    assert plan.for_batch(rows) == plan.by_bucket[bucket]
    assert plan.tiers() == [(1, "float32"), (32, "mixed"), (0, "float32")]  # neighbouring buckets merged
    assert plan.format().startswith("by batch rows 1: float32, 2-8: mixed, 9-32: mixed, >32: float32 (fastest measured on this CPU")


def test_a_cpu_model_measured_itself_wins_over_another_of_its_family(monkeypatch, mixed_passes):
    other = Measured("Intel Xeon", "bench", {"float32": (1.0,) * 4, "mixed": (0.5,) * 4})
    monkeypatch.setitem(MEASURED, "avx512_vnni", (RUN, other))
    assert gguf_math("avx512_vnni", "Intel Xeon", None).by_bucket == ("mixed",) * 4
    mine = gguf_math("avx512_vnni", EPYC, None)
    assert mine.by_bucket == ("mixed", "mixed", "mixed", "float32") and "this CPU" in mine.reason
    elsewhere = gguf_math("avx512_vnni", "AMD Ryzen", None)  # not measured: the family's first run
    assert elsewhere.by_bucket == mine.by_bucket and "AMD EPYC, the same family" in elsewhere.reason


def test_two_generations_of_one_model_name_are_told_apart_by_their_family_and_model(tmp_path, monkeypatch, mixed_passes):
    from sglang.host import cpu_model, cpu_model_name

    def cpuinfo(family: int, model: int) -> str:
        block = "processor\t: {}\nvendor_id\t: AuthenticAMD\ncpu family\t: {}\nmodel\t\t: {}\nmodel name\t: AMD EPYC\n"
        path = tmp_path / f"cpuinfo-{family}-{model}"
        # a blank line first, then two processors: the first processor's block counts
        path.write_text("\n" + block.format(0, family, model) + "\n" + block.format(1, 17, 99))
        return str(path)

    zen1, zen2 = cpu_model(cpuinfo(23, 1)), cpu_model(cpuinfo(23, 49))
    assert (zen1, zen2) == ("AMD EPYC (family 23 model 1)", "AMD EPYC (family 23 model 49)")
    assert cpu_model_name(cpuinfo(23, 1)) == "AMD EPYC"
    unnumbered_first = tmp_path / "unnumbered-first"  # numbers only in the second block: not the first CPU's
    unnumbered_first.write_text("processor\t: 0\nmodel name\t: AMD EPYC\n\nprocessor\t: 1\ncpu family\t: 23\nmodel\t\t: 1\n")
    assert cpu_model(str(unnumbered_first)) == "AMD EPYC"
    bare = tmp_path / "bare"
    bare.write_text("processor\t: 0\nmodel name\t: Some CPU\n")
    assert cpu_model(str(bare)) == "Some CPU"  # no numbers listed: the bare name
    # each generation's own run decides for it; a third model of the family falls back to the family's first run
    fast = Measured(zen2, "bench", {"float32": (10.0,) * 4, "mixed": (5.0,) * 4})
    slow = Measured(zen1, "bench", {"float32": (10.0,) * 4, "mixed": (12.0, 12.0, 5.0, 5.0)})
    monkeypatch.setitem(MEASURED, "avx2", (fast, slow))
    assert isa.for_cpu(MEASURED["avx2"], zen1) is slow and isa.for_cpu(MEASURED["avx2"], "AMD EPYC") is fast
    assert isa.for_cpu((), zen1) is None
    assert gguf_math("avx2", zen1, None).by_bucket == ("float32", "float32", "mixed", "mixed")
    assert gguf_math("avx2", zen2, None).by_bucket == ("mixed",) * 4


def test_the_shipped_runs_name_each_cpu_model_once_with_its_numbers():
    import re

    for runs in MEASURED.values():
        assert len({r.cpu for r in runs}) == len(runs)
        assert all(re.fullmatch(r".+ \(family \d+ model \d+\)", r.cpu) for r in runs), [r.cpu for r in runs]


def test_a_family_without_a_measurement_keeps_the_exact_weights(monkeypatch, mixed_passes):
    monkeypatch.setitem(MEASURED, "avx2", ())
    plan = gguf_math("avx2", EPYC, None)
    assert plan.by_bucket == ("float32",) * 4 and plan.tiers() == [(0, "float32")]
    assert plan.format().startswith("float32 math (no measurement for the avx2 family")


def test_an_arithmetic_runs_only_where_it_was_measured_to_meet_the_bar(monkeypatch):
    monkeypatch.setitem(MEASURED, "avx512_vnni", (RUN,))  # mixed faster at 2-32 rows, but not measured at 9-32
    monkeypatch.setattr(isa, "AGREEMENT", {"float32": (100.0,) * 4, "mixed": (99.4, 99.4, None, 99.4), "int8": (None, 96.48, None, 96.48)})
    monkeypatch.setattr(isa, "HELD", {})
    # 2-8: mixed outright; 9-32: float32 alone (no win); >32: float32 outright; 1 row ties and goes to the most exact
    assert gguf_math("avx512_vnni", EPYC, None).by_bucket == ("float32", "mixed", "float32", "float32")


def test_with_one_candidate_the_fastest_step_does_not_matter(monkeypatch):
    monkeypatch.setitem(MEASURED, "avx512_vnni", (RUN,))
    monkeypatch.setattr(isa, "AGREEMENT", {"float32": (100.0,) * 4, "mixed": (97.4, 97.4, None, 97.4), "int8": (None, 96.48, None, 96.48)})
    monkeypatch.setattr(isa, "HELD", {})
    plan = gguf_math("avx512_vnni", EPYC, None)
    assert plan.by_bucket == ("float32",) * 4
    assert "the only candidate (top-1 agreement >= 98% measured at each batch size, not held): int16: not measured at 1, " \
           "2-8, 9-32, >32 rows; mixed: 97.4% at 1 rows, " \
           "97.4% at 2-8 rows, 97.4% at >32 rows, not measured at 9-32 rows; mixed16: not measured at 1, 2-8, 9-32, >32 rows; " \
           "bf16: not measured at 1, 2-8, 9-32, >32 rows; int8: 96.48% at 2-8 rows, 96.48% at >32 rows, not measured at 1, " \
           "9-32 rows;" in plan.reason


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_the_shipped_table_only_picks_arithmetics_that_meet_the_bar(family):
    # the shipped quality figures, holds and step times together: every bucket runs an arithmetic measured to pass
    for run in MEASURED[family]:
        assert set(run.ms) <= set(isa.MATHS) and all(len(v) == len(BUCKETS) for v in run.ms.values())
        plan = gguf_math(family, run.cpu, None)
        assert all(m in eligible(bucket=b) for b, m in enumerate(plan.by_bucket))
        assert plan.by_bucket == isa.measured_plan(run.ms, [[m for m in eligible(bucket=b) if m not in isa.HELD] for b in range(len(BUCKETS))])
        for m, partners in isa.MIXES_ONLY_WITH.items():  # a listed arithmetic only beside its partners
            assert m not in plan.by_bucket or set(plan.by_bucket) <= {m, *partners}, plan


def test_a_held_arithmetic_stays_out_of_auto_with_its_reason_but_can_be_forced(monkeypatch):
    monkeypatch.setitem(MEASURED, "avx512_vnni", (RUN,))
    monkeypatch.setattr(isa, "AGREEMENT", PASSING)
    monkeypatch.setattr(isa, "HELD", {"mixed": "held for review"})
    plan = gguf_math("avx512_vnni", EPYC, None)
    assert plan.by_bucket == ("float32",) * 4 and "int16: not measured at 1, 2-8, 9-32, >32 rows; mixed: held for review; mixed16: not measured at 1, 2-8, 9-32, >32 rows; bf16: not measured at 1, 2-8, 9-32, >32 rows; int8: 96.5% at 1 rows" in plan.reason
    assert gguf_math("avx512_vnni", EPYC, "mixed").by_bucket == ("mixed",) * 4
    monkeypatch.setattr(isa, "HELD", {})
    assert gguf_math("avx512_vnni", EPYC, None).by_bucket == ("mixed", "mixed", "mixed", "float32")


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_a_forced_arithmetic_runs_at_every_batch_size(family):
    for value, want in (("float32", "float32"), (" INT8 ", "int8"), ("mixed", "mixed")):
        plan = gguf_math(family, EPYC, value)
        assert plan.by_bucket == (want,) * 4 and plan.format() == f"{want} math (forced by SGLANG_CPU_GGUF_MATH)"
    assert gguf_math(family, EPYC, "auto") == gguf_math(family, EPYC, None)


def test_an_unknown_gguf_arithmetic_names_the_variable_and_the_choices():
    with pytest.raises(ValueError, match="SGLANG_CPU_GGUF_MATH=.fp16.: use auto or one of float32, int16, mixed, mixed16, bf16, int8"):
        gguf_math("avx2", EPYC, "fp16")


def test_the_kv_cache_is_bfloat16_under_auto_exactly_when_some_bucket_quantizes_activations():
    from sglang.srt.layers.cpu_kernels.isa import MathPlan, auto_kv_dtype

    assert auto_kv_dtype(MathPlan(("float32",) * 4, "exact")) == "float32"  # SGLANG_CPU_GGUF_MATH=float32 stays exact
    assert auto_kv_dtype(MathPlan(("mixed",) * 4, "fast")) == "bfloat16"
    assert auto_kv_dtype(MathPlan(("float32", "mixed", "mixed", "float32"), "by size")) == "bfloat16"
    assert auto_kv_dtype(gguf_math("avx2", "AMD EPYC", "float32")) == "float32"


ZEN1, ZEN2, ZEN4 = "AMD EPYC (family 23 model 1)", "AMD EPYC (family 23 model 49)", "AMD EPYC (family 25 model 17)"


def test_the_one_row_weight_prefetch_follows_the_cpu_models_own_measurement():
    from sglang.srt.layers.cpu_kernels.isa import format_prefetch, weight_prefetch

    assert weight_prefetch("avx2", ZEN1, None) == (2048, 1, "measured on this CPU; SGLANG_CPU_WEIGHT_PREFETCH=0 turns it off, =N sets N bytes")
    assert weight_prefetch("avx2", ZEN2, "auto")[0] == 0  # bandwidth-bound at one row: prefetch bought nothing
    # a model not measured takes its family's first run, and says whose
    n, rows, why = weight_prefetch("avx2", "Intel Xeon (family 6 model 85)", None)
    assert n == 0 and why.startswith(f"measured on {ZEN2}, the same family")
    assert weight_prefetch("avx512_vnni", ZEN4, None) == (4096, 8, "measured on this CPU; SGLANG_CPU_WEIGHT_PREFETCH=0 turns it off, =N sets N bytes")
    assert weight_prefetch("avx512_vnni", "Intel Xeon (family 6 model 85)", None)[:2] == (4096, 8)  # its family's run
    assert weight_prefetch("a_family_with_no_runs", ZEN1, None) == (
        0, 1, "not measured for the a_family_with_no_runs family; SGLANG_CPU_WEIGHT_PREFETCH=2048 tries it")
    assert format_prefetch(weight_prefetch("avx2", ZEN1, None)).startswith("2048 bytes ahead (measured on this CPU")
    assert format_prefetch(weight_prefetch("avx2", ZEN2, None)).startswith("off (")
    # the AMX Xeon prefetches passes of up to 8 rows (measured there), Zen 1 one-row passes only
    xeon = weight_prefetch("amx", isa.MEASURED["amx"][0].cpu, None)
    assert (xeon.bytes, xeon.rows) == (4096, 8) and format_prefetch(xeon).startswith("4096 bytes ahead in passes of up to 8 rows (")


def test_a_forced_weight_prefetch_is_taken_and_a_malformed_one_names_the_variable():
    from sglang.srt.layers.cpu_kernels.isa import weight_prefetch

    assert weight_prefetch("avx2", ZEN2, " 1024 ") == (1024, 1, "forced by SGLANG_CPU_WEIGHT_PREFETCH")
    assert weight_prefetch("amx", isa.MEASURED["amx"][0].cpu, "1024").rows == 8  # the passes the table names
    assert weight_prefetch("avx2", ZEN1, "0")[0] == 0
    assert weight_prefetch("avx512_vnni", ZEN1, "65536")[0] == 65536
    for bad in ("on", "100", "-64", "65600", "2k", "\u00b2"):
        with pytest.raises(ValueError, match=f"SGLANG_CPU_WEIGHT_PREFETCH={bad!r}: use auto, 0 .off. or bytes ahead, a multiple of 64 up to 65536"):
            weight_prefetch("avx2", ZEN1, bad)
    assert weight_prefetch("avx2", ZEN1, "") == weight_prefetch("avx2", ZEN1, None)  # empty is auto, as unset


def test_the_shipped_prefetch_table_names_each_cpu_model_once_within_the_kernels_bounds():
    import re

    for family, runs in isa.WEIGHT_PREFETCH.items():
        assert family in FAMILIES and len({r.cpu for r in runs}) == len(runs)
        for r in runs:
            assert re.fullmatch(r".+ \(family \d+ model \d+\)", r.cpu) and 0 <= r.bytes <= isa.PREFETCH_MAX and r.bytes % 64 == 0
            assert 1 <= r.rows <= isa.PREFETCH_MAX_ROWS
            assert r.command  # what measured it


def test_an_arithmetic_that_mixes_only_with_some_takes_the_faster_of_the_plans_with_and_without_it(monkeypatch):
    monkeypatch.setattr(isa, "AGREEMENT", {m: (99.0,) * 4 for m in ("float32", "int16", "mixed16", "bf16")})
    monkeypatch.setattr(isa, "HELD", {})
    monkeypatch.setattr(isa, "MIXES_ONLY_WITH", {"bf16": ("float32", "int16")})
    allowed = [["float32", "int16", "mixed16", "bf16"]] * 4
    # pick alone would mix mixed16 (1-8 rows) with bf16 (above): not allowed; int16 + bf16 (geometric mean 1.1x
    # faster) beats mixed16 everywhere
    ms = {"float32": (12.0, 21.0, 90.0, 350.0), "int16": (4.9, 14.0, 54.0, 230.0), "mixed16": (4.6, 10.6, 46.0, 215.0),
          "bf16": (17.0, 20.0, 42.0, 123.0)}
    assert pick(ms, allowed) == ("mixed16", "mixed16", "bf16", "bf16")
    assert isa.measured_plan(ms, allowed) == ("int16", "int16", "bf16", "bf16")
    assert isa.plan_time(ms, ("int16", "int16", "bf16", "bf16")) < isa.plan_time(ms, ("mixed16",) * 4)
    # bf16 only a little faster at the largest batches: the plan without it
    slow_bf16 = {**ms, "bf16": (17.0, 20.0, 60.0, 200.0)}
    assert isa.measured_plan(slow_bf16, allowed) == ("mixed16",) * 4
    # a mixture its list allows stays as picked, and a plan without the arithmetic is untouched
    assert isa.measured_plan({**ms, "mixed16": (9.0, 20.0, 60.0, 300.0)}, allowed) == ("int16", "int16", "bf16", "bf16")
    assert isa.measured_plan({k: v for k, v in ms.items() if k != "bf16"}, allowed) == ("mixed16",) * 4
    assert isa.plan_time(ms, ("int8",) * 4) == float("inf")  # not timed


def test_the_amx_xeon_runs_int16_then_bf16_and_says_why():
    plan = gguf_math("amx", "Intel(R) Xeon(R) Processor (family 6 model 167)", None)
    assert plan.by_bucket == ("int16", "int16", "bf16", "bf16")
    assert "bf16 shares a plan only with float32, int16" in plan.reason
    other = gguf_math("amx", "Intel(R) Xeon(R) Platinum (family 6 model 143)", None)  # unmeasured: the family's first run
    assert other.by_bucket == plan.by_bucket and "the same family" in other.reason
