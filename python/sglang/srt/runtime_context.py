"""``RuntimeContext``: the one owner of process-static runtime state.

Tiers (see docs/runtime_context.md):

=====================  ==============================  ==========================================
tier                   accessor                        holds
=====================  ==============================  ==========================================
raw config seed        ``get_server_args()``           the published, pristine ``ServerArgs``
resolved config        ``get_exec()`` ... ``get_device()``  namespace config bags (source of truth)
runtime flags          ``get_flags()``                 ``capture`` / ``moe`` / ``dp`` groups
resources              ``get_stream()``, ``get_buffer()``  named streams and buffers
per-forward            ``get_forward()``               contextvar-backed forward flags
parallel               ``get_parallel()``              live topology + parallel config leaves
=====================  ==============================  ==========================================

Every publishing process entry calls ``publish(server_args, role=...)``; the
detokenizer never publishes. After publish, the only writer of resolved
config is ``get_context().override(source, **fields)``.
"""

from __future__ import annotations

import contextlib
import copy
import logging
import warnings
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from sglang.srt.arg_groups.meta import NAMESPACES, field_arg, public_fields
from sglang.srt.arg_groups.resolution import suggest
from sglang.srt.context.bags import ConfigBag, Unpublished, project
from sglang.srt.context.flags import Flags
from sglang.srt.context.forward import ForwardFlags
from sglang.srt.context.parallel import ParallelContext
from sglang.srt.context.resources import Resources
from sglang.srt.context.roles import ROLE_NAMESPACE_SETS, RoleAudit, read_mode

if TYPE_CHECKING:
    from sglang.srt.server_args import ServerArgs

logger = logging.getLogger(__name__)


# Tiers and bags the spec names that no subsystem of this build reads yet. They exist, and are
# tested, so code written against the spec (and upstream) imports and runs; this is the one list
# of them, and tests/unit/test_runtime_context.py keeps it exact both ways (a reader appears: drop
# the entry; a new accessor nobody reads: list it here with the reason).
RESERVED_BY_SPEC: dict[str, str] = {
    "get_mm": "multimodal inputs are not implemented in the SRT runtime",
    "get_model": "the model runner reads the model's own config at load time",
    "get_serving": "the HTTP server reads its own ServerArgs: several engines may share a process",
    "get_observability": "the HTTP server reads its own ServerArgs: several engines may share a process",
    "get_forward": "no per-forward flag is set by this build's forward passes",
    "get_resources": "no subsystem shares a named stream or buffer on the built-in platforms",
    "get_stream": "no subsystem shares a named stream on the built-in platforms",
    "set_stream": "no subsystem shares a named stream on the built-in platforms",
    "get_buffer": "no subsystem shares a named buffer on the built-in platforms",
}


class RepublishWarning(UserWarning):
    """A re-publish dropped post-publish overrides."""


class ContextError(RuntimeError):
    """Misuse of the runtime context; the message says what to call instead."""


class RuntimeContext:
    """Process singleton (``get_context()``); every tier hangs off it."""

    def __init__(self) -> None:
        self.bags: dict[str, ConfigBag | Unpublished] = {}
        self.parallel = ParallelContext(self.bags)
        self._reset()

    def _reset(self) -> None:
        self.server_args: ServerArgs | None = None
        self.role: str | None = None
        self.bags.clear()
        self.bags.update({ns: Unpublished(ns) for ns in NAMESPACES})
        self._index: dict[str, ConfigBag] = {}
        self._choices: dict[str, Any] = {}
        self._overrides: list[tuple[str, dict[str, Any]]] = []
        self.flags = Flags()
        self.resources = Resources()
        self.forward = ForwardFlags()
        self.parallel._override = None

    # -- publish -------------------------------------------------------------
    def publish(self, server_args: ServerArgs, role: str, *, warn: bool = True) -> None:
        from sglang.srt.server_args import ServerArgs

        if role == "detokenizer":
            raise ContextError("the detokenizer never publishes: it reads only the raw config handed to its constructor")
        if not isinstance(server_args, ServerArgs):
            raise TypeError(f"publish() takes a ServerArgs, got {type(server_args).__name__}")
        mode = read_mode()
        if warn and self.server_args is not None and self._overrides:
            dropped = "; ".join(f"{src}: {', '.join(f'{k}={v!r}' for k, v in f.items())}" for src, f in self._overrides)
            warnings.warn(
                f"re-publish (role={role!r}) is last-publish-wins and drops {len(self._overrides)} post-publish "
                f"override(s): {dropped}",
                RepublishWarning,
                stacklevel=3,
            )
        tops, index = project(server_args)
        self.bags.update(tops)
        self._index = index
        self._choices = {f.name: field_arg(f).choices for f in public_fields(type(server_args)) if field_arg(f).choices is not None}
        self.server_args = server_args
        self.role = role
        self._overrides = []
        _AUDIT.configure(mode, role)

    def is_published(self, server_args: ServerArgs) -> bool:
        return self.server_args is not None and self.server_args is server_args

    # -- overrides ------------------------------------------------------------
    def override(self, source: str, **fields: Any) -> None:
        """Write resolved config after publish. Validates every field before writing any.

        Routed by flat field name to its bag leaf; logged with provenance;
        never written through to ``ServerArgs``.
        """
        if self.server_args is None:
            raise ContextError(f"override({source!r}) before publish: call publish(server_args, role=...) first")
        for k, v in fields.items():
            if k not in self._index:
                raise KeyError(f"override({source!r}): unknown config field {k!r}{suggest(k, list(self._index))}")
            choices = self._choices.get(k)
            if choices is not None and v not in choices:
                raise ValueError(f"override({source!r}): {k}={v!r} is not one of {list(choices)}")
        for k, v in fields.items():
            self._index[k].__dict__[k] = v
        self._overrides.append((source, dict(fields)))
        logger.info("config override by %s: %s", source, fields)

    def overrides_log(self) -> list[tuple[str, dict[str, Any]]]:
        return [(s, dict(f)) for s, f in self._overrides]

    def resolved_config(self) -> dict[str, Any]:
        """The published base values with every logged override applied."""
        if self.server_args is None:
            raise ContextError("resolved_config() before publish")
        out = self.server_args.to_dict()
        for _, fields in self._overrides:
            out.update(fields)
        return out

    # -- scopes ---------------------------------------------------------------
    def _snapshot(self) -> tuple[Any, ...]:
        values = {id(b): copy.copy(b.leaves()) for ns in NAMESPACES if isinstance(self.bags[ns], ConfigBag) for b in self.bags[ns].walk()}
        return (self.server_args, self.role, dict(self.bags), dict(self._index), list(self._overrides), values, _AUDIT.mode)

    def _restore(self, snap: tuple[Any, ...]) -> None:
        sa, role, bags, index, overrides, values, mode = snap
        self.server_args, self.role, self._index, self._overrides = sa, role, index, overrides
        self.bags.clear()
        self.bags.update(bags)
        for ns in NAMESPACES:
            if isinstance(self.bags[ns], ConfigBag):
                for b in self.bags[ns].walk():
                    b.__dict__.update(values.get(id(b), {}))
        _AUDIT.configure(mode, role)

    @contextlib.contextmanager
    def preserve_config(self) -> Iterator[RuntimeContext]:
        """Snapshot published config *values*; reinstate them on exit (also on exception).

        An override made inside the scope without a re-publish is undone too.
        """
        snap = self._snapshot()
        try:
            yield self
        finally:
            self._restore(snap)

    def override_server_args(self, **fields: Any) -> override_server_args:
        return override_server_args(**fields)


_CONTEXT = RuntimeContext()
_AUDIT = RoleAudit()


def get_context() -> RuntimeContext:
    return _CONTEXT


def publish(server_args: ServerArgs, role: str) -> None:
    """Project ``server_args`` into the bags for this process; last publish wins."""
    _CONTEXT.publish(server_args, role)


def reset_context() -> None:
    """Drop the published config; fresh flags, resources and forward tiers (test teardown)."""
    _CONTEXT._reset()
    _AUDIT.configure("off", None)


def get_server_args() -> ServerArgs:
    """The published pristine ``ServerArgs`` (for dumps, fork copies, whole-object passes)."""
    sa = _CONTEXT.server_args
    if sa is None:
        raise ContextError("get_server_args() before publish: call publish(server_args, role=...) at process entry")
    return sa


def _accessor(ns: str) -> Callable[[], Any]:
    def get() -> Any:
        if _AUDIT.active:
            _AUDIT.observe(ns)
        return _CONTEXT.bags[ns]

    get.__name__ = get.__qualname__ = f"get_{ns}"
    get.__doc__ = f"The ``{ns}`` config bag (fails closed before publish)."
    return get


get_exec = _accessor("exec")
get_memory = _accessor("memory")
get_schedule = _accessor("schedule")
get_model = _accessor("model")
get_spec = _accessor("spec")
get_serving = _accessor("serving")
get_observability = _accessor("observability")
get_disagg = _accessor("disagg")
get_lora = _accessor("lora")
get_mm = _accessor("mm")
get_device = _accessor("device")


def get_parallel() -> ParallelContext:
    if _AUDIT.active:
        _AUDIT.observe("parallel")
    return _CONTEXT.parallel


def get_flags() -> Flags:
    return _CONTEXT.flags


def get_forward() -> ForwardFlags:
    return _CONTEXT.forward


def get_resources() -> Resources:
    return _CONTEXT.resources


def _device_type() -> str:
    bag = _CONTEXT.bags["device"]
    if isinstance(bag, ConfigBag) and bag.device not in ("auto", None):
        return bag.device
    from sglang.srt.platforms import current_platform

    return current_platform.device_type if current_platform.device_type != "unknown" else "cpu"


def get_stream(name: str) -> Any:
    """Get or create the named side stream (names lease a subsystem role, e.g. "alt")."""
    return _CONTEXT.resources.get_stream(name, _CONTEXT.flags.capture.capturing, _device_type())


def set_stream(name: str, stream: Any) -> None:
    _CONTEXT.resources.streams[name] = stream


def get_buffer(name: str, factory: Callable[[], Any]) -> Any:
    """Get or create the named persistent buffer with ``factory``."""
    return _CONTEXT.resources.get_buffer(name, factory, _CONTEXT.flags.capture.capturing)


class override_server_args:
    """Publish a fresh dummy-boundary ``ServerArgs`` carrying ``fields`` (test idiom).

    ``with override_server_args(tp_size=2): ...`` or ``install()`` / ``restore()``
    for fixture lifetimes. A class, not a generator: restoring must not wait
    for garbage collection.
    """

    def __init__(self, **fields: Any) -> None:
        self.fields = fields
        self._saved: tuple[Any, ...] | None = None

    def install(self) -> ServerArgs:
        from sglang.srt.server_args import DUMMY_MODEL, ServerArgs

        if self._saved is not None:
            raise ContextError("override_server_args is already installed; restore() it first")
        if "model_path" in self.fields:
            raise ContextError(f"override_server_args publishes the dummy boundary (model_path={DUMMY_MODEL!r}); model_path cannot be set")
        sa = ServerArgs(model_path=DUMMY_MODEL, **self.fields)
        self._saved = _CONTEXT._snapshot()
        _CONTEXT.publish(sa, _CONTEXT.role or "test", warn=False)
        return sa

    def restore(self) -> None:
        if self._saved is not None:
            _CONTEXT._restore(self._saved)
            self._saved = None

    def __enter__(self) -> ServerArgs:
        return self.install()

    def __exit__(self, *exc: object) -> None:
        self.restore()


__all__ = [
    "RESERVED_BY_SPEC",
    "ROLE_NAMESPACE_SETS",
    "ContextError",
    "RepublishWarning",
    "RuntimeContext",
    "get_buffer",
    "get_context",
    "get_device",
    "get_disagg",
    "get_exec",
    "get_flags",
    "get_forward",
    "get_lora",
    "get_memory",
    "get_mm",
    "get_model",
    "get_observability",
    "get_parallel",
    "get_resources",
    "get_schedule",
    "get_server_args",
    "get_serving",
    "get_spec",
    "get_stream",
    "override_server_args",
    "publish",
    "reset_context",
    "set_stream",
]
