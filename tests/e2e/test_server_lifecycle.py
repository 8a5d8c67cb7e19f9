"""Server lifecycle: plugins at the CLI call sites, signals, and a crashing scheduler."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from helpers.dists import make_dist
from helpers.server import ServerProc, alive

ROOT = Path(__file__).resolve().parents[2]

FLAG_PLUGIN = '''
from sglang.srt.plugins.hook_registry import HookRegistry, HookType


def _add_flag(result, parser):
    parser.add_argument("--acme-mode", default="off", help="added by the acme plugin")


def _check(server_args):
    print("acme check_server_args ran", flush=True)


def register():
    HookRegistry.register("sglang.srt.server_args.ServerArgs.add_cli_args", _add_flag, HookType.AFTER)
    HookRegistry.register("sglang.srt.server_args.ServerArgs.check_server_args", _check, HookType.BEFORE)
'''


def test_quickstart_plugin_and_cli_hooks_then_sigterm_stops_everything(tmp_path):
    site = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--no-index", "--target", str(site),
                    str(ROOT / "examples" / "plugins" / "my_general_plugin")], check=True, capture_output=True)
    make_dist(site, "acme-flags", entry_points={"sglang.srt.plugins": {"acme": "acme_flags:register"}}, files={"acme_flags/__init__.py": FLAG_PLUGIN})
    s = ServerProc(["--acme-mode", "on", "--max-total-tokens", "2048"], tmp_path / "log.txt", env={"PYTHONPATH": str(site)})
    try:
        log = s.text()
        assert "Scheduler initialized! gpu_id=0" in log  # the spec's quick start, verbatim
        assert "acme check_server_args ran" in log  # the plugin's flag parsed and its check hook ran
        assert "loaded SRT plugin my_plugin from my-general-plugin" in log
        assert "hook chain sglang.srt.managers.scheduler.Scheduler.__init__: AROUND:my_general_plugin.my_hook [my_plugin]" in log
        assert "resolved configuration:" in log and "# cli" in log
        kids = s.children()
        assert kids
    finally:
        t0 = time.monotonic()
        code = s.stop(signal.SIGTERM)
    assert time.monotonic() - t0 < 15 and code == 0
    time.sleep(0.5)
    assert not any(alive(k) for k in kids)


def test_sigint_stops_the_server_and_its_children(tmp_path):
    s = ServerProc(["--max-total-tokens", "2048"], tmp_path / "log.txt", module=True)  # python -m sglang.launch_server
    kids = s.children()
    t0 = time.monotonic()
    code = s.stop(signal.SIGINT)
    assert time.monotonic() - t0 < 15 and code == 0
    time.sleep(0.5)
    assert kids and not any(alive(k) for k in kids)


def test_a_crashed_scheduler_makes_the_server_exit_non_zero_with_the_cause(tmp_path):
    s = ServerProc(["--max-total-tokens", "2048"], tmp_path / "log.txt")
    try:
        workers = [k for k in s.children() if "spawn_main" in Path(f"/proc/{k}/cmdline").read_bytes().decode(errors="replace")]
        assert len(workers) == 2  # the scheduler and the detokenizer
        os.kill(workers[0], signal.SIGKILL)
        s.proc.wait(20)
    finally:
        code = s.stop()
    assert code == 1, s.text()
    assert "exited with code -9" in s.text() and "shutting down" in s.text()
    time.sleep(0.5)
    assert not any(alive(k) for k in workers)
