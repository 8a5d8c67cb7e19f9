"""LoopReceiver: the HTTP server's event loop reads the detokenizer's results itself (real ZMQ sockets, a real loop)."""

from __future__ import annotations

import asyncio
import logging
import pickle
import threading

import zmq

from sglang.srt.managers.tokenizer_loop_recv import LoopReceiver, on_loop


def _pair(tmp_path):
    ctx = zmq.Context(1)
    pull = ctx.socket(zmq.PULL)
    pull.bind(f"ipc://{tmp_path}/results")
    push = ctx.socket(zmq.PUSH)
    push.connect(f"ipc://{tmp_path}/results")
    return ctx, pull, push


def test_it_handles_every_message_in_order_including_those_queued_before_it_started(tmp_path, caplog):
    ctx, pull, push = _pair(tmp_path)
    got: list[object] = []
    threads: set[int] = set()

    def handle(msg: object) -> None:
        threads.add(threading.get_ident())
        if msg == "boom":
            raise RuntimeError("a handler bug")
        got.append(msg)

    async def main() -> None:
        loop = asyncio.get_running_loop()
        for i in range(3):  # sent while the receiver thread would still own the socket: the start drains them
            push.send_pyobj(("early", i))
        await asyncio.sleep(0.05)
        recv = LoopReceiver(pull, loop, handle)
        recv.start()
        assert got == [("early", 0), ("early", 1), ("early", 2)]

        def sender() -> None:
            push.send(b"not a pickle")  # skipped, logged
            push.send_pyobj("boom")  # the handler raises: logged, the next message still counts
            for i in range(200):
                push.send_pyobj(("late", i))

        t = threading.Thread(target=sender)
        t.start()
        for _ in range(500):
            if len(got) == 203:
                break
            await asyncio.sleep(0.01)
        t.join()
        assert got[3:] == [("late", i) for i in range(200)]
        assert threads == {threading.get_ident()} and on_loop(loop)

        stopper = threading.Thread(target=recv.stop)  # from another thread, while the loop runs
        stopper.start()
        while stopper.is_alive():
            await asyncio.sleep(0.01)
        push.send_pyobj("after stop")
        await asyncio.sleep(0.1)
        assert got[-1] == ("late", 199)

    with caplog.at_level(logging.ERROR, logger="sglang.srt.managers.tokenizer_loop_recv"):
        asyncio.run(main())
    assert "could not be read" in caplog.text and "could not be handled" in caplog.text and "a handler bug" in caplog.text
    push.close(0)
    pull.close(0)
    ctx.term()


def test_on_loop_is_false_off_the_loop_and_for_another_loop():
    assert not on_loop(None)
    other = asyncio.new_event_loop()
    try:
        assert not on_loop(other)

        async def inside() -> bool:
            return on_loop(asyncio.get_running_loop()) and not on_loop(other)

        assert asyncio.run(inside())
    finally:
        other.close()


def test_a_pickle_of_the_wrong_shape_is_handled_like_any_message(tmp_path):
    """The receiver does not judge messages: the tokenizer manager's handler ignores types it does not know."""
    ctx, pull, push = _pair(tmp_path)
    got: list[object] = []

    async def main() -> None:
        recv = LoopReceiver(pull, asyncio.get_running_loop(), got.append)
        recv.start()
        push.send(pickle.dumps({"unexpected": 1}))
        for _ in range(200):
            if got:
                break
            await asyncio.sleep(0.01)
        recv.stop()

    asyncio.run(main())
    assert got == [{"unexpected": 1}]
    push.close(0)
    pull.close(0)
    ctx.term()
