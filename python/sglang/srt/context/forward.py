"""Per-forward flags: set for one forward, read within it.

Context-variable backed, so a new thread sees the defaults and ``scoped``
restores on exit and on exception. Flags read inside compiled model code
(``_GRAPH_VISIBLE``) are plain instance attributes instead: contextvars are
untraceable by dynamo, and attribute-sourced bools cost at most two graphs.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator
from typing import Any, ClassVar


class ForwardFlags:
    # name -> default, as plain attributes readable inside torch.compile
    _GRAPH_VISIBLE: ClassVar[dict[str, Any]] = {"enable_multi_stream": False}
    # name -> default, per context (thread / task)
    _CONTEXT: ClassVar[dict[str, Any]] = {"is_extend_in_batch": False, "forward_mode": None}

    def __init__(self) -> None:
        for k, v in self._GRAPH_VISIBLE.items():
            object.__setattr__(self, k, v)
        object.__setattr__(self, "_vars", {k: contextvars.ContextVar(f"sglang_forward_{k}", default=v) for k, v in self._CONTEXT.items()})

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        var = self._vars.get(name)
        if var is None:
            raise AttributeError(f"no per-forward flag {name!r}; declared: {sorted({**self._GRAPH_VISIBLE, **self._CONTEXT})}")
        return var.get()

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"per-forward flag {name!r}: write with get_forward().scoped({name}=...) or the sticky get_forward().set({name!r}, value)")

    def _check(self, names: Any) -> None:
        for k in names:
            if k not in self._GRAPH_VISIBLE and k not in self._CONTEXT:
                self.__getattr__(k)

    def set(self, name: str, value: Any) -> None:
        """Sticky write (legacy setters); prefer ``scoped``."""
        self._check([name])
        if name in self._GRAPH_VISIBLE:
            object.__setattr__(self, name, value)
        else:
            self._vars[name].set(value)

    @contextlib.contextmanager
    def scoped(self, **kw: Any) -> Iterator[ForwardFlags]:
        """Set flags for the block; restored on exit and on exception."""
        self._check(kw)
        saved = {k: self.__dict__[k] for k in kw if k in self._GRAPH_VISIBLE}
        tokens = [self._vars[k].set(v) for k, v in kw.items() if k in self._CONTEXT]
        for k in saved:
            object.__setattr__(self, k, kw[k])
        try:
            yield self
        finally:
            for k, v in saved.items():
                object.__setattr__(self, k, v)
            for t in reversed(tokens):
                t.var.reset(t)
