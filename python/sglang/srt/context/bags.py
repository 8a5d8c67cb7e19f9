"""Namespace config bags, projected from ``ServerArgs`` at publish.

Leaves and sub-bags are plain instance attributes, so reads are as cheap as
any attribute read and traceable by torch.compile. Assignment always raises:
the only writer is ``get_context().override`` (and the scoped test idiom
``bag.override(**kw)``).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from sglang.srt.arg_groups.meta import NAMESPACES, field_ns, public_fields

if TYPE_CHECKING:
    from sglang.srt.server_args import ServerArgs


class BagError(AttributeError):
    """A bag was written, or read before publish."""


class ConfigBag:
    """One namespace (or sub-namespace) of resolved configuration."""

    def __init__(self, path: str) -> None:
        object.__setattr__(self, "_path", path)

    def __setattr__(self, name: str, value: Any) -> None:
        raise BagError(
            f"config bag '{self._path}' is sealed: change '{name}' with get_context().override(source, {name}=...) "
            f"(tests: `with get_{self._path.split('.')[0]}().override({name}=...)`)"
        )

    def __delattr__(self, name: str) -> None:
        raise BagError(f"config bag '{self._path}' is sealed: '{name}' cannot be deleted")

    def __repr__(self) -> str:
        return f"ConfigBag({self._path}: {', '.join(f'{k}={v!r}' for k, v in self.leaves().items())})"

    def leaves(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if not k.startswith("_") and not isinstance(v, ConfigBag)}

    def sub_bags(self) -> dict[str, ConfigBag]:
        return {k: v for k, v in self.__dict__.items() if isinstance(v, ConfigBag)}

    def as_dict(self) -> dict[str, Any]:
        return {**self.leaves(), **{k: b.as_dict() for k, b in self.sub_bags().items()}}

    def walk(self) -> Iterator[ConfigBag]:
        yield self
        for b in self.sub_bags().values():
            yield from b.walk()

    def override(self, **leaves: Any) -> BagOverride:
        """Scoped override of this bag's own leaves (a test idiom); restores on exit."""
        own = self.leaves()
        for k in leaves:
            if k not in own:
                kind = "a sub-bag" if k in self.sub_bags() else "not a leaf"
                raise BagError(f"'{k}' is {kind} of config bag '{self._path}'; its leaves: {sorted(own)}")
        return BagOverride(self, leaves)


class BagOverride:
    def __init__(self, bag: ConfigBag, leaves: dict[str, Any]) -> None:
        self.bag, self.leaves = bag, leaves
        self.saved: dict[str, Any] = {}

    def __enter__(self) -> ConfigBag:
        self.saved = {k: self.bag.__dict__[k] for k in self.leaves}
        self.bag.__dict__.update(self.leaves)
        return self.bag

    def __exit__(self, *exc: object) -> None:
        self.bag.__dict__.update(self.saved)


class Unpublished:
    """Stands in for a bag before publish: every read fails closed."""

    def __init__(self, ns: str) -> None:
        object.__setattr__(self, "_ns", ns)

    def __getattr__(self, name: str) -> Any:
        raise BagError(
            f"namespace '{self._ns}' not published: read of '{name}' before "
            "sglang.srt.runtime_context.publish(server_args, role=...) ran in this process "
            "(tests: use get_context().override_server_args(...))"
        )

    def __setattr__(self, name: str, value: Any) -> None:
        self.__getattr__(name)


def project(server_args: ServerArgs) -> tuple[dict[str, ConfigBag], dict[str, ConfigBag]]:
    """Build the bag tree from each field's ``NS``; returns (top bags, field -> owning bag).

    A leaf whose name equals a sub-bag's name (or a bag method) is an error.
    """
    tops = {ns: ConfigBag(ns) for ns in NAMESPACES}
    index: dict[str, ConfigBag] = {}
    reserved = {n for n in dir(ConfigBag) if not n.startswith("_")}
    for f in public_fields(type(server_args)):
        parts = field_ns(f).path.split(".")
        bag = tops[parts[0]]
        for part in parts[1:]:
            sub = bag.__dict__.get(part)
            if sub is None:
                if part in reserved:
                    raise ValueError(f"NS path {field_ns(f).path!r}: sub-bag name {part!r} collides with a ConfigBag method")
                sub = ConfigBag(f"{bag._path}.{part}")
                bag.__dict__[part] = sub
            elif not isinstance(sub, ConfigBag):
                raise ValueError(f"NS path {field_ns(f).path!r}: {part!r} is already a leaf of bag '{bag._path}'")
            bag = sub
        if f.name in bag.__dict__ or f.name in reserved:
            raise ValueError(f"field {f.name!r} collides with a sub-bag or method of bag '{bag._path}'")
        bag.__dict__[f.name] = getattr(server_args, f.name)
        index[f.name] = bag
    return tops, index
