"""A minimal PNG writer for 8-bit grayscale images (no Pillow needed)."""

from __future__ import annotations

import struct
import zlib

import numpy as np


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)


def encode_gray_png(pixels: np.ndarray) -> bytes:
    """pixels: (H, W) uint8 -> PNG file bytes (color type 0, bit depth 8)."""
    if pixels.dtype != np.uint8 or pixels.ndim != 2:
        raise ValueError(f"expected a (H, W) uint8 array, got {pixels.dtype} {pixels.shape}")
    h, w = pixels.shape
    raw = b"".join(b"\x00" + pixels[r].tobytes() for r in range(h))  # filter type 0 per row
    header = struct.pack(">IIBBBBB", w, h, 8, 0, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", header) + _chunk(b"IDAT", zlib.compress(raw, 9)) + _chunk(b"IEND", b"")


def decode_gray_png(data: bytes) -> np.ndarray:
    """Inverse of :func:`encode_gray_png` (only what it writes); for tests and clients."""
    if not data.startswith(b"\x89PNG\r\n\x1a\n"):
        raise ValueError("not a PNG file")
    pos, idat, w, h = 8, b"", 0, 0
    while pos < len(data):
        (n,) = struct.unpack(">I", data[pos : pos + 4])
        kind, body = data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + n]
        if kind == b"IHDR":
            w, h, depth, color = struct.unpack(">IIBB", body[:10])
            if (depth, color) != (8, 0):
                raise ValueError("only 8-bit grayscale PNGs are supported")
        elif kind == b"IDAT":
            idat += body
        pos += 12 + n
    raw = np.frombuffer(zlib.decompress(idat), dtype=np.uint8).reshape(h, w + 1)
    if raw[:, 0].any():
        raise ValueError("only PNG filter type 0 is supported")
    return raw[:, 1:].copy()
