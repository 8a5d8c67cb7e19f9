"""The scheduler's I/O: ZMQ on TP rank 0, replicated to every rank over torch.distributed.

``input_path`` ``tcp://HOST:0`` binds a free port on HOST (a scheduler on another machine,
under ``--use-ray``); ``input_addr`` is the address bound, which the ready report carries to
the tokenizer manager."""

from __future__ import annotations

from typing import Any

import zmq


class SchedulerIO:
    def __init__(self, tp_rank: int, tp_size: int, input_path: str | None, output_path: str | None) -> None:
        self.tp_rank, self.tp_size = tp_rank, tp_size
        self.ctx = zmq.Context(1)
        self.recv_sock = self.send_sock = None
        self.input_addr: str | None = None
        if tp_rank == 0:
            assert input_path is not None
            self.recv_sock = self.ctx.socket(zmq.PULL)
            if input_path.startswith("tcp://") and input_path.endswith(":0"):
                host = input_path[len("tcp://") : -2]
                self.input_addr = f"tcp://{host}:{self.recv_sock.bind_to_random_port(f'tcp://{host}')}"
            else:
                self.recv_sock.bind(input_path)
                self.input_addr = input_path
            self.send_sock = self.ctx.socket(zmq.PUSH)
            self.send_sock.connect(output_path)

    def recv(self, block: bool) -> list[Any]:
        """Messages since the last call; every TP rank gets the same list."""
        msgs: list[Any] = []
        if self.tp_rank == 0:
            assert self.recv_sock is not None
            if block and not self.recv_sock.poll(timeout=20):
                pass
            while True:
                try:
                    msgs.append(self.recv_sock.recv_pyobj(zmq.NOBLOCK))
                except zmq.Again:
                    break
        if self.tp_size > 1:
            import torch.distributed as dist

            from sglang.srt.runtime_context import get_parallel

            box = [msgs]
            dist.broadcast_object_list(box, src=dist.get_global_rank(get_parallel().tp_group, 0), group=get_parallel().tp_group)
            msgs = box[0]
        return msgs

    def send(self, obj: Any) -> None:
        if self.send_sock is not None:
            self.send_sock.send_pyobj(obj)
