"""cpu_binding: which cores the decode step's threads and the front-end processes get (the rule; the served binding is
checked in tests/e2e/test_server.py)."""

from __future__ import annotations

import os

import pytest

from sglang.srt.managers.cpu_binding import ENV, CpuBinding, CpuBindingError, allowed_cpus, plan_binding
from sglang.srt.server_args import ServerArgs


@pytest.fixture(autouse=True)
def _no_env(monkeypatch):
    monkeypatch.delenv(ENV, raising=False)


def test_a_single_scheduler_using_every_core_binds_them_and_puts_the_front_ends_on_the_last():
    assert plan_binding(ServerArgs(), allowed=(0, 1)) == CpuBinding((0, 1), (1,))
    assert plan_binding(ServerArgs(), allowed=(2, 5, 7), threads=3) == CpuBinding((2, 5, 7), (7,))


@pytest.mark.parametrize("args", [dict(tp_size=2), dict(dp_size=2), dict(nnodes=2), dict(use_ray=True), dict(device="cuda")])
def test_several_schedulers_another_device_or_a_cluster_bind_nothing_by_default(args):
    assert plan_binding(ServerArgs(**args), allowed=(0, 1)) is None


def test_one_core_or_a_step_that_leaves_cores_free_binds_nothing():
    assert plan_binding(ServerArgs(), allowed=(0,)) is None
    assert plan_binding(ServerArgs(), allowed=(0, 1, 2, 3), threads=2) is None


def test_off_binds_nothing_and_auto_is_the_default(monkeypatch):
    monkeypatch.setenv(ENV, "off")
    assert plan_binding(ServerArgs(), allowed=(0, 1)) is None
    monkeypatch.setenv(ENV, "auto")
    assert plan_binding(ServerArgs(), allowed=(0, 1)) == CpuBinding((0, 1), (1,))


def test_upstreams_ranges_give_each_tp_rank_its_cores_and_leave_the_front_ends_alone(monkeypatch):
    monkeypatch.setenv(ENV, "0-1|2,3")
    sa = ServerArgs(tp_size=2)
    assert plan_binding(sa, tp_rank=0, allowed=(0, 1, 2, 3)) == CpuBinding((0, 1), None)
    assert plan_binding(sa, tp_rank=1, allowed=(0, 1, 2, 3)) == CpuBinding((2, 3), None)
    monkeypatch.setenv(ENV, "0|1|2|3")  # replica 1's ranks follow replica 0's
    assert plan_binding(ServerArgs(tp_size=2, dp_size=2), tp_rank=1, dp_rank=1, allowed=(0, 1, 2, 3)) == CpuBinding((3,), None)


@pytest.mark.parametrize("value, rank, words", [
    ("0-1", 1, "names 1 core range(s) but rank 1 needs one"),
    ("a-b|2-3", 0, "'a-b' is not a core or a range"),
    ("3-1|0", 0, "'3-1' is not a range of cores"),
    ("0,0|1", 0, "names a core twice"),
    ("0-9|1", 0, "cores [2, 3, 4, 5, 6, 7, 8, 9] are not among those this process may use"),
])
def test_a_value_that_cannot_apply_names_the_variable_and_what_is_wrong(monkeypatch, value, rank, words):
    monkeypatch.setenv(ENV, value)
    with pytest.raises(CpuBindingError) as err:
        plan_binding(ServerArgs(tp_size=2), tp_rank=rank, allowed=(0, 1))
    assert ENV in str(err.value) and words in str(err.value)


def test_the_allowed_cores_are_this_processs():
    assert set(allowed_cpus()) == os.sched_getaffinity(0)
