"""Hooks applied after the model runner was built: honoured, or reported once.

The runner decides at start-up whether a decode step runs as one fused C++ call and whether dense
weights may be packed (both would bypass a hook on the code they stand in for). The hook registry's
generation counter changes whenever hooks are applied or restored; the runner compares it before
every forward (:meth:`HookWatch.check`, an integer compare when nothing changed) and, when it moved:

- the fused decode plan stands aside while a hook touches the code it replaces (``PLAN_MODULES``):
  the eager step runs the hook; the plan comes back once those hooks are restored;
- a hook on code that may read a dense ``weight`` after the weights were replaced by kernels cannot be fully
  honoured (the dense copy is gone): the engine says so once per hook target, with the fix.
"""

from __future__ import annotations

import logging
from typing import Any

logger = logging.getLogger("sglang.srt.model_executor.model_runner")


class HookWatch:
    def __init__(self, runner: Any, fused_mode: str, packed: bool) -> None:
        from sglang.srt.plugins.hook_registry import HookRegistry

        self.registry = HookRegistry
        self.runner = runner
        self.fused_mode = fused_mode
        self.packed = packed  # some dense weights were replaced by kernels (weight_format) and dropped at load
        self.generation = HookRegistry.generation()
        self.stood_aside = False  # the fused plan was dropped because of hooks applied since
        self.reported: set[str] = set()

    def check(self) -> None:
        """Called before each forward; cheap unless hooks were applied or restored since the last call."""
        gen = self.registry.generation()
        if gen != self.generation:
            self.generation = gen
            self._changed()

    def _changed(self) -> None:
        from sglang.srt.model_executor.fused_decode import PLAN_MODULES, FusedDecode

        runner = self.runner
        hooked = sorted(t for t in self.registry.applied_targets() if t.startswith(tuple(m + "." for m in PLAN_MODULES)))
        if runner.fused_decode is not None and hooked:
            runner.fused_decode = None
            self.stood_aside = True
            logger.warning("fused decode: off from now on, eager decode steps run the hooks applied to %s", ", ".join(hooked))
        elif self.stood_aside and not hooked:
            runner.fused_decode = FusedDecode.create(runner, "auto" if self.fused_mode == "on" else self.fused_mode)
            self.stood_aside = runner.fused_decode is None
        if self.packed:
            from sglang.srt.model_executor.weight_format import hooks_on_weight_readers

            for target in hooks_on_weight_readers():
                if target not in self.reported:
                    self.reported.add(target)
                    logger.warning("the hook on %s was applied after start-up: it runs, but the dense weights it may read "
                                   "were replaced at load by packed kernels (weight_format) and are gone; apply it from a "
                                   "plugin, before the engine starts, to keep dense weights", target)
