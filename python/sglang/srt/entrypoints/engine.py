"""``sglang.Engine``: the offline entry point over the full process topology.

The caller's process holds the tokenizer manager (and the data-parallel
controller that routes over ``--dp-size`` replicas); each scheduler rank runs
``run_scheduler_process`` in a spawned process (a Ray actor under
``--use-ray``); one detokenizer process turns tokens into text; messages
travel over ZMQ. A child that dies is reported to every waiting call within a
second; children die with the engine.
"""

from __future__ import annotations

import logging
import multiprocessing as mp
import shutil
import threading
import time
from typing import TYPE_CHECKING, Any

from sglang.srt.entrypoints.engine_args import from_call
from sglang.srt.entrypoints.engine_requests import RequestStreams
from sglang.srt.entrypoints.ranks import LocalRanks, PortArgs
from sglang.srt.managers.request_errors import EngineDeadError, RequestError
from sglang.srt.managers.tokenizer_manager import TokenizerManager, load_tokenizer_and_defaults
from sglang.utils.background import in_background
from sglang.utils.env import env_number
from sglang.utils.lifecycle import Closing

if TYPE_CHECKING:
    from sglang.srt.server_args import ServerArgs

logger = logging.getLogger(__name__)


READY_TIMEOUT_S = env_number("SGLANG_ENGINE_READY_TIMEOUT", 600.0, float, minimum=0.0)


class Engine(RequestStreams, Closing):
    """``Engine(model_path=..., **server_args)``; ``generate``, ``async_generate``, ``shutdown``.

    Usable as a context manager. Every keyword is a ``ServerArgs`` field. With ``use_ray=True``
    (``--use-ray``) the instance is a ``sglang.srt.ray.RayEngine``: the scheduler ranks run as Ray actors.
    """

    def __new__(cls, **kwargs: Any) -> Engine:
        sa = kwargs.get("server_args")
        if cls is Engine and (kwargs.get("use_ray") or getattr(sa, "use_ray", False)):
            from sglang.srt.ray import RayEngine

            return super().__new__(RayEngine)
        return super().__new__(cls)

    def __init__(self, **kwargs: Any) -> None:
        from sglang.srt.server_args import ServerArgs

        server_args = kwargs.pop("server_args", None)
        if server_args is None:
            from sglang.srt.bootstrap import bootstrap

            bootstrap(str(kwargs.get("device", "auto")))  # plugins before ServerArgs, as under `sglang serve`
            server_args = ServerArgs(**kwargs)
        self.server_args = server_args
        self.local = LocalRanks()  # the processes started on this machine
        self.groups: list[Any] = [self.local]
        self.tokenizer_manager: TokenizerManager | None = None
        self.info: dict[str, Any] = {}
        self._closed = False
        self._port_args: PortArgs | None = None
        self._bootstrap: Any = None  # a prefill server's bootstrap endpoint (--disaggregation-mode prefill)
        try:
            self._launch_subprocesses(self.server_args)
        except BaseException:
            self.shutdown()
            raise

    # -- launch ----------------------------------------------------------------------
    def _launch_subprocesses(self, server_args: ServerArgs) -> None:
        from sglang.srt.arg_groups.overrides import declare_late_resolution
        from sglang.srt.managers.detokenizer_manager import run_detokenizer_process
        from sglang.srt.plugins import load_plugins
        from sglang.srt.runtime_context import get_disagg, publish
        from sglang.utils.process import free_port

        load_plugins()
        server_args.check_server_args()
        from sglang.srt.arg_groups.lora_hook import check_lora_server_args

        check_lora_server_args(server_args)  # the lora namespace's late resolution (reads adapter files), before publish
        if server_args.nccl_port is None and (server_args.nnodes == 1 or server_args.use_ray):
            declare_late_resolution(server_args, "launcher: a free port for torch.distributed", nccl_port=free_port())
        self._port_args = port_args = PortArgs.init_new(server_args, self._detokenizer_input())
        publish(server_args, role="tokenizer")  # resolved: what follows reads the bags (get_disagg())
        disagg = get_disagg()
        if disagg.disaggregation_mode == "prefill":  # its scheduler registers there while it starts
            from sglang.srt.disaggregation.bootstrap_server import BootstrapServer

            self._bootstrap = BootstrapServer(server_args.host, disagg.disaggregation_bootstrap_port)
        self._start_scheduler_ranks(server_args, port_args)
        loading = None
        if server_args.node_rank == 0:
            self.local.spawn(run_detokenizer_process, (server_args, port_args), "sglang-detokenizer")
            # the tokenizer manager's tokenizer is read while the ranks start (this thread only waits on their pipes),
            # on a daemon thread: a launch that fails meanwhile exits without waiting for it
            loading = in_background(load_tokenizer_and_defaults, server_args, name="sglang-tokenizer-load")
        self.info = self._wait_ready()
        if server_args.node_rank != 0:
            return  # other nodes only host scheduler ranks
        self.tokenizer_manager = TokenizerManager(server_args, port_args, self.info, loading.result() if loading else None)
        self.tokenizer_manager.root_cause = self._wait_dead_child
        threading.Thread(target=self._watchdog, daemon=True, name="sglang-engine-watchdog").start()

    def _detokenizer_input(self) -> str | None:
        """The detokenizer's address (None: an ipc path beside the others); a launcher whose scheduler
        ranks may run on other machines (``RayEngine``) gives a TCP address."""
        return None

    def _start_scheduler_ranks(self, server_args: ServerArgs, port_args: Any) -> None:
        """Start this launcher's scheduler ranks, in ``self.groups`` (``self.local`` here).

        The one place that differs between launchers: here, ``spawn``ed processes on this machine;
        ``RayEngine``: Ray actors."""
        from sglang.srt.entrypoints.ranks import local_rank_specs
        from sglang.srt.managers.scheduler_process import DISAGG_SCHEDULER_ENTRY, SCHEDULER_ENTRY, rank_name, run_entry
        from sglang.srt.runtime_context import get_disagg
        from sglang.utils.process import free_port

        # the disaggregated rank is the same one with its prefill or decode side attached
        entry = SCHEDULER_ENTRY if get_disagg().disaggregation_mode == "null" else DISAGG_SCHEDULER_ENTRY

        dist = {0: port_args.dist_init}
        for spec in local_rank_specs(server_args):
            if spec.dp_rank not in dist:
                dist[spec.dp_rank] = f"tcp://127.0.0.1:{free_port()}"
            view = port_args.replica(spec.dp_rank, dist[spec.dp_rank])
            self.local.spawn(run_entry, (entry, server_args, view, spec.gpu_id, spec.tp_rank),
                             f"sglang-scheduler-{rank_name(spec.tp_rank, spec.dp_rank)}", dp_rank=spec.dp_rank)

    def _wait_ready(self) -> dict[str, Any]:
        """Collect every rank's report; the info of replica 0's rank 0, with ``replicas`` (each replica's
        rank 0's report) and ``ranks`` (where every scheduler rank runs: ``dp_rank``, ``rank``, ``pid``, ``node_id``)."""
        from sglang.plugin_core.manifest import check_manifest
        from sglang.srt.managers.scheduler_process import rank_name
        from sglang.srt.plugins import plugin_manifest

        mine = plugin_manifest()
        replicas: dict[int, dict[str, Any]] = {}
        ranks: list[dict[str, Any]] = []
        first: dict[str, Any] = {}
        deadline = time.monotonic() + READY_TIMEOUT_S
        while any(g.pending() for g in self.groups):
            for group in self.groups:
                for msg in group.poll(0.25 if group.pending() else 0):
                    if msg["status"] != "ready":
                        who = "detokenizer" if msg["rank"] == "detokenizer" else f"scheduler {rank_name(msg['rank'], msg.get('dp_rank', 0))}"
                        raise EngineDeadError(f"{who} failed to start:\n{msg['error']}")
                    check_manifest(msg["process"], mine, msg["manifest"], "SRT")
                    if msg["rank"] == "detokenizer":
                        continue
                    first = first or msg
                    ranks.append({k: msg.get(k) for k in ("dp_rank", "rank", "pid", "node_id", "process")})
                    if msg["rank"] == 0:
                        replicas[msg.get("dp_rank", 0)] = msg
            dead = self._dead_child()
            if dead:
                raise EngineDeadError(f"{dead} during start-up; see its log above")
            if time.monotonic() > deadline:
                raise EngineDeadError(f"the engine did not start within {READY_TIMEOUT_S:.0f}s (SGLANG_ENGINE_READY_TIMEOUT)")
        info = dict(replicas.get(0, first))
        if replicas:
            info["replicas"] = [{k: v for k, v in replicas[dp].items() if k != "manifest"} for dp in sorted(replicas)]
        info["ranks"] = sorted(ranks, key=lambda r: (r["dp_rank"] or 0, r["rank"]))
        logger.info("engine ready: %s", {k: v for k, v in info.items() if k not in ("manifest", "replicas")})
        return info

    @property
    def procs(self) -> list[mp.process.BaseProcess]:
        """The processes this engine started on this machine (scheduler ranks unless on Ray, the detokenizer)."""
        return self.local.procs

    def _dead_child(self) -> str | None:
        for group in self.groups:
            dead = group.dead()
            if dead:
                return dead
        return None

    def _wait_dead_child(self, timeout: float) -> str | None:
        deadline = time.monotonic() + timeout
        while (dead := self._dead_child()) is None and time.monotonic() < deadline:
            time.sleep(0.1)
        return dead

    def _watchdog(self) -> None:
        while not self._closed:
            dead = self._dead_child()
            if dead and not self._closed:
                logger.error("%s; failing every pending request", dead)
                assert self.tokenizer_manager is not None
                self.tokenizer_manager.fail_all(EngineDeadError(f"{dead}; the engine cannot serve any more"))
                return
            time.sleep(0.2)

    # -- generate ----------------------------------------------------------------------
    def generate(self, prompt: str | list[str] | None = None, sampling_params: dict[str, Any] | list[dict[str, Any]] | None = None,
                 input_ids: list[int] | list[list[int]] | None = None, image_data: Any = None, return_logprob: bool | list[bool] = False,
                 logprob_start_len: int | list[int] | None = None, top_logprobs_num: int | list[int] | None = None,
                 token_ids_logprob: Any = None, lora_path: str | list[str | None] | None = None, custom_logit_processor: Any = None,
                 return_hidden_states: Any = False, stream: bool = False, bootstrap_host: str | list[str] | None = None,
                 bootstrap_port: int | list[int] | None = None, bootstrap_room: int | list[int] | None = None,
                 data_parallel_rank: int | None = None, rid: str | list[str] | None = None, **more: Any) -> Any:
        """Generate for one prompt (a dict) or a list of prompts (a list of dicts), with upstream SGLang's arguments
        (``engine_args``): the log-probability ones go into the sampling params; ``rid``, ``bootstrap_*`` and ``lora_path``
        (a loaded adapter's name) are honoured; the rest are refused unless they mean "nothing"; in a batch each may be one
        per prompt. ``stream=True`` (one prompt) yields dicts with the cumulative ``text`` and the new ``delta``."""
        tm = self._tm()
        reqs, batch = from_call("generate", locals(), tm.states, tm.controller.dp_size)
        states = self._submit_all(tm, reqs, stream)
        if not batch:
            return self._stream(states[0]) if stream else self._wait(states[0])
        return [self._wait(st) for st in states]

    async def async_generate(self, prompt: str | list[str] | None = None,
                             sampling_params: dict[str, Any] | list[dict[str, Any]] | None = None,
                             input_ids: list[int] | list[list[int]] | None = None, image_data: Any = None,
                             return_logprob: bool | list[bool] = False, logprob_start_len: int | list[int] | None = None,
                             top_logprobs_num: int | list[int] | None = None, token_ids_logprob: Any = None,
                             lora_path: str | list[str | None] | None = None, custom_logit_processor: Any = None,
                             return_hidden_states: Any = False, stream: bool = False, bootstrap_host: str | list[str] | None = None,
                             bootstrap_port: int | list[int] | None = None, bootstrap_room: int | list[int] | None = None,
                             data_parallel_rank: int | None = None, rid: str | list[str] | None = None, **more: Any) -> Any:
        """Async ``generate``, the same arguments; with ``stream=True`` (single prompt) returns an async iterator."""
        tm = self._tm()
        reqs, batch = from_call("async_generate", locals(), tm.states, tm.controller.dp_size)
        states = [self._attach(st) for st in self._submit_all(tm, reqs, stream)]
        if stream:
            return self.stream_request(states[0])
        try:
            for st in states:
                await self.wait_request(st)
        finally:
            for st in states:  # cancelled while a batch runs: none of it runs on unread
                self._abort_if_open(st)
        return [self._result(st) for st in states] if batch else self._result(states[0])

    def flush_cache(self) -> None:
        self._tm().flush_cache()

    # -- LoRA adapters (upstream's Engine API) --------------------------------------------------
    def load_lora_adapter(self, lora_name: str, lora_path: str, pinned: bool = False) -> dict[str, Any]:
        """Load a PEFT adapter directory as ``lora_name``: ``{"success", "error_message", "loaded_adapters"}``."""
        tm = self._tm()
        if tm.lora is None:
            return {"success": False, "error_message": "LoRA is not enabled: start the engine with enable_lora=True "
                    "(--enable-lora), max_lora_rank and lora_target_modules", "loaded_adapters": {}}
        return tm.lora.load(lora_name, lora_path, pinned)

    def unload_lora_adapter(self, lora_name: str) -> dict[str, Any]:
        """Unload ``lora_name`` once its requests have finished; the same result shape as loading."""
        tm = self._tm()
        if tm.lora is None:
            return {"success": False, "error_message": "LoRA is not enabled: start the engine with enable_lora=True (--enable-lora)",
                    "loaded_adapters": {}}
        return tm.lora.unload(lora_name)

    def start_profile(self, output_dir: str, num_steps: int | None = None) -> None:
        """Start the torch profiler in every scheduler rank (``/start_profile``)."""
        self._tm().start_profile(output_dir, num_steps)

    def stop_profile(self) -> list[str]:
        """Stop it; the trace files, one per rank (``/stop_profile``)."""
        return self._tm().stop_profile()

    def get_server_info(self) -> dict[str, Any]:
        return dict(self.info)

    # -- lifecycle ------------------------------------------------------------------------
    def wait(self) -> str | None:
        """Block until a child exits (non-zero nodes of a multi-node engine); which one, and how."""
        return self._wait_dead_child(float("inf"))

    def shutdown(self) -> None:
        """Stop every child (SIGTERM, then SIGKILL after 5 s) and free the sockets."""
        if self._closed:
            return
        self._closed = True
        for group in reversed(self.groups):
            group.stop()
        if self.tokenizer_manager is not None:
            self.tokenizer_manager.close()
            self.tokenizer_manager = None
        if self._bootstrap is not None:
            self._bootstrap.close()
            self._bootstrap = None
        if self._port_args is not None:
            shutil.rmtree(self._port_args.ipc_dir, ignore_errors=True)


__all__ = ["Engine", "EngineDeadError", "RequestError"]
