"""The rule that lets ``--use-ray`` fail at once: which placements can never fit the nodes a cluster has."""

from __future__ import annotations

from sglang.srt.ray.placement import shortfall

TWO_NODES = [{"CPU": 2.0, "memory": 1e9}, {"CPU": 2.0, "memory": 1e9}]


def test_strict_pack_needs_one_node_that_holds_every_bundle():
    assert shortfall([{"CPU": 1.0}] * 2, "STRICT_PACK", TWO_NODES) is None
    why = shortfall([{"CPU": 1.0}] * 3, "STRICT_PACK", TWO_NODES)  # 4 CPUs in all, but no node has 3
    assert why is not None and "'CPU': 3.0" in why


def test_spread_refuses_a_bundle_no_node_holds_and_a_sum_past_the_cluster():
    assert shortfall([{"CPU": 1.0}] * 4, "SPREAD", TWO_NODES) is None
    assert "no node holds a bundle of {'CPU': 3.0}" == shortfall([{"CPU": 3.0}], "SPREAD", TWO_NODES)
    assert "they need 5 CPU in all and the cluster has 4" == shortfall([{"CPU": 1.0}] * 5, "SPREAD", TWO_NODES)


def test_a_resource_no_node_has_is_a_shortfall_and_an_empty_cluster_holds_nothing():
    assert shortfall([{"CPU": 1.0, "GPU": 1.0}], "STRICT_PACK", TWO_NODES) is not None
    assert shortfall([{"CPU": 1.0}], "SPREAD", []) is not None
