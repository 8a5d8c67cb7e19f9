"""Start a real server process on 127.0.0.1 and wait until it is healthy."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from sglang.utils.process import free_port


class ServerProc:
    def __init__(self, args: list[str], log: Path, env: dict[str, str] | None = None, module: bool = False, timeout: float = 180) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = log
        cmd = [sys.executable, "-m", "sglang.launch_server"] if module else [str(Path(sys.executable).parent / "sglang"), "serve"]
        env = {**os.environ, "SGLANG_QUIET_LOAD": "1", "PYTHONUNBUFFERED": "1", **(env or {})}
        self.fh = open(log, "w")
        self.proc = subprocess.Popen([*cmd, "--port", str(self.port), *args], stdout=self.fh, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                text = self.text()
                self.fh.close()
                raise RuntimeError(f"server exited with {self.proc.returncode}:\n{text}")
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=1) as r:
                    if r.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"server not healthy within {timeout}s:\n{self.text()}")

    def text(self) -> str:
        if not self.fh.closed:
            self.fh.flush()
        return self.log.read_text()

    def children(self) -> list[int]:
        out = subprocess.run(["pgrep", "-P", str(self.proc.pid)], capture_output=True, text=True).stdout.split()
        return [int(x) for x in out]

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 20) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)
        self.fh.close()
        return self.proc.returncode


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().split()[2] != "Z"


def by_role(s: ServerProc) -> tuple[int, int]:
    """(scheduler pid, detokenizer pid) of a single-scheduler server started with ``--log-level info``, told apart by
    the engine's ready line in its log."""
    pids = [k for k in s.children() if "spawn_main" in Path(f"/proc/{k}/cmdline").read_bytes().decode(errors="replace")]
    assert len(pids) == 2
    log = s.text()
    for pid in pids:
        if f"scheduler TP0 (pid {pid})" in log:
            return pid, next(p for p in pids if p != pid)
    raise AssertionError(f"no scheduler pid in the log: {pids}")
