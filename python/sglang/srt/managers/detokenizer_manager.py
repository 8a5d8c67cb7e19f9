"""Detokenizer process: token ids -> text deltas, cut at stop strings.

It never publishes: it reads only the raw config handed to its constructor.
A request whose decoding raises fails alone (its client gets the error and
the tokenizer manager aborts it in the scheduler); the others go on.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import zmq

from sglang.plugin_core.hooks.faults import describe_fault, fail_fast
from sglang.srt.managers.io_struct import BatchStrOut, BatchTokenIDOut, SchedulerError

if TYPE_CHECKING:
    from sglang.srt.server_args import ServerArgs

logger = logging.getLogger(__name__)


class _Decode:
    """Incremental decoding: only the tokens after ``prefix_offset`` are decoded each step."""

    __slots__ = ("ids", "prefix_offset", "read_offset", "sent", "skip_special", "text")

    def __init__(self, skip_special: bool) -> None:
        self.ids: list[int] = []
        self.text = ""  # text of ids[:read_offset]
        self.prefix_offset = 0  # decoding restarts here (context for the byte-level decoder)
        self.read_offset = 0  # tokens already turned into text
        self.sent = 0  # characters already sent
        self.skip_special = skip_special

    def advance(self, tokenizer: Any, final: bool) -> None:
        """Append the text of new tokens; hold back an incomplete UTF-8 sequence unless ``final``."""
        prefix = tokenizer.decode(self.ids[self.prefix_offset : self.read_offset], skip_special_tokens=self.skip_special)
        full = tokenizer.decode(self.ids[self.prefix_offset :], skip_special_tokens=self.skip_special)
        if len(full) > len(prefix) and (final or not full.endswith("\ufffd")):
            self.text += full[len(prefix) :]
            self.prefix_offset, self.read_offset = self.read_offset, len(self.ids)


class DetokenizerManager:
    def __init__(self, server_args: ServerArgs, port_args: Any) -> None:
        from sglang.srt.tokenizer import load_tokenizer

        self.tokenizer = load_tokenizer(server_args.model_path, server_args.tokenizer_path)
        self.ctx = zmq.Context(1)
        self.recv_sock = self.ctx.socket(zmq.PULL)
        self.recv_sock.bind(port_args.detokenizer_input)
        self.send_sock = self.ctx.socket(zmq.PUSH)
        self.send_sock.connect(port_args.tokenizer_input)
        self.states: dict[str, _Decode] = {}
        self.failed: list[SchedulerError] = []  # requests of the last handled batch whose decoding raised

    def handle(self, out: BatchTokenIDOut) -> BatchStrOut:
        res = BatchStrOut([], [], [], [], [])
        self.failed = []
        for i, rid in enumerate(out.rids):
            try:
                self._one(out, i, rid, res)
            except Exception as exc:
                if fail_fast(exc):
                    raise
                self.states.pop(rid, None)
                logger.error("detokenizing request %s failed: %s", rid, describe_fault(exc), exc_info=exc)
                self.failed.append(SchedulerError(rid, f"the request failed in the detokenizer: {describe_fault(exc)}", 500))
        return res

    def _one(self, out: BatchTokenIDOut, i: int, rid: str, res: BatchStrOut) -> None:
        st = self.states.get(rid) or self.states.setdefault(rid, _Decode(out.skip_special_tokens[i]))
        st.ids.extend(out.new_token_ids[i])
        reason = out.finished_reasons[i]
        st.advance(self.tokenizer, final=reason is not None)
        text = st.text
        if reason is not None and isinstance(reason.get("matched"), str):
            cut = text.find(reason["matched"])
            if cut >= 0:
                text = text[:cut]
        end = len(text)
        meta = {"prompt_tokens": out.prompt_tokens[i], "completion_tokens": out.completion_tokens[i],
                "cached_tokens": out.cached_tokens[i], "logprobs": out.logprobs[i]}
        if out.input_logprobs[i] is not None:
            meta["input_logprobs"] = out.input_logprobs[i]
        if out.spec and out.spec[i] is not None:
            meta["spec"] = out.spec[i]
        res.rids.append(rid)  # all appends after the work that may raise: a failed request leaves no half row
        res.texts.append(text[st.sent : end])
        res.output_ids.append(list(out.new_token_ids[i]))
        res.finished_reasons.append(reason)
        res.meta.append(meta)
        st.sent = end
        if reason is not None:
            del self.states[rid]

    def event_loop(self) -> None:
        while True:
            msg = self.recv_sock.recv_pyobj()
            if isinstance(msg, BatchTokenIDOut):
                self.send_sock.send_pyobj(self.handle(msg))
                for err in self.failed:
                    self.send_sock.send_pyobj(err)
                continue
            if isinstance(msg, SchedulerError):  # the request ended in the scheduler: forget its text
                self.states.pop(msg.rid, None)
            self.send_sock.send_pyobj(msg)


def run_detokenizer_process(server_args: ServerArgs, port_args: Any, pipe: Any = None) -> None:
    import os
    import traceback

    from sglang.srt.plugins import load_plugins, plugin_manifest
    from sglang.utils.process import configure_child_logging, die_with_parent

    die_with_parent()
    configure_child_logging(server_args.log_level, "detokenizer")
    try:
        from sglang.srt.managers.cpu_binding import bind_front

        bind_front(server_args, "the detokenizer")  # before its sockets: their I/O thread inherits the binding
        load_plugins()  # hooks apply here too; the detokenizer still never publishes
        manager = DetokenizerManager(server_args, port_args)
    except BaseException:
        if pipe is not None:
            pipe.send({"status": "error", "rank": "detokenizer", "error": traceback.format_exc()})
        raise
    if pipe is not None:
        pipe.send({"status": "ready", "rank": "detokenizer", "process": f"detokenizer (pid {os.getpid()})", "manifest": plugin_manifest()})
    manager.event_loop()
