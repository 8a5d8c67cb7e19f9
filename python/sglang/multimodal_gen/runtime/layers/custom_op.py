"""``CustomOp``: one op, several implementations, dispatch fixed at construction.

Dispatch order, for the key ``k = current_platform.get_dispatch_key_name()``:

1. a function registered with ``CustomOp.register_oot_forward(OpCls, fn=...,
   platform_key=k)`` for exactly this op class (not inherited); it receives
   the op instance first, then the normal arguments;
2. a ``forward_<k>()`` defined by the op class or a base *below* ``CustomOp``;
3. on an out-of-tree platform ``forward_oot()`` (whose default calls
   ``forward_native()``); on a built-in platform ``forward_native()``.

The choice is made in ``__init__``, after ``initialize_current_platform()``
(which ``__init__`` calls, so backend initialization always comes first), and
never changes afterwards: a compiled op keeps the callable it was built with.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import Any

from torch import nn


class CustomOpError(TypeError):
    """A bad ``register_oot_forward`` call, rejected when it is made."""


class CustomOp(nn.Module):
    """Base of every dispatchable op of the diffusion runtime."""

    _oot_forwards: dict[tuple[type, str], Callable[..., Any]] = {}
    _lock = threading.Lock()

    def __init__(self) -> None:
        super().__init__()
        self._forward_method, self.dispatch_source = self.dispatch_forward()

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        return self._forward_method(*args, **kwargs)

    def forward_native(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(f"{type(self).__qualname__} must implement forward_native()")

    def forward_oot(self, *args: Any, **kwargs: Any) -> Any:
        """Fallback on out-of-tree platforms; override per op, defaults to native."""
        return self.forward_native(*args, **kwargs)

    def dispatch_forward(self) -> tuple[Callable[..., Any], str]:
        """Pick the implementation for the current platform: (callable, where it came from)."""
        from sglang.multimodal_gen.runtime.platforms import initialize_current_platform

        plat = initialize_current_platform()
        key = plat.get_dispatch_key_name()
        fn = CustomOp._oot_forwards.get((type(self), key))
        if fn is not None:
            return functools.partial(fn, self), f"registered:{getattr(fn, '__qualname__', fn)}"
        method = f"forward_{key}"
        for klass in type(self).__mro__:
            if klass is CustomOp:
                break
            if method in klass.__dict__:
                return getattr(self, method), f"{klass.__qualname__}.{method}"
        if plat.is_out_of_tree():
            return self.forward_oot, "forward_oot"
        return self.forward_native, "forward_native"

    @classmethod
    def register_oot_forward(cls, op_cls: type[CustomOp], fn: Callable[..., Any], platform_key: str) -> None:
        """Use ``fn(op, *args, **kwargs)`` for ``op_cls`` on platforms whose dispatch key name is ``platform_key``.

        Call it from ``Platform.init_backend()``: ops built afterwards pick it
        up; ops already built keep their implementation. Exact class match:
        subclasses of ``op_cls`` are not affected.
        """
        if not (isinstance(op_cls, type) and issubclass(op_cls, CustomOp)) or op_cls is CustomOp:
            raise CustomOpError(f"register_oot_forward: op_cls must be a CustomOp subclass, got {op_cls!r}")
        if not callable(fn):
            raise CustomOpError(f"register_oot_forward({op_cls.__qualname__}): fn must be callable, got {type(fn).__name__}")
        if not isinstance(platform_key, str) or not platform_key.strip():
            raise CustomOpError(
                f"register_oot_forward({op_cls.__qualname__}): platform_key must be the non-blank string your "
                f"platform's get_dispatch_key_name() returns, got {platform_key!r}"
            )
        with cls._lock:
            CustomOp._oot_forwards[(op_cls, platform_key)] = fn

    def extra_repr(self) -> str:
        return f"dispatch={self.dispatch_source}"

