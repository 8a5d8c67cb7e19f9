"""Start and stop a multi-node Ray cluster on 127.0.0.1 for a test (see ``ray_cluster_main``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

MAIN = Path(__file__).with_name("ray_cluster_main.py")
ENV = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}


class RayCluster:
    def __init__(self, nodes: int, cpus: int, log: Path) -> None:
        self.log = open(log, "w")
        self.proc = subprocess.Popen([sys.executable, str(MAIN), str(nodes), str(cpus)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self.log, text=True, env={**os.environ, **ENV}, start_new_session=True)
        assert self.proc.stdout is not None
        self.address = self.proc.stdout.readline().strip()
        if not self.address:
            self.stop()
            raise RuntimeError(f"the Ray cluster did not start:\n{log.read_text()}")

    def state(self) -> dict[str, list[str]]:
        """Actors alive and placement groups not removed, as the cluster's GCS reports them."""
        out = subprocess.run([sys.executable, str(MAIN), "state", self.address], capture_output=True, text=True, timeout=60,
                             env={**os.environ, **ENV})
        assert out.returncode == 0, out.stderr
        return json.loads(out.stdout.strip().splitlines()[-1])

    def stop(self) -> None:
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, 9)
                self.proc.wait(5)
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        self.log.close()
