"""The target a launcher spawns for a scheduler rank: ``scheduler_process.run_entry`` resolves its "module:function" in the
child (the launcher imports no scheduler or torch), and a failure to import it is reported on the rank's pipe."""

from __future__ import annotations

import multiprocessing

import pytest

from sglang.srt.managers.scheduler_process import DISAGG_SCHEDULER_ENTRY, SCHEDULER_ENTRY, run_entry


def test_an_entry_that_does_not_import_is_a_start_up_error_on_the_pipe():
    reader, writer = multiprocessing.Pipe(duplex=False)
    with pytest.raises(ModuleNotFoundError):
        run_entry("sglang.no_such_module:run", object(), object(), 0, 3, writer, dp_rank=1)
    report = reader.recv()
    assert report["status"] == "error" and report["rank"] == 3 and report["dp_rank"] == 1
    assert "importing the scheduler entry sglang.no_such_module:run failed" in report["error"] and "ModuleNotFoundError" in report["error"]


def test_the_entries_name_the_rank_functions_and_calling_one_passes_everything_through(monkeypatch):
    import sglang.srt.disaggregation.scheduler as disagg
    import sglang.srt.managers.scheduler as scheduler

    assert SCHEDULER_ENTRY == "sglang.srt.managers.scheduler:run_scheduler_process"
    assert DISAGG_SCHEDULER_ENTRY == "sglang.srt.disaggregation.scheduler:run_disagg_scheduler_process"
    seen = []
    monkeypatch.setattr(scheduler, "run_scheduler_process", lambda *a, **k: seen.append((a, k)))  # resolved at call time
    run_entry(SCHEDULER_ENTRY, "sa", "pa", 0, 1, "pipe", dp_rank=2)
    assert seen == [(("sa", "pa", 0, 1, "pipe"), {"dp_rank": 2})]
    assert callable(disagg.run_disagg_scheduler_process)

