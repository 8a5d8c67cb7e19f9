"""A GGUF file's metadata and tensor views, read in one pass over a memory map.

``gguf.GGUFReader`` builds a numpy view for every part of every metadata field, which for a tokenizer of 49k
tokens and 49k merges is about 300k views: 6.7 s an open on the Zen 1 EPYC, and an engine opens its model's
file in four places (the quantization decision, the weights, the tokenizer manager, the detokenizer). Here a
string array is one loop over ``struct.unpack_from`` and a numeric array one ``numpy.frombuffer``; the parsed
file's metadata is kept per process (keyed by path, size, modification time, inode and change time), so the later opens are free.

The layout (GGUF v2 and v3, little-endian): magic, version, tensor count, metadata count, the metadata
(key, type, value; arrays as element type, count, elements), the tensor infos (name, dimensions innermost
first, type, offset), then the tensor data from the next multiple of ``general.alignment`` (default 32).
Tensor ``data`` is what ``gguf.GGUFReader`` gives: F32/F16/F64/I8/I16/I32/I64 as those dtypes shaped outermost
first, any other type as its raw bytes (uint8, the innermost dimension in bytes), which ``gguf.quants.dequantize`` reads.
"""

from __future__ import annotations

import functools
import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MAGIC = b"GGUF"
VERSIONS = (2, 3)
DEFAULT_ALIGNMENT = 32

# value type -> struct code (scalars); 8 is a string, 9 an array
_U64 = struct.Struct("<Q")
_SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
_NUMPY = {0: "<u1", 1: "<i1", 2: "<u2", 3: "<i2", 4: "<u4", 5: "<i4", 6: "<f4", 7: "?", 10: "<u8", 11: "<i8", 12: "<f8"}
_STRING, _ARRAY = 8, 9


class GGUFFormatError(ValueError):
    """The file is not a GGUF this reader understands; the message says where and what."""


@dataclass(frozen=True)
class GGUFTensor:
    name: str
    tensor_type: Any  # gguf.GGMLQuantizationType
    shape: tuple[int, ...]  # innermost first, as the file lists it
    data_offset: int  # absolute, in the file
    n_bytes: int
    data: Any  # numpy view into the file's memory map


@dataclass(frozen=True)
class GGUFFile:
    path: Path
    version: int
    fields: dict[str, Any]  # decoded: str, int, float, bool, or a list of those; shared per process: read only
    tensors: list[GGUFTensor]


class _Cursor:
    def __init__(self, buf: memoryview, path: Path) -> None:
        self.buf, self.pos, self.path = buf, 0, path

    def scalar(self, code: str) -> Any:
        try:
            (v,) = struct.unpack_from("<" + code, self.buf, self.pos)
        except struct.error:
            raise GGUFFormatError(f"{self.path}: truncated at byte {self.pos}") from None
        self.pos += struct.calcsize(code)
        return v

    def string(self) -> str:
        n = self.scalar("Q")
        end = self.pos + n
        if end > len(self.buf):
            raise GGUFFormatError(f"{self.path}: a string of {n} bytes at byte {self.pos} runs past the end")
        try:
            s = str(self.buf[self.pos : end], "utf-8")
        except UnicodeDecodeError as exc:
            raise GGUFFormatError(f"{self.path}: a string at byte {self.pos} is not UTF-8 ({exc.reason})") from None
        self.pos = end
        return s

    def strings(self, n: int) -> list[str]:
        """``n`` strings in a row, as :meth:`string` reads them one by one (the same checks and errors), in one local
        loop: a vocabulary and its merges (98,052 strings in the default model) took 0.2 s a process through string()."""
        buf, pos, size, unpack = self.buf, self.pos, len(self.buf), _U64.unpack_from
        out: list[str] = []
        append = out.append
        try:
            for _ in range(n):
                (k,) = unpack(buf, pos)
                pos += 8
                end = pos + k
                if end > size:
                    raise GGUFFormatError(f"{self.path}: a string of {k} bytes at byte {pos} runs past the end")
                append(str(buf[pos:end], "utf-8"))
                pos = end
        except struct.error:
            raise GGUFFormatError(f"{self.path}: truncated at byte {pos}") from None
        except UnicodeDecodeError as exc:
            raise GGUFFormatError(f"{self.path}: a string at byte {pos} is not UTF-8 ({exc.reason})") from None
        self.pos = pos
        return out

    def value(self, vtype: int) -> Any:
        if vtype == _STRING:
            return self.string()
        if vtype == _ARRAY:
            etype, n = self.scalar("I"), self.scalar("Q")
            if etype == _STRING:
                return self.strings(n)
            if etype in _NUMPY:
                import numpy as np

                dt = np.dtype(_NUMPY[etype])
                if self.pos + n * dt.itemsize > len(self.buf):
                    raise GGUFFormatError(f"{self.path}: an array of {n} at byte {self.pos} runs past the end")
                arr = np.frombuffer(self.buf, dtype=dt, count=n, offset=self.pos)
                self.pos += n * dt.itemsize
                return arr.tolist()
            return [self.value(etype) for _ in range(n)]  # arrays of arrays
        code = _SCALARS.get(vtype)
        if code is None:
            raise GGUFFormatError(f"{self.path}: unknown metadata value type {vtype} at byte {self.pos}")
        return self.scalar(code)


def _tensor_data(mm: Any, offset: int, ttype: Any, shape: tuple[int, ...], path: Path, name: str) -> tuple[Any, int]:
    import numpy as np
    from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

    block, size = GGML_QUANT_SIZES[ttype]
    outer = tuple(reversed(shape))
    if shape[0] % block:
        raise GGUFFormatError(f"{path}: tensor {name!r}'s rows of {shape[0]} are not whole blocks of {block} ({ttype.name})")
    n_bytes = int(np.prod(shape, dtype=np.int64)) // block * size
    if offset + n_bytes > len(mm):
        raise GGUFFormatError(f"{path}: tensor {name!r} ({n_bytes} bytes at {offset}) runs past the end of the file")
    typed = {GGMLQuantizationType.F32: np.float32, GGMLQuantizationType.F16: np.float16, GGMLQuantizationType.F64: np.float64,
             GGMLQuantizationType.I8: np.int8, GGMLQuantizationType.I16: np.int16, GGMLQuantizationType.I32: np.int32,
             GGMLQuantizationType.I64: np.int64}
    if ttype in typed:
        return np.ndarray(outer, dtype=typed[ttype], buffer=mm, offset=offset), n_bytes
    return np.ndarray((*outer[:-1], shape[0] // block * size), dtype=np.uint8, buffer=mm, offset=offset), n_bytes


@dataclass(frozen=True)
class _Layout:
    """What parsing finds: everything but the tensor views (those hold the file's memory map)."""

    version: int
    fields: dict[str, Any]
    infos: tuple[tuple[str, tuple[int, ...], Any, int], ...]  # name, shape, type, absolute offset


def _parse(path: Path) -> _Layout:
    import numpy as np
    from gguf.constants import GGMLQuantizationType

    mm = np.memmap(path, mode="r")
    cur = _Cursor(memoryview(mm), path)
    if bytes(cur.buf[:4]) != MAGIC:
        raise GGUFFormatError(f"{path}: not a GGUF file (it starts with {bytes(cur.buf[:4])!r}, not {MAGIC!r})")
    cur.pos = 4
    version = cur.scalar("I")
    if version not in VERSIONS:
        swapped = struct.unpack("<I", struct.pack(">I", version))[0]
        why = "a big-endian file (convert it on a little-endian host)" if swapped in VERSIONS else f"version {version}"
        raise GGUFFormatError(f"{path}: {why}; this reader takes little-endian GGUF versions {VERSIONS}")
    n_tensors, n_kv = cur.scalar("Q"), cur.scalar("Q")
    fields: dict[str, Any] = {}
    for _ in range(n_kv):
        key = cur.string()
        if key in fields:
            raise GGUFFormatError(f"{path}: metadata key {key!r} appears twice")
        fields[key] = cur.value(cur.scalar("I"))
    infos = []
    for _ in range(n_tensors):
        name = cur.string()
        n_dims = cur.scalar("I")
        if not 1 <= n_dims <= 4:
            raise GGUFFormatError(f"{path}: tensor {name!r} has {n_dims} dimensions (GGUF tensors have 1 to 4)")
        shape = tuple(cur.scalar("Q") for _ in range(n_dims))
        raw_type, offset = cur.scalar("I"), cur.scalar("Q")
        try:
            ttype = GGMLQuantizationType(raw_type)
        except ValueError:
            raise GGUFFormatError(f"{path}: tensor {name!r} has an unknown type {raw_type}") from None
        infos.append((name, shape, ttype, offset))
    align = fields.get("general.alignment", DEFAULT_ALIGNMENT)
    if not isinstance(align, int) or align <= 0 or align % 8:
        raise GGUFFormatError(f"{path}: general.alignment {align!r} is not a positive multiple of 8")
    start = -(-cur.pos // align) * align
    for name, shape, ttype, offset in infos:  # every tensor inside the file, before anyone reads one
        _tensor_data(mm, start + offset, ttype, shape, path, name)
    return _Layout(version, fields, tuple((n, sh, t, start + o) for n, sh, t, o in infos))


@functools.lru_cache(maxsize=4)
def _cached(path: str, size: int, mtime_ns: int, ino: int, ctime_ns: int) -> _Layout:
    return _parse(Path(path))


def read_gguf_file(path: Path | str) -> GGUFFile:
    """The file at ``path``: its metadata parsed once per process while its size, modification time, inode and change
    time stay the same; the tensor views map the file afresh on each call, so the mapping goes when the caller drops them (the
    process keeps no pages of a loaded model's file).

    Raises ``OSError`` when it cannot be read, :class:`GGUFFormatError` when it is not a GGUF this reader takes."""
    import numpy as np

    p = Path(path).resolve()
    st = os.stat(p)
    # the inode and change time too: a copy that keeps size and mtime (cp -p, rsync -t) is another file
    layout = _cached(str(p), st.st_size, st.st_mtime_ns, st.st_ino, st.st_ctime_ns)
    mm = np.memmap(p, mode="r")
    tensors = []
    for name, shape, ttype, offset in layout.infos:
        data, n_bytes = _tensor_data(mm, offset, ttype, shape, p, name)
        tensors.append(GGUFTensor(name, ttype, shape, offset, n_bytes, data))
    return GGUFFile(p, layout.version, layout.fields, tensors)
