"""``gguf_file``: the one-pass GGUF reader against the gguf package's own reader on files the gguf package writes,
and its errors on files it must refuse."""

from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np
import pytest

from sglang.srt.model_loader.gguf_file import GGUFFormatError, read_gguf_file


def _write(path: Path, alignment: int | None = None) -> Path:
    w = gguf.GGUFWriter(str(path), "llama")
    if alignment is not None:
        w.add_custom_alignment(alignment)
    w.add_uint32("llama.block_count", 2)
    w.add_float32("llama.rope.freq_base", 10000.5)
    w.add_bool("tokenizer.ggml.add_bos_token", True)
    w.add_string("tokenizer.chat_template", "{{ x }} \u00e9\u4e2d")
    w.add_array("tokenizer.ggml.tokens", ["a", "\u0120b", "", "\u4e2d\u6587"])
    w.add_array("tokenizer.ggml.token_type", [1, 2, 3, -4])
    w.add_array("some.floats", [0.5, -1.25])
    w.add_int64("some.big", -(2**40))
    w.add_uint8("some.byte", 200)
    rng = np.random.default_rng(0)
    w.add_tensor("f32", rng.standard_normal((3, 64)).astype(np.float32))
    w.add_tensor("f16", rng.standard_normal((2, 32)).astype(np.float16))
    vec = rng.standard_normal(7).astype(np.float32)
    w.add_tensor("vec", vec)
    w.add_tensor("ints", np.arange(-4, 4, dtype=np.int32))
    for kind in (gguf.GGMLQuantizationType.Q8_0, gguf.GGMLQuantizationType.Q4_1):
        raw = gguf.quants.quantize(rng.standard_normal((4, 64)).astype(np.float32), kind)
        w.add_tensor(kind.name.lower(), raw, raw_shape=raw.shape, raw_dtype=kind)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


@pytest.mark.parametrize("alignment", [None, 64])
def test_fields_and_tensors_equal_the_gguf_packages_reader(tmp_path, alignment):
    path = _write(tmp_path / "m.gguf", alignment)
    ours, ref = read_gguf_file(path), gguf.GGUFReader(str(path))
    assert {k: ref.fields[k].contents() for k in ref.fields if not k.startswith("GGUF.")} == ours.fields
    assert ours.fields["tokenizer.ggml.tokens"] == ["a", "\u0120b", "", "\u4e2d\u6587"]
    assert ours.fields["tokenizer.ggml.token_type"] == [1, 2, 3, -4] and ours.fields["some.big"] == -(2**40)
    assert [t.name for t in ours.tensors] == [t.name for t in ref.tensors] == ["f32", "f16", "vec", "ints", "q8_0", "q4_1"]
    for a, b in zip(ours.tensors, ref.tensors):
        assert (a.tensor_type, a.shape, a.data_offset, a.n_bytes) == (b.tensor_type, tuple(int(x) for x in b.shape), b.data_offset, b.n_bytes)
        assert a.data.dtype == b.data.dtype and a.data.shape == b.data.shape
        assert np.array_equal(np.asarray(a.data), np.asarray(b.data))
        if a.tensor_type.name != "I32":
            assert np.array_equal(gguf.quants.dequantize(a.data, a.tensor_type), gguf.quants.dequantize(b.data, b.tensor_type))
    assert ours.tensors[3].data.tolist() == list(range(-4, 4))


def test_a_file_is_parsed_once_until_it_changes(tmp_path):
    path = _write(tmp_path / "m.gguf")
    first = read_gguf_file(path)
    again = read_gguf_file(str(path))
    assert again.fields is first.fields and again.tensors[0].data is not first.tensors[0].data  # views map afresh
    _write(path, alignment=64)  # rewritten: another size
    assert read_gguf_file(path).fields is not first.fields


def test_files_it_cannot_read_are_refused_with_the_reason(tmp_path):
    good = _write(tmp_path / "m.gguf").read_bytes()
    cases = {
        "magic.gguf": (b"GGML" + good[4:], "not a GGUF file"),
        "version.gguf": (good[:4] + (7).to_bytes(4, "little") + good[8:], "version 7"),
        "big.gguf": (good[:4] + (3).to_bytes(4, "big") + good[8:], "big-endian"),
        "short.gguf": (good[:200], "runs past the end"),
    }
    aligned = bytearray(_write(tmp_path / "a64.gguf", alignment=64).read_bytes())
    at = aligned.index(b"general.alignment") + len(b"general.alignment") + 4  # past the key and its value type
    assert int.from_bytes(aligned[at : at + 4], "little") == 64
    aligned[at : at + 4] = (12).to_bytes(4, "little")  # the gguf package's writer refuses to write this
    cases["align.gguf"] = (bytes(aligned), "not a positive multiple of 8")
    # the token array's strings (read in one loop): one not UTF-8, and the file cut inside the array
    tokens = bytearray(good)
    at = tokens.index("\u4e2d\u6587".encode())
    tokens[at] = 0xFF
    cases["utf8.gguf"] = (bytes(tokens), f"a string at byte {at} is not UTF-8")
    cut = good.index("\u0120b".encode()) + 1
    cases["cut.gguf"] = (good[:cut], "runs past the end|truncated")
    for name, (data, why) in cases.items():
        p = tmp_path / name
        p.write_bytes(data)
        with pytest.raises(GGUFFormatError, match=why):
            read_gguf_file(p)
