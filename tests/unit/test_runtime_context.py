"""Every tier of the runtime context, one rule per test (executable documentation)."""

from __future__ import annotations

import threading

import pytest

from sglang.srt.context.bags import BagError, ConfigBag
from sglang.srt.context.resources import ResourceError
from sglang.srt.runtime_context import (
    ContextError,
    RepublishWarning,
    get_buffer,
    get_context,
    get_device,
    get_exec,
    get_flags,
    get_forward,
    get_lora,
    get_memory,
    get_parallel,
    get_schedule,
    get_server_args,
    get_stream,
    override_server_args,
    publish,
    reset_context,
)
from sglang.srt.server_args import ServerArgs


@pytest.fixture(autouse=True)
def _clean_context():
    reset_context()
    yield
    reset_context()


@pytest.fixture
def published() -> ServerArgs:
    sa = ServerArgs(page_size=32)
    publish(sa, role="launcher")
    return sa


# -- config bags ------------------------------------------------------------------


def test_accessors_fail_closed_before_publish():
    with pytest.raises(BagError, match=r"namespace 'schedule' not published: read of 'chunked_prefill_size' before .*publish\(server_args, role=\.\.\.\)"):
        get_schedule().chunked_prefill_size
    with pytest.raises(ContextError, match="before publish"):
        get_server_args()


def test_publish_projects_nested_bags_with_real_attributes(published):
    assert get_server_args() is published and get_context().role == "launcher"
    assert get_schedule().chunked_prefill_size == 512
    assert get_memory().page_size == 32
    assert isinstance(get_exec().attention, ConfigBag)
    assert "attention_backend" in get_exec().attention.__dict__  # a real instance attribute
    assert get_exec().graph.disable_cuda_graph is True


def test_lora_namespace_holds_the_lora_fields(published):
    assert get_lora().as_dict() == {"enable_lora": None, "lora_paths": None, "max_loras_per_batch": 8, "max_lora_rank": None,
                                    "lora_target_modules": None, "max_loaded_loras": None, "lora_eviction_policy": "lru",
                                    "lora_backend": "torch_native"}


def test_bags_are_sealed(published):
    with pytest.raises(BagError, match=r"config bag 'schedule' is sealed: change 'chunked_prefill_size' with get_context\(\)\.override"):
        get_schedule().chunked_prefill_size = 1


def test_override_writes_bags_logs_and_never_touches_server_args(published):
    get_context().override("load-time probe", chunked_prefill_size=64, page_size=8)
    assert get_schedule().chunked_prefill_size == 64 and get_memory().page_size == 8
    assert published.chunked_prefill_size == 512 and published.page_size == 32
    assert get_context().overrides_log() == [("load-time probe", {"chunked_prefill_size": 64, "page_size": 8})]
    assert get_context().resolved_config()["page_size"] == 8


def test_override_validates_every_field_before_writing_any(published):
    with pytest.raises(KeyError, match=r"unknown config field 'page_sise'.*did you mean page_size"):
        get_context().override("x", chunked_prefill_size=1, page_sise=2)
    assert get_schedule().chunked_prefill_size == 512 and get_context().overrides_log() == []


def test_override_checks_choices(published):
    with pytest.raises(ValueError, match=r"schedule_policy='random' is not one of \['fcfs', 'lpm'\]"):
        get_context().override("x", schedule_policy="random")


def test_override_before_publish_is_refused():
    with pytest.raises(ContextError, match=r"before publish: call publish"):
        get_context().override("x", page_size=8)


def test_republish_is_last_wins_and_warns_naming_dropped_overrides(published):
    get_context().override("probe", page_size=8)
    second = ServerArgs(page_size=64)
    with pytest.warns(RepublishWarning, match=r"drops 1 post-publish override\(s\): probe: page_size=8"):
        publish(second, role="scheduler")
    assert get_server_args() is second and get_memory().page_size == 64
    assert get_context().overrides_log() == []


def test_preserve_config_restores_values_including_overrides(published):
    with get_context().preserve_config():
        get_context().override("inside", page_size=4)
        assert get_memory().page_size == 4
    assert get_memory().page_size == 32 and get_context().overrides_log() == []


def test_preserve_config_restores_on_exception_and_after_a_nested_publish(published):
    bag = get_memory()
    with pytest.raises(RuntimeError), get_context().preserve_config():
        publish(ServerArgs(page_size=128), role="draft")
        raise RuntimeError("boom")
    assert get_server_args() is published and get_memory() is bag and bag.page_size == 32
    assert get_context().role == "launcher"


def test_override_server_args_with_statement(published):
    with override_server_args(page_size=256, schedule_policy="lpm") as sa:
        assert sa.model_path == "dummy" and get_memory().page_size == 256 and get_schedule().schedule_policy == "lpm"
    assert get_memory().page_size == 32 and get_server_args() is published


def test_override_server_args_install_restore():
    o = get_context().override_server_args(tp_size=2)
    o.install()
    try:
        assert get_parallel().dist_init_addr is None and get_server_args().tp_size == 2
    finally:
        o.restore()
    with pytest.raises(ContextError):
        get_server_args()


def test_bag_override_is_scoped(published):
    with get_device().override(device="meta"):
        assert get_device().device == "meta"
    assert get_device().device == "cpu"
    with pytest.raises(BagError, match="'attention' is a sub-bag of config bag 'exec'"):
        get_exec().override(attention=1)


# -- flags, resources, forward --------------------------------------------------------


def test_flag_groups_are_typo_safe():
    with pytest.raises(AttributeError, match=r"CaptureFlags has no flag 'captureing' \(did you mean capturing"):
        get_flags().capture.captureing = True


def test_flag_override_is_transactional_and_scoped():
    with pytest.raises(AttributeError):
        get_flags().capture.override(enabled=True, nope=1)
    assert get_flags().capture.enabled is False
    with get_flags().capture.override(enabled=True):
        assert get_flags().capture.enabled is True
    assert get_flags().capture.enabled is False


def test_streams_are_leased_by_name_and_refused_during_capture(published):
    assert get_stream("alt") is get_stream("alt")
    with get_flags().capture.override(capturing=True), pytest.raises(ResourceError, match="during graph capture"):
        get_stream("offload")
    assert get_stream("alt") is not None  # an existing lease is fine during capture


def test_buffers_are_created_once():
    calls = []
    a = get_buffer("ws", lambda: calls.append(1) or bytearray(4))
    assert get_buffer("ws", lambda: calls.append(1)) is a and calls == [1]


def test_forward_scoped_restores_on_exit_and_exception():
    fwd = get_forward()
    with fwd.scoped(is_extend_in_batch=True, enable_multi_stream=True):
        assert fwd.is_extend_in_batch is True and fwd.enable_multi_stream is True
    assert fwd.is_extend_in_batch is False and fwd.enable_multi_stream is False
    with pytest.raises(KeyError), fwd.scoped(forward_mode="decode"):
        raise KeyError
    assert fwd.forward_mode is None


def test_forward_set_is_sticky_and_new_threads_see_defaults():
    fwd = get_forward()
    fwd.set("is_extend_in_batch", True)
    seen = []
    t = threading.Thread(target=lambda: seen.append(fwd.is_extend_in_batch))
    t.start()
    t.join()
    assert fwd.is_extend_in_batch is True and seen == [False]


def test_forward_flags_refuse_plain_assignment_and_unknown_names():
    with pytest.raises(AttributeError, match=r"get_forward\(\)\.scoped"):
        get_forward().is_extend_in_batch = True
    with pytest.raises(AttributeError, match="no per-forward flag 'nope'"):
        get_forward().scoped(nope=1).__enter__()


def test_graph_visible_forward_flags_are_plain_attributes():
    assert "enable_multi_stream" in get_forward().__dict__


# -- parallel -----------------------------------------------------------------------


def test_config_leaves_resolve_through_the_parallel_bag(published):
    assert get_parallel().nnodes == 1 and get_parallel().dist_init_addr is None


def test_live_wins_on_name_collisions(published):
    with get_parallel().override(tp_size=4, tp_rank=3):
        assert get_parallel().tp_size == 4 and get_parallel().tp_rank == 3
    assert published.tp_size == 1


def test_private_names_are_refused(published):
    with pytest.raises(AttributeError):
        get_parallel()._anything


def test_detokenizer_never_publishes():
    with pytest.raises(ContextError, match="the detokenizer never publishes"):
        publish(ServerArgs(model_path="dummy"), role="detokenizer")


def test_reset_context_installs_fresh_tiers(published):
    flags, fwd = get_flags(), get_forward()
    reset_context()
    assert get_flags() is not flags and get_forward() is not fwd
    with pytest.raises(BagError):
        get_schedule().schedule_policy


def test_reserved_accessors_are_exactly_the_ones_nothing_reads():
    """Every tier accessor has a reader in the package, or is listed once in RESERVED_BY_SPEC with the reason."""
    import ast
    from pathlib import Path

    import sglang.srt.runtime_context as rc

    root = Path(rc.__file__).resolve().parents[1]
    read: set[str] = set()
    for path in root.rglob("*.py"):
        if path == Path(rc.__file__).resolve():
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module == "sglang.srt.runtime_context":
                read |= {a.name for a in node.names}
            elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in ("rc", "runtime_context"):
                read.add(node.attr)
    tiers = {n for n in rc.__all__ if n.startswith(("get_", "set_")) and n != "get_context"}
    unread = tiers - read
    assert unread == set(rc.RESERVED_BY_SPEC), f"unread but not reserved: {unread - set(rc.RESERVED_BY_SPEC)}; reserved but read: {set(rc.RESERVED_BY_SPEC) - unread}"
    assert all(reason for reason in rc.RESERVED_BY_SPEC.values())
