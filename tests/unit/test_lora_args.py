"""--lora-paths parsing and the lora namespace's late resolution (no model, no subprocess)."""

from __future__ import annotations

import json
import uuid

import pytest

from sglang.srt.arg_groups.errors import ServerArgsError
from sglang.srt.arg_groups.lora_hook import parse_lora_paths
from sglang.srt.lora.config import normalize_target_modules
from sglang.srt.lora.errors import LoRAConfigError
from sglang.srt.lora.lora_registry import LoRANotFound, LoRARef, LoRARegistry


def test_three_cli_forms_and_the_python_dict_give_deterministic_refs():
    refs = parse_lora_paths(["/a/p", "b=/b/p=x", json.dumps({"lora_name": "c", "lora_path": "/c", "pinned": True})])
    assert [(r.lora_name, r.lora_path, r.pinned) for r in refs] == [("/a/p", "/a/p", False), ("b", "/b/p=x", False), ("c", "/c", True)]
    assert refs[1].lora_id == uuid.uuid5(uuid.NAMESPACE_URL, "b\0/b/p=x").hex
    assert parse_lora_paths({"b": "/b/p=x"})[0] == LoRARef.make("b", "/b/p=x")
    with pytest.raises(ServerArgsError, match="more than once"):
        parse_lora_paths(["x=/1", "x=/2"])
    with pytest.raises(ServerArgsError, match="lora_path"):
        parse_lora_paths(['{"lora_name": "c"}'])


def test_target_modules_all_and_aliases():
    assert normalize_target_modules(["all"], "f") == {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}
    assert normalize_target_modules(["qkv_proj", "down_proj"], "f") == {"q_proj", "k_proj", "v_proj", "down_proj"}
    with pytest.raises(LoRAConfigError, match="alone"):
        normalize_target_modules(["all", "q_proj"], "f")
    with pytest.raises(LoRAConfigError, match="lm_head"):
        normalize_target_modules(["lm_head"], "f")


def test_registry_lists_the_loaded_adapters_and_counts_users():
    reg = LoRARegistry([LoRARef.make("a", "/a")])
    with pytest.raises(LoRANotFound, match=r"not loaded: zz\nLoaded adapters: \['a'\]"):
        reg.acquire(["a", "zz"])
    (ref,) = reg.acquire(["a"])
    assert reg.users(ref.lora_id) == 1 and not reg.wait_for_unload(ref.lora_id, timeout=0.05)
    reg.release(ref.lora_id)
    assert reg.wait_for_unload(ref.lora_id, timeout=0.05)
