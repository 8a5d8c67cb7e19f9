"""The data-parallel controller's routing policies (``--load-balance-method``)."""

from __future__ import annotations

import pytest

from sglang.srt.managers.data_parallel_controller import (
    BALANCE_ABS_THRESHOLD,
    ControllerError,
    DataParallelController,
    PrefixBlocks,
    block_chain,
)

PREFIX = list(range(1000, 1200))  # 200 shared tokens


def test_round_robin_cycles_whatever_the_load():
    c = DataParallelController(3, "round_robin")
    assert [c.route(f"r{i}", [1, 2, 3]) for i in range(7)] == [0, 1, 2, 0, 1, 2, 0]
    assert c.loads == [3, 2, 2] and c.routed == [3, 2, 2]


def test_shortest_queue_follows_unfinished_requests():
    c = DataParallelController(2, "shortest_queue")
    assert [c.route(r, [1]) for r in ("a", "b", "c")] == [0, 1, 0]
    c.finish("a")
    c.finish("c")
    assert c.loads == [0, 1]
    assert c.route("d", [1]) == 0  # replica 0 is idle again
    c.finish("d")
    c.finish("d")  # finishing twice is a no-op
    c.finish("unknown")
    assert c.loads == [0, 1]


def test_cache_aware_sends_a_shared_prefix_to_one_replica_and_spreads_the_rest():
    c = DataParallelController(2, "cache_aware", block=16)
    shared = [c.route(f"p{i}", PREFIX + [i, i + 1]) for i in range(10)]
    assert len(set(shared)) == 1  # every request after the first finds the prefix where the first went
    other = 1 - shared[0]
    assert c.route("fresh", list(range(5000, 5100))) == other  # no match: the replica caching less
    assert c.routed[shared[0]] == 10


def test_cache_aware_falls_back_to_the_shortest_queue_when_imbalanced():
    c = DataParallelController(2, "cache_aware", block=16)
    first = c.route("seed", PREFIX)
    for i in range(BALANCE_ABS_THRESHOLD * 2):
        c.route(f"busy{i}", PREFIX + [i])
    assert c.loads[first] > BALANCE_ABS_THRESHOLD  # all on one replica so far: the prefix matched
    assert c.route("next", PREFIX + [9999]) == 1 - first  # now the imbalance wins over the cache


def test_prefix_blocks_match_leading_blocks_and_evict_least_recent():
    a, b = block_chain(list(range(64)), 16), block_chain(list(range(100, 164)), 16)
    assert len(a) == 4 and block_chain(list(range(15)), 16) == []
    assert block_chain(list(range(32)) + [7] * 16, 16)[:2] == a[:2] != block_chain([7] * 16 + list(range(32)), 16)[:2]
    t = PrefixBlocks(capacity_blocks=6)
    t.insert(a)
    assert t.matched(a) == 4 and t.matched(b) == 0
    t.insert(b)  # 8 blocks > 6: a's oldest two go
    assert t.matched(b) == 4 and t.matched(a) == 0 and len(t.blocks) == 6


def test_unknown_method_names_the_supported_ones():
    with pytest.raises(ControllerError, match="round_robin, shortest_queue, cache_aware"):
        DataParallelController(2, "random")


def test_one_replica_always_routes_to_it():
    c = DataParallelController(1, "cache_aware")
    assert {c.route(f"r{i}", [i] * 40) for i in range(5)} == {0}


def test_ray_bundles_interleave_nodes_from_the_launchers():
    from sglang.srt.ray.placement import interleave

    nodes = {0: "B", 1: "A", 2: "C", 3: "A", 4: "B", 5: "C"}
    order = interleave(nodes, "A")
    assert [nodes[i] for i in order] == ["A", "B", "C", "A", "B", "C"]  # each replica of TP 3: one rank per node
    assert order[0] == 1 and sorted(order) == list(range(6))
    assert interleave({0: "X", 1: "Y", 2: "X"}, "A") == [0, 1, 2]  # the launcher's node holds none: in turn still


def test_the_ray_bundle_of_a_rank_comes_from_the_platform():
    from sglang.srt.platforms.cpu import CpuSRTPlatform
    from sglang.srt.platforms.cuda import CudaSRTPlatform

    assert CpuSRTPlatform().get_ray_bundle(2) == {"CPU": 2.0}
    assert CudaSRTPlatform().get_ray_bundle(4) == {"GPU": 1.0, "CPU": 4.0}
