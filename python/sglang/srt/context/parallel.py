"""``get_parallel()``: live topology plus the parallel config leaves.

Live topology (sizes, ranks, groups) is read through from ``torch.distributed``
and fails loudly before the process group and model-parallel groups exist.
Anything else resolves to a leaf of the ``parallel`` config bag through
``__getattr__``; live properties win on a name collision (``tp_size``), so a
config-intent read of a shadowed size stays on ``server_args.tp_size``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any


class ParallelStateError(RuntimeError):
    pass


_NO = object()


class _Live:
    """Groups installed by ``sglang.srt.distributed.initialize_model_parallel``."""

    def __init__(self, tp_group: Any, pp_group: Any = None) -> None:
        self.tp_group, self.pp_group = tp_group, pp_group


class ParallelContext:
    def __init__(self, bags: dict[str, Any]) -> None:
        self._bags = bags  # the context's bag table (shared, so re-publish is seen)
        self._live: _Live | None = None
        self._override: dict[str, Any] | None = None

    # -- live topology -------------------------------------------------------
    def _need_live(self, what: str) -> _Live:
        if self._live is None:
            raise ParallelStateError(
                f"get_parallel().{what} read before torch.distributed is initialized: call "
                "sglang.srt.distributed.init_distributed_environment() and initialize_model_parallel() first "
                "(tests: `with get_parallel().override(tp_size=..., tp_rank=...)`)"
            )
        return self._live

    def _ov(self, name: str) -> Any:
        return _NO if self._override is None else self._override.get(name, _NO)

    @property
    def world_size(self) -> int:
        if (v := self._ov("world_size")) is not _NO:
            return v
        self._need_live("world_size")
        import torch.distributed as dist

        return dist.get_world_size()

    @property
    def rank(self) -> int:
        if (v := self._ov("rank")) is not _NO:
            return v
        self._need_live("rank")
        import torch.distributed as dist

        return dist.get_rank()

    @property
    def tp_group(self) -> Any:
        if (v := self._ov("tp_group")) is not _NO:
            return v
        return self._need_live("tp_group").tp_group

    @property
    def tp_size(self) -> int:
        if (v := self._ov("tp_size")) is not _NO:
            return v
        import torch.distributed as dist

        return dist.get_world_size(self._need_live("tp_size").tp_group)

    @property
    def tp_rank(self) -> int:
        if (v := self._ov("tp_rank")) is not _NO:
            return v
        import torch.distributed as dist

        return dist.get_rank(self._need_live("tp_rank").tp_group)

    @property
    def pp_size(self) -> int:
        if (v := self._ov("pp_size")) is not _NO:
            return v
        self._need_live("pp_size")
        return 1  # pipeline parallelism is not built: one stage

    @property
    def pp_rank(self) -> int:
        if (v := self._ov("pp_rank")) is not _NO:
            return v
        self._need_live("pp_rank")
        return 0

    def is_initialized(self) -> bool:
        return self._live is not None

    def install_live(self, tp_group: Any, pp_group: Any = None) -> None:
        """Called by the distributed initializer once the groups exist."""
        self._live = _Live(tp_group, pp_group)

    def clear_live(self) -> None:
        self._live = None

    @contextlib.contextmanager
    def override(self, **live: Any) -> Iterator[ParallelContext]:
        """Scoped stand-in for live topology (tests): ``override(tp_size=2, tp_rank=1)``."""
        allowed = {"world_size", "rank", "tp_group", "tp_size", "tp_rank", "pp_size", "pp_rank"}
        bad = sorted(set(live) - allowed)
        if bad:
            raise AttributeError(f"get_parallel().override(): {bad} are not live topology; allowed: {sorted(allowed)}")
        saved = self._override
        self._override = {**(saved or {}), **live}
        try:
            yield self
        finally:
            self._override = saved

    # -- config leaves ---------------------------------------------------------
    def __getattr__(self, name: str) -> Any:
        # No object.__getattribute__ here: dynamo must trace this. Private
        # names are refused so pickling/copying never recurses into the bag.
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self._bags["parallel"], name)
