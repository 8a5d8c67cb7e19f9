"""ServerArgs: resolution pipeline, declarations, guard, derive, checks, CLI."""

from __future__ import annotations

import argparse
import json

import pytest

from sglang.srt.arg_groups.errors import DeclarationError, ServerArgsError
from sglang.srt.arg_groups.overrides import (
    MODEL_OVERRIDES,
    declare_late_resolution,
    declare_load_time_override,
    register_model_override,
)
from sglang.srt.arg_groups.resolution import resolved_view
from sglang.srt.runtime_context import get_context, get_schedule, publish, reset_context
from sglang.srt.server_args import ServerArgs, prepare_server_args


@pytest.fixture(autouse=True)
def _clean_context():
    yield
    reset_context()


@pytest.fixture
def model_dir(tmp_path):
    """A model directory whose config.json names a test architecture."""

    def make(arch: str):
        d = tmp_path / arch
        d.mkdir()
        (d / "config.json").write_text(json.dumps({"architectures": [arch], "hidden_size": 8}))
        return str(d)

    return make


@pytest.fixture
def arch_override():
    added = []

    def add(arch, value):
        MODEL_OVERRIDES[arch] = value
        added.append(arch)

    yield add
    for a in added:
        MODEL_OVERRIDES.pop(a, None)


def test_dummy_returns_early_and_stays_mutable():
    sa = ServerArgs(model_path="dummy")
    assert sa.chunked_prefill_size is None and sa.provenance() == {}
    sa.tp_size = 4  # no guard on the dummy boundary
    assert sa.tp_size == 4


def test_resolution_declares_and_records_provenance():
    sa = ServerArgs(page_size=32)
    prov = sa.provenance()
    assert sa.device == "cpu" and prov["device"] == "device auto-detection"
    assert sa.chunked_prefill_size == 512 and prov["chunked_prefill_size"] == "derived default"
    assert sa.disable_cuda_graph is True and prov["disable_cuda_graph"] == "platform default (CpuSRTPlatform)"
    assert prov["page_size"] == "constructor" and prov["tp_size"] == "default"


def test_strict_guard_names_override_and_derive():
    sa = ServerArgs()
    with pytest.raises(AttributeError, match=r"read-only after resolution: change resolved config with get_context\(\)\.override\(source, tp_size=\.\.\.\), or build a per-runner variant with server_args\.derive"):
        sa.tp_size = 2
    with pytest.raises(AttributeError, match="cannot be deleted"):
        del sa.tp_size


def test_fields_are_read_only_during_resolution(model_dir, arch_override):
    def writer(server_args, hf_config):
        server_args.page_size = 64
        return {}

    arch_override("WriterArch", writer)
    with pytest.raises(AttributeError, match=r"read-only during resolution: return a declaration .*\.declare\(server_args, source, page_size=\.\.\.\)"):
        ServerArgs(model_path=model_dir("WriterArch"))


def test_model_override_dict_is_declared(model_dir, arch_override):
    arch_override("DictArch", {"chunked_prefill_size": 128, "page_size": 8})
    sa = ServerArgs(model_path=model_dir("DictArch"))
    assert (sa.chunked_prefill_size, sa.page_size) == (128, 8)
    assert sa.provenance()["page_size"] == "model override (DictArch)"


def test_registered_model_override_sees_pristine_args_and_hf_config(model_dir):
    seen = {}

    @register_model_override("FnArch")
    def fn(server_args, hf_config):
        seen["page"], seen["hidden"] = server_args.page_size, hf_config["hidden_size"]
        return {"max_running_requests": 7}

    try:
        sa = ServerArgs(model_path=model_dir("FnArch"), page_size=4)
    finally:
        MODEL_OVERRIDES.pop("FnArch")
    assert seen == {"page": 4, "hidden": 8} and sa.max_running_requests == 7


def test_declaring_a_non_whitelisted_field_fails_at_its_slot(model_dir, arch_override):
    arch_override("BadArch", {"port": 1})
    with pytest.raises(DeclarationError, match=r"model override \(BadArch\) declares 'port', which is not declarable"):
        ServerArgs(model_path=model_dir("BadArch"))


def test_declaring_an_unknown_field_suggests_close_names(model_dir, arch_override):
    arch_override("TypoArch", {"page_sise": 1})
    with pytest.raises(DeclarationError, match=r"unknown server argument 'page_sise' \(did you mean page_size"):
        ServerArgs(model_path=model_dir("TypoArch"))


def test_later_gate_wins_over_platform_default(model_dir, arch_override):
    arch_override("GraphArch", {"disable_cuda_graph": False})
    sa = ServerArgs(model_path=model_dir("GraphArch"))
    assert sa.disable_cuda_graph is False
    assert sa.provenance()["disable_cuda_graph"] == "model override (GraphArch)"


def test_derived_handler_reads_earlier_declarations(model_dir, arch_override):
    arch_override("ChunkArch", {"chunked_prefill_size": 96})
    assert ServerArgs(model_path=model_dir("ChunkArch")).chunked_prefill_size == 96


def test_post_process_pass_normalizes_against_earlier_values():
    sa = ServerArgs(schedule_policy="lpm", disable_radix_cache=True)
    assert sa.schedule_policy == "fcfs"
    assert sa.provenance()["schedule_policy"] == "post-process pass schedule_policy"
    assert ServerArgs(schedule_policy="lpm").schedule_policy == "lpm"


def test_resolved_view_is_pipeline_internal():
    with pytest.raises(RuntimeError, match="only valid while ServerArgs.__post_init__ resolves"):
        resolved_view(ServerArgs())


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"tp_size": 0}, "--tp-size must be >= 1"),
        ({"nnodes": 2}, "--nnodes 2 needs --dist-init-addr HOST:PORT"),
        ({"node_rank": 3}, r"--node-rank must be in \[0, --nnodes=1\)"),
        ({"port": 70000}, "--port must be in 1..65535"),
        ({"page_size": 12}, "--page-size must be a power of two"),
        ({"mem_fraction_static": 1.5}, r"--mem-fraction-static must be in \(0, 1\)"),
        ({"max_total_tokens": 4, "page_size": 16}, "--max-total-tokens 4 must hold at least one page"),
        ({"chunked_prefill_size": 3, "page_size": 16}, "--chunked-prefill-size must be -1"),
        ({"nnodes": 2, "dist_init_addr": "nohost", "tp_size": 2}, "--dist-init-addr must be HOST:PORT"),
        ({"dp_size": 0}, "--dp-size must be >= 1"),
        ({"dp_size": 2, "nnodes": 2, "tp_size": 2, "dist_init_addr": "127.0.0.1:1"}, "--dp-size 2 with --nnodes 2: .* with --use-ray"),
        ({"use_ray": True, "nnodes": 2, "node_rank": 1, "tp_size": 2}, "--use-ray launches every rank from node 0"),
        # what argparse enforces on the command line, for sglang.Engine(**kwargs) and ServerArgs(...) callers
        ({"load_balance_method": "random"}, "--load-balance-method must be one of round_robin, shortest_queue, cache_aware, got 'random'"),
        ({"schedule_policy": "lifo"}, "--schedule-policy must be one of fcfs, lpm"),
        ({"dp_size": "2"}, r"--dp-size must be an integer, got '2' \(str\)"),
        ({"tp_size": True}, r"--tp-size must be an integer, got True \(bool\)"),
        ({"use_ray": "yes"}, "--use-ray must be true or false"),
        ({"mem_fraction_static": "0.5"}, "--mem-fraction-static must be a number"),
    ],
)
def test_check_server_args_names_the_flag(fields, message):
    with pytest.raises(ServerArgsError, match=message):
        ServerArgs(**fields).check_server_args()


def test_derive_returns_a_frozen_variant_and_leaves_the_receiver():
    sa = ServerArgs()
    publish(sa, role="launcher")
    variant = sa.derive("encode worker", tp_size=1, page_size=64)
    assert (variant.page_size, sa.page_size) == (64, 1)
    assert variant.derived_from == ("encode worker", {"tp_size": 1, "page_size": 64})
    assert variant.provenance()["page_size"] == "derived (encode worker)"
    assert get_context().server_args is sa and not get_context().is_published(variant)
    assert variant.chunked_prefill_size == sa.chunked_prefill_size  # not re-resolved
    with pytest.raises(AttributeError, match="read-only after resolution"):
        variant.page_size = 8
    with pytest.raises(AttributeError, match="read-only after resolution"):
        sa.page_size = 8  # the published receiver still refuses assignment


def test_derive_rejects_unknown_fields():
    with pytest.raises(ServerArgsError, match=r"unknown server argument 'tp_sise' \(did you mean tp_size"):
        ServerArgs().derive("x", tp_sise=2)


def test_declare_late_resolution_writes_in_place_before_publish():
    sa = ServerArgs()
    declare_late_resolution(sa, "lora normalization", max_running_requests=3)
    assert sa.max_running_requests == 3
    assert sa.provenance()["max_running_requests"] == "late resolution (lora normalization)"


def test_declare_late_resolution_refuses_a_published_instance():
    sa = ServerArgs()
    publish(sa, role="launcher")
    with pytest.raises(DeclarationError, match=r"refuses a published ServerArgs; use get_context\(\)\.override"):
        declare_late_resolution(sa, "too late", max_running_requests=3)


def test_declare_load_time_override_goes_to_the_bags_only():
    sa = ServerArgs()
    publish(sa, role="scheduler")
    declare_load_time_override("weights", {"max_running_requests": 9})
    assert get_schedule().max_running_requests == 9 and sa.max_running_requests is None
    with pytest.raises(DeclarationError, match="'port', which is not declarable"):
        declare_load_time_override("weights", {"port": 1})


def test_cli_is_generated_from_metadata():
    parser = argparse.ArgumentParser()
    ServerArgs.add_cli_args(parser)
    help_text = parser.format_help()
    assert "--chunked-prefill-size" in help_text and "{fcfs,lpm}" in help_text and "--disable-radix-cache" in help_text
    with pytest.raises(SystemExit):
        parser.parse_args(["--schedule-policy", "random"])


def test_prepare_server_args_records_cli_provenance():
    sa = prepare_server_args(["--tp-size", "2", "--disable-radix-cache", "--page-size", "1"])
    prov = sa.provenance()
    assert sa.tp_size == 2 and prov["tp_size"] == "cli" and prov["disable_radix_cache"] == "cli"
    assert prov["page_size"] == "cli"  # given explicitly, even though it equals the default
    assert prov["port"] == "default"


def test_the_api_key_never_shows_in_repr_dump_or_provenance():
    from sglang.srt.arg_groups.dump import format_dump, resolved_with_provenance

    sa = prepare_server_args(["--api-key", "sk-very-secret"])
    assert sa.api_key == "sk-very-secret"  # the server itself still reads it
    assert "sk-very-secret" not in repr(sa)
    assert resolved_with_provenance(sa)["api_key"] == {"value": "***", "source": "cli", "ns": "serving"}
    assert "sk-very-secret" not in format_dump(sa) and "'***'" in format_dump(sa)
    assert resolved_with_provenance(prepare_server_args([]))["api_key"]["value"] is None  # unset stays visible as unset
