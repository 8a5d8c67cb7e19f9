"""Combinations this build does not serve (speculative decoding beside LoRA or a disaggregation role, LoRA on a
prefill or decode server): refused at start-up, naming both flags."""

from __future__ import annotations

import pytest

from sglang.srt.arg_groups.errors import ServerArgsError
from sglang.srt.server_args import ServerArgs


@pytest.mark.parametrize(("fields", "message"), [
    ({"enable_lora": True, "max_lora_rank": 8, "lora_target_modules": ["all"]}, "--enable-lora / --lora-paths, or --speculative-algorithm"),
    ({"lora_paths": ["a=/nonexistent/a"]}, "--enable-lora / --lora-paths, or --speculative-algorithm"),
    ({"disaggregation_mode": "decode"}, "--disaggregation-mode decode or --speculative-algorithm"),
])
def test_speculation_with_lora_or_a_disaggregation_role_is_refused(fields, message):
    with pytest.raises(ServerArgsError, match=message):
        ServerArgs(speculative_algorithm="NGRAM", **fields).check_server_args()


def test_ngram_alone_passes_the_checks():
    ServerArgs(speculative_algorithm="NGRAM").check_server_args()


@pytest.mark.parametrize("mode", ["prefill", "decode"])
def test_lora_on_a_prefill_or_decode_server_is_refused(mode):
    with pytest.raises(ServerArgsError, match=f"--disaggregation-mode {mode} with LoRA adapters"):
        ServerArgs(disaggregation_mode=mode, lora_paths=["a=/nonexistent/a"]).check_server_args()
