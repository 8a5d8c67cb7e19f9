"""The runtime context in fresh interpreters: live topology over torch.distributed, role-namespace modes."""

from __future__ import annotations

import pytest

from helpers.dists import ok, run_python
from sglang.srt.runtime_context import (
    reset_context,
)

pytestmark = [pytest.mark.slow]


@pytest.fixture(autouse=True)
def _clean_context():
    reset_context()
    yield
    reset_context()


# -- config bags ------------------------------------------------------------------


def test_live_topology_fails_loudly_before_init():
    # a fresh interpreter: torch.distributed state is process-wide
    code = """
    from sglang.srt.runtime_context import get_parallel
    try:
        get_parallel().tp_rank
    except Exception as e:
        print(type(e).__name__, e)
    """
    out = ok(run_python(code))
    assert out.startswith("ParallelStateError get_parallel().tp_rank read before torch.distributed is initialized")


def test_live_topology_reads_through_torch_distributed(tmp_path):
    code = f"""
    from sglang.srt.distributed import init_distributed_environment, initialize_model_parallel, destroy_model_parallel
    from sglang.srt.runtime_context import get_parallel
    init_distributed_environment("gloo", 1, 0, "file://{tmp_path}/store")
    initialize_model_parallel(1)
    p = get_parallel()
    print(p.world_size, p.rank, p.tp_size, p.tp_rank, p.pp_size, p.tp_group is not None)
    destroy_model_parallel()
    """
    assert ok(run_python(code)).split() == ["1", "0", "1", "0", "1", "True"]


# -- roles --------------------------------------------------------------------------


def test_bad_role_namespace_mode_fails_loudly():
    out = run_python("from sglang.srt.runtime_context import publish\nfrom sglang.srt.server_args import ServerArgs\npublish(ServerArgs(model_path='dummy'), role='x')",
                     env={**__import__("os").environ, "SGLANG_ROLE_NAMESPACES": "audit"})
    assert out.returncode != 0 and "SGLANG_ROLE_NAMESPACES='audit' is not one of off, record, enforce" in out.stderr


def test_record_mode_appends_each_role_namespace_pair_once(tmp_path):
    out = tmp_path / "roles.txt"
    code = """
    from sglang.srt.runtime_context import publish, get_schedule, get_memory, get_parallel
    from sglang.srt.server_args import ServerArgs
    publish(ServerArgs(model_path='dummy'), role='scheduler')
    get_schedule().schedule_policy; get_schedule().disable_radix_cache; get_memory().page_size; get_parallel().nnodes
    """
    import os

    ok(run_python(code, env={**os.environ, "SGLANG_ROLE_NAMESPACES": "record", "SGLANG_ROLE_NAMESPACES_OUT": str(out)}))
    assert out.read_text().splitlines() == ["scheduler schedule", "scheduler memory", "scheduler parallel"]


def test_enforce_mode_refuses_reads_outside_the_role_set():
    code = """
    from sglang.srt.runtime_context import ROLE_NAMESPACE_SETS, publish, get_serving, get_schedule
    from sglang.srt.server_args import ServerArgs
    ROLE_NAMESPACE_SETS['tokenizer'] = frozenset({'serving'})
    publish(ServerArgs(model_path='dummy'), role='tokenizer')
    print(get_serving().port)
    try:
        get_schedule()
    except Exception as e:
        print(type(e).__name__, e)
    """
    import os

    out = ok(run_python(code, env={**os.environ, "SGLANG_ROLE_NAMESPACES": "enforce"}))
    assert "30000" in out and "RoleNamespaceError role 'tokenizer' read namespace 'schedule'" in out


