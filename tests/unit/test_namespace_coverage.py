"""Namespace coverage, both ways: fields -> bags and bags -> fields."""

from __future__ import annotations

import dataclasses

import sglang.srt.runtime_context as rc
from sglang.srt.arg_groups.meta import ARG_KEY, NAMESPACES, NS_KEY
from sglang.srt.context.bags import project
from sglang.srt.server_args import ServerArgs


def missing_metadata(cls: type) -> list[str]:
    return [f.name for f in dataclasses.fields(cls) if NS_KEY not in f.metadata or ARG_KEY not in f.metadata]


def test_every_field_carries_ns_and_arg_metadata():
    assert missing_metadata(ServerArgs) == [], f"give these fields arg(default, Arg(...), NS('ns.sub')): {missing_metadata(ServerArgs)}"


def test_metadata_lint_fires_on_a_bare_field():
    @dataclasses.dataclass
    class Bare:
        plain: int = 1

    assert missing_metadata(Bare) == ["plain"]


def test_projected_bags_cover_the_fields_exactly():
    tops, index = project(ServerArgs(model_path="dummy"))
    leaves = {name for bag in tops.values() for b in bag.walk() for name in b.leaves()}
    assert leaves == {f.name for f in dataclasses.fields(ServerArgs)}
    assert set(index) == leaves


def test_every_namespace_has_an_accessor_and_back():
    accessors = {name[4:] for name in dir(rc) if name.startswith("get_") and name[4:] in NAMESPACES}
    assert accessors == set(NAMESPACES)


def test_leaf_sub_bag_collisions_raise_at_projection():
    import pytest

    from sglang.srt.arg_groups.meta import NS, Arg, arg

    @dataclasses.dataclass
    class Clash:
        attention: int = arg(1, Arg("x"), NS("exec"))
        backend: int = arg(2, Arg("y"), NS("exec.attention"))

    with pytest.raises(ValueError, match="'attention' is already a leaf of bag 'exec'"):
        project(Clash())
