"""``python -m sglang.srt.layers.cpu_kernels``: build the CPU kernels now and print the library's path."""

from __future__ import annotations

import logging
import sys

from sglang.srt.layers.cpu_kernels.build import KernelBuildError, build, load_decode_kernels


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    try:
        load_decode_kernels()
    except KernelBuildError as e:
        print(f"sglang: CPU kernels not built: {e}", file=sys.stderr)
        return 1
    print(build())
    return 0


raise SystemExit(main())
