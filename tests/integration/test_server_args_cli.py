"""The ServerArgs dump command in a fresh interpreter."""

from __future__ import annotations

import re

import pytest

from helpers.dists import ok, run_python

pytestmark = [pytest.mark.slow]


def test_dump_command_shows_values_and_sources():
    out = ok(run_python("import sys; from sglang.srt.server_args import main; sys.exit(main(['--model-path', 'm', '--tp-size', '2', '--dump']))"))
    assert "[parallel]" in out
    assert re.search(r"^\s*tp_size\s+= 2\s", out, re.M) and "# cli" in out
    assert "# derived default" in out and "# platform default (CpuSRTPlatform)" in out


