"""Which scheduler ranks a launcher starts, and the local way of starting them.

A *rank group* starts processes that each report once (``{"status": "ready", ...}``
or ``{"status": "error", "error": traceback}``), then serve until they die.
:class:`LocalRanks` runs them as ``spawn``ed processes on this machine (the
default; with ``--nnodes``, this node's share); ``sglang.srt.ray.RayRanks``
runs the scheduler ranks as Ray actors. The engine drives either the same way:
``poll`` the reports until none is pending, then watch ``dead``.
"""

from __future__ import annotations

import dataclasses
import multiprocessing as mp
import tempfile
from dataclasses import dataclass
from multiprocessing.connection import wait
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from sglang.srt.server_args import ServerArgs


@dataclass(frozen=True)
class PortArgs:
    """Where the processes of one engine talk. ``scheduler_input`` and ``dist_init`` are replica 0's;
    :meth:`replica` gives another data-parallel replica's view."""

    tokenizer_input: str
    scheduler_input: str
    detokenizer_input: str
    dist_init: str
    ipc_dir: str

    @classmethod
    def init_new(cls, server_args: ServerArgs, detokenizer_input: str | None = None) -> PortArgs:
        d = tempfile.mkdtemp(prefix="sglang-ipc-")
        if server_args.nnodes > 1 and not server_args.use_ray:
            dist = f"tcp://{server_args.dist_init_addr}"
        else:
            dist = f"tcp://127.0.0.1:{server_args.nccl_port}"
        return cls(f"ipc://{d}/tokenizer", f"ipc://{d}/scheduler", detokenizer_input or f"ipc://{d}/detokenizer", dist, d)

    def replica(self, dp_rank: int, dist_init: str | None = None, scheduler_input: str | None = None) -> PortArgs:
        """The view of data-parallel replica ``dp_rank``: its own scheduler socket and torch.distributed store."""
        default_input = self.scheduler_input if dp_rank == 0 else f"ipc://{self.ipc_dir}/scheduler-dp{dp_rank}"
        return dataclasses.replace(self, scheduler_input=scheduler_input or default_input, dist_init=dist_init or self.dist_init)


@dataclass(frozen=True)
class RankSpec:
    """One scheduler rank: its replica, its TP rank, its device index on its machine."""

    dp_rank: int
    tp_rank: int
    gpu_id: int


def local_rank_specs(server_args: ServerArgs) -> list[RankSpec]:
    """The ranks this machine's launcher starts: every replica's, or this node's share of TP (``--nnodes``)."""
    per_node = server_args.tp_size // server_args.nnodes
    out = []
    for dp in range(server_args.dp_size):
        for local in range(per_node):
            out.append(RankSpec(dp, server_args.node_rank * per_node + local, dp * per_node + local))
    return out


class RankGroup(Protocol):
    """Started processes that report once, then serve; see the module docstring."""

    def pending(self) -> int: ...

    def poll(self, timeout: float) -> list[dict[str, Any]]: ...

    def dead(self) -> str | None: ...

    def stop(self) -> None: ...


class LocalRanks:
    """``spawn``ed processes on this machine, each reporting on a pipe."""

    def __init__(self) -> None:
        self.ctx = mp.get_context("spawn")  # never the embedding application's global start method
        self.procs: list[mp.process.BaseProcess] = []
        self.pipes: list[Any] = []

    def spawn(self, target: Any, args: tuple[Any, ...], name: str, **kwargs: Any) -> None:
        """Start ``target(*args, pipe, **kwargs)``; the child sends its one report on ``pipe``."""
        reader, writer = self.ctx.Pipe(duplex=False)
        p = self.ctx.Process(target=target, args=(*args, writer), kwargs=kwargs, name=name, daemon=True)
        p.start()
        writer.close()
        self.procs.append(p)
        self.pipes.append(reader)

    def pending(self) -> int:
        return len(self.pipes)

    def poll(self, timeout: float) -> list[dict[str, Any]]:
        out = []
        for conn in wait(self.pipes, timeout=timeout) if self.pipes else []:
            self.pipes.remove(conn)
            try:
                out.append(conn.recv())
            except EOFError:
                pass  # the process died before reporting: dead() names it
        return out

    def dead(self) -> str | None:
        for p in self.procs:
            if p.exitcode is not None:
                return f"{p.name} (pid {p.pid}) exited with code {p.exitcode}"
        return None

    def stop(self) -> None:
        """SIGTERM every process, SIGKILL after 5 s."""
        import time

        for p in self.procs:
            if p.is_alive():
                p.terminate()
        deadline = time.monotonic() + 5
        for p in self.procs:
            p.join(max(0.0, deadline - time.monotonic()))
            if p.is_alive():
                p.kill()
                p.join(1)
