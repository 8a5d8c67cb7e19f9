"""The lazy, thread-safe, once-per-process ``current_platform`` both runtimes expose."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from sglang.plugin_core.decision import PlatformDecision

logger = logging.getLogger(__name__)


class LazyPlatform:
    """Runs a selection chain on first use and publishes its outcome.

    The platform and its decision are published together, after the chain
    validated them; the instance is also written into ``namespace`` as
    ``current_platform`` so later module attribute reads skip ``__getattr__``.
    A failure is recorded and re-raised on every later access; nothing is
    published then.
    """

    def __init__(self, label: str, chain: Callable[[], tuple[Any, PlatformDecision]], namespace: dict[str, Any]) -> None:
        self._label, self._chain, self._ns = label, chain, namespace
        self._lock = threading.RLock()
        self._resolving = False
        self.platform: Any = None
        self.decision: PlatformDecision | None = None
        self.error: BaseException | None = None

    def get(self) -> Any:
        if self.platform is not None:
            return self.platform
        with self._lock:
            if self.error is not None:
                raise self.error
            if self._resolving:  # same thread, from inside the chain: a lock would deadlock here
                raise RuntimeError(
                    f"the {self._label} current_platform was accessed while it is being selected (from a platform "
                    "activation callback or a platform constructor); activation must stay import-safe: move that "
                    "code to the platform's init_backend()"
                )
            if self.platform is None:
                self._resolving = True
                try:
                    plat, decision = self._chain()
                except BaseException as exc:
                    self.error = exc
                    raise
                finally:
                    self._resolving = False
                self.decision, self.platform = decision, plat
                self._ns["current_platform"] = plat
                logger.info("%s %s", self._label, decision.format())
        return self.platform

    def get_decision(self) -> PlatformDecision:
        self.get()
        assert self.decision is not None
        return self.decision

    @property
    def resolved(self) -> bool:
        return self.platform is not None

    def guard(self, chain: Callable[[], tuple[Any, PlatformDecision]]) -> None:
        """Run ``chain`` instead of the selection chain from now on, in this process.

        For the developer kit only: ``sglang plugins check`` guards both
        runtimes with a chain that raises, calls an activation callback, and
        reads :attr:`error` to tell whether the callback touched ``current_platform``.
        """
        with self._lock:
            self._chain = chain
