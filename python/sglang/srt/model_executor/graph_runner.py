"""Graph runners: replay a captured forward, or run it eagerly.

A platform names its runner through ``get_graph_runner_cls()``; the engine
captures only when ``support_cuda_graph()`` says so.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any


class GraphRunner(ABC):
    """Runs the decode step ``forward_fn``; subclasses may capture it per batch size."""

    def __init__(self, forward_fn: Callable[..., Any], max_batch_size: int = 160) -> None:
        self.forward_fn = forward_fn
        self.max_batch_size = max_batch_size

    @abstractmethod
    def can_run(self, batch_size: int) -> bool: ...

    @abstractmethod
    def run(self, *args: Any, **kwargs: Any) -> Any: ...


class EagerGraphRunner(GraphRunner):
    """The runner of platforms without graph capture: every step runs eagerly."""

    def can_run(self, batch_size: int) -> bool:
        return 0 < batch_size <= self.max_batch_size

    def run(self, *args: Any, **kwargs: Any) -> Any:
        return self.forward_fn(*args, **kwargs)
