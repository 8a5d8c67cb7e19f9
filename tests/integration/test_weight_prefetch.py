"""The weight prefetch of the integer GGUF kernels (needs g++): it changes no bits at any distance, the
kernels refuse a distance they cannot take, and the loader applies this CPU's setting (``isa.weight_prefetch``,
``SGLANG_CPU_WEIGHT_PREFETCH``), a malformed one stopping it. Whether it pays is measured in bench/, not here."""

from __future__ import annotations

import gguf
import numpy as np
import pytest
import torch
from gguf.quants import quantize

from helpers.kernel_families import load_family_or_skip
from sglang.srt.layers.cpu_kernels.build import load_decode_kernels
from sglang.srt.layers.cpu_kernels.isa import FAMILIES
from sglang.srt.layers.q4_packed import pack_i8, pack_q8_i8, q4_blocks, q8_blocks

pytestmark = [pytest.mark.compiler]

ACTS = {"int8": "i8", "int16": "i16"}


@pytest.fixture(scope="module", params=sorted(FAMILIES))
def family(request):
    return load_family_or_skip(request.param)


@pytest.mark.parametrize("act", sorted(ACTS))
def test_the_weight_prefetch_changes_no_bits(family, act):
    # the prefetch only asks for cache lines (past the weight's end too, which must not fault): every distance gives
    # the bits of none, in passes of every size it may serve
    suffix = ACTS[act]
    n, k = 1000, 576
    raw = quantize((0.1 * np.random.default_rng(1).standard_normal((n, k))).astype(np.float32), gguf.GGMLQuantizationType.Q4_1)
    q4 = pack_i8(*q4_blocks(raw, "Q4_1", k))
    raw8 = quantize((0.1 * np.random.default_rng(2).standard_normal((n, k))).astype(np.float32), gguf.GGMLQuantizationType.Q8_0)
    q8 = pack_q8_i8(*q8_blocks(raw8, k))
    was = family.weight_prefetch(), family.weight_prefetch_rows()
    try:
        for rows in (1, 2, 4, 6, 9):  # passes of 1, 2, 4 rows; 6 in the amx family's 512-bit pass, 9 on its tiles
            x = torch.randn(rows, k, generator=torch.Generator().manual_seed(rows))
            family.set_weight_prefetch(0)
            want = [getattr(family, f"q4_linear_{suffix}")(x, *q4, n), getattr(family, f"q8_linear_{suffix}")(x, *q8, n)]
            for d in (64, 2048, 65536):
                for upto in (1, 8):
                    family.set_weight_prefetch(d, upto)
                    assert (family.weight_prefetch(), family.weight_prefetch_rows()) == (d, upto)
                    got = [getattr(family, f"q4_linear_{suffix}")(x, *q4, n), getattr(family, f"q8_linear_{suffix}")(x, *q8, n)]
                    assert all(torch.equal(a, b) for a, b in zip(want, got)), (rows, d, upto)
    finally:
        family.set_weight_prefetch(*was)


def test_the_kernels_refuse_a_prefetch_distance_they_cannot_take(family):
    for bad in (-64, 100, 65600):
        with pytest.raises(RuntimeError, match=f"the weight prefetch distance is 0..65536 bytes, a multiple of 64, got {bad}"):
            family.set_weight_prefetch(bad)
    for bad in (0, 65):
        with pytest.raises(RuntimeError, match=f"the weight prefetch's rows are 1..64, got {bad}"):
            family.set_weight_prefetch(64, bad)


def test_the_loader_sets_the_hosts_prefetch_and_a_malformed_setting_stops_it(monkeypatch):
    from sglang.host import cpu_model
    from sglang.srt.layers.cpu_kernels.isa import host_choice, weight_prefetch

    fam = host_choice().family.name
    try:
        monkeypatch.setenv("SGLANG_CPU_WEIGHT_PREFETCH", "1024")
        load_decode_kernels.cache_clear()
        assert load_decode_kernels().weight_prefetch() == 1024
        monkeypatch.setenv("SGLANG_CPU_WEIGHT_PREFETCH", "lots")
        load_decode_kernels.cache_clear()
        with pytest.raises(ValueError, match="SGLANG_CPU_WEIGHT_PREFETCH='lots'"):
            load_decode_kernels()
    finally:
        monkeypatch.delenv("SGLANG_CPU_WEIGHT_PREFETCH")
        load_decode_kernels.cache_clear()
    want = weight_prefetch(fam, cpu_model(), None)
    assert (load_decode_kernels().weight_prefetch(), load_decode_kernels().weight_prefetch_rows()) == (want.bytes, want.rows)
