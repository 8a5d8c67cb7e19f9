"""``ServerArgs``: the pristine configuration seed.

Lifecycle: the dataclass ``__init__`` takes user values; ``__post_init__``
resolves them through an ordered pipeline of handlers (device, platform
defaults, model overrides, derived defaults, post-process passes) whose
declarations are materialized once at the end; then the strict mutation guard
is armed. After that the instance is read-only: resolved configuration is read
from the config bags (``sglang.srt.runtime_context``) and changed only with
``get_context().override``; a per-runner variant comes from ``derive``.

``ServerArgs(model_path="dummy")`` returns early from ``__post_init__`` (no
resolution, no guard): the boundary object tests publish.

Run ``python -m sglang.srt.server_args --model-path PATH --dump`` to see every
resolved value and where it came from.
"""

from __future__ import annotations

import argparse
import copy
import sys
from dataclasses import dataclass
from typing import Any

from sglang.srt.arg_groups import cli as _cli
from sglang.srt.arg_groups.checks import check_server_args as _check
from sglang.srt.arg_groups.disagg import TRANSFER_BACKENDS
from sglang.srt.arg_groups.errors import ServerArgsError
from sglang.srt.arg_groups.meta import NS, Arg, arg, public_fields
from sglang.srt.arg_groups.resolution import suggest

DEFAULT_MODEL = "smollm2-135m-instruct"
DUMMY_MODEL = "dummy"
SPEC_ALGORITHMS = ("NGRAM", "STANDALONE", "EAGLE", "EAGLE3", "NEXTN")

_GUARD_HINT = (
    "change resolved config with get_context().override(source, {name}=...), "
    "or build a per-runner variant with server_args.derive(source, {name}=...)"
)


@dataclass
class ServerArgs:
    # -- model ---------------------------------------------------------------
    model_path: str = arg(DEFAULT_MODEL, Arg("a .gguf file, a Hugging Face model directory, or the alias smollm2-135m-instruct"), NS("model"))
    tokenizer_path: str | None = arg(None, Arg("tokenizer directory (default: from the model)"), NS("model"))
    dtype: str = arg("auto", Arg("weight and activation dtype", choices=("auto", "float32", "bfloat16", "float16"), resolvable=True), NS("model"))
    context_length: int | None = arg(None, Arg("maximum context length (default: from the model)", resolvable=True), NS("model"))
    # -- device --------------------------------------------------------------
    device: str = arg("auto", Arg("device type; auto picks the platform's device, and the CPU engine when no accelerator is found",
                                  choices=("auto", "cpu", "cuda", "xpu", "npu", "musa", "mps"), resolvable=True), NS("device"))
    # -- execution -----------------------------------------------------------
    attention_backend: str | None = arg(None, Arg("attention backend (default: the platform's)", resolvable=True), NS("exec.attention"))
    quantization: str | None = arg(None, Arg("weight format: unset (the default) or auto keeps a GGUF's quantized blocks where the "
                                             "platform has kernels for them (CPU: Q4_0/Q4_1 -> gguf_q4, for float32 and bfloat16); none "
                                             "dequantizes every weight to --dtype (with --dtype float32: the reference-exact mode); or a "
                                             "method the platform checks (CPU: gguf_q4)"), NS("exec"))
    random_seed: int = arg(0, Arg("seed of the samplers' random state"), NS("exec"))
    grammar_backend: str = arg("xgrammar", Arg("constrained-decoding backend for json_schema / regex / ebnf, response_format and tools "
                                                "(none: such requests get 400; plugins add backends with register_grammar_backend)"), NS("exec"))
    disable_jump_forward: bool = arg(False, Arg("decode every token of a constrained request; by default the tokens its grammar forces "
                                                 "are appended without a decode step each and prefilled in one extend step"), NS("exec"))
    disable_cuda_graph: bool = arg(False, Arg("never capture device graphs", resolvable=True), NS("exec.graph"))
    cuda_graph_max_bs: int | None = arg(None, Arg("largest batch size captured as a graph", resolvable=True), NS("exec.graph"))
    enable_torch_compile: bool = arg(False, Arg("compile the decode step with torch.compile", resolvable=True), NS("exec.compile"))
    torch_compile_max_bs: int = arg(32, Arg("largest batch size run through the compiled step"), NS("exec.compile"))
    fused_decode: str = arg("auto", Arg("CPU decode steps and short prefills as one fused C++ call (auto: when the kernels build and the runner qualifies; "
                                        "on: required, start-up fails with the reason otherwise; off: the eager torch step)",
                                        choices=("auto", "on", "off")), NS("exec.graph"))
    # -- memory --------------------------------------------------------------
    mem_fraction_static: float | None = arg(None, Arg("fraction of available memory for the KV cache", resolvable=True), NS("memory"))
    max_total_tokens: int | None = arg(None, Arg("KV cache size in tokens (overrides --mem-fraction-static)", resolvable=True), NS("memory"))
    page_size: int = arg(1, Arg("tokens per KV page; the radix cache shares prefixes in whole pages, so 1 (upstream's default) reuses any common prefix", resolvable=True), NS("memory"))
    kv_cache_dtype: str = arg("auto", Arg("KV cache dtype", choices=("auto", "float32", "bfloat16", "float16"), resolvable=True), NS("memory"))
    # -- scheduling ----------------------------------------------------------
    max_running_requests: int | None = arg(None, Arg("most requests decoded together", resolvable=True), NS("schedule"))
    chunked_prefill_size: int | None = arg(None, Arg("most prompt tokens prefilled per step (-1: no chunking)", resolvable=True), NS("schedule"))
    schedule_policy: str = arg("fcfs", Arg("order of waiting requests", choices=("fcfs", "lpm"), resolvable=True), NS("schedule"))
    disable_radix_cache: bool = arg(False, Arg("turn the prefix cache off", resolvable=True), NS("schedule"))
    stream_interval: int = arg(1, Arg("tokens a streaming request's chunks carry at least (upstream's flag; its first token goes out at "
                                      "once): larger cuts the serving processes' cost per token; a request that does not stream "
                                      "gets its tokens when it finishes, or every 50"), NS("schedule"))
    # -- speculative decoding (upstream's flags; resolved values are read through get_spec()) ----------------------------
    speculative_algorithm: str | None = arg(None, Arg("speculative decoding: NGRAM (drafts from an n-gram store of prompts and outputs, no draft "
                                                      "model); STANDALONE (a draft model, --speculative-draft-model-path); EAGLE, EAGLE3 and NEXTN "
                                                      "are refused at start-up with what they need",
                                                      choices=SPEC_ALGORITHMS, resolvable=True), NS("spec"))
    speculative_draft_model_path: str | None = arg(None, Arg("draft model of STANDALONE: a .gguf or model directory with the "
                                                             "target's vocabulary", aliases=("--speculative-draft-model",)), NS("spec"))
    speculative_draft_load_format: str | None = arg(None, Arg("weight format of the draft model (auto: from its path)",
                                                                 choices=("auto", "gguf", "safetensors")), NS("spec"))
    speculative_draft_attention_backend: str | None = arg(None, Arg("attention backend of the draft model (default: the target's)"), NS("spec"))
    speculative_num_steps: int | None = arg(None, Arg("STANDALONE: draft-model forwards per step, one drafted token "
                                                           "each (default 3; NGRAM: unused)", resolvable=True), NS("spec"))
    speculative_eagle_topk: int | None = arg(None, Arg("draft tree breadth (STANDALONE: 1, chains only; NGRAM: always "
                                                            "--speculative-ngram-max-bfs-breadth)", resolvable=True), NS("spec"))
    speculative_num_draft_tokens: int | None = arg(None, Arg("most tokens one verify forward checks per request, the last sampled token included "
                                                             "(NGRAM default: --speculative-ngram-max-match-window-size, the step adapts "
                                                             "below it to the measured acceptance; STANDALONE: --speculative-num-steps + 1)", resolvable=True), NS("spec"))
    speculative_accept_threshold_single: float = arg(1.0, Arg("accept a draft whose target probability is at least this (1.0: lossless)"), NS("spec"))
    speculative_accept_threshold_acc: float = arg(1.0, Arg("accept a draft with probability min(1, p / this) (1.0: lossless)"), NS("spec"))
    speculative_ngram_min_match_window_size: int = arg(1, Arg("shortest suffix of a request's tokens the n-gram store matches"), NS("spec"))
    speculative_ngram_max_match_window_size: int = arg(12, Arg("longest suffix of a request's tokens the n-gram store matches"), NS("spec"))
    speculative_ngram_min_bfs_breadth: int = arg(1, Arg("narrowest draft tree (this build drafts chains: breadth 1)"), NS("spec"))
    speculative_ngram_max_bfs_breadth: int = arg(10, Arg("widest draft tree (this build drafts chains: breadth 1)"), NS("spec"))
    speculative_ngram_match_type: str = arg("BFS", Arg("which continuation a match drafts: BFS the most recent, PROB the most frequent",
                                                       choices=("BFS", "PROB")), NS("spec"))
    speculative_ngram_max_trie_depth: int = arg(18, Arg("longest continuation the n-gram store keeps per match",
                                                        aliases=("--speculative-ngram-branch-length",)), NS("spec"))
    speculative_ngram_capacity: int = arg(10_000_000, Arg("most n-gram entries the store holds (least recently written evicted first)"), NS("spec"))
    # -- parallelism ---------------------------------------------------------
    tp_size: int = arg(1, Arg("tensor-parallel ranks"), NS("parallel"))
    nnodes: int = arg(1, Arg("number of machines"), NS("parallel"))
    node_rank: int = arg(0, Arg("rank of this machine"), NS("parallel"))
    dist_init_addr: str | None = arg(None, Arg("HOST:PORT of node 0 for torch.distributed (needed with --nnodes > 1)"), NS("parallel"))
    nccl_port: int | None = arg(None, Arg("port of the torch.distributed store (default: a free port)", resolvable=True), NS("parallel"))
    dp_size: int = arg(1, Arg("data-parallel replicas: independent copies of the engine (each of --tp-size ranks) behind one server"), NS("parallel"))
    load_balance_method: str = arg("round_robin", Arg("how the data-parallel controller picks a replica for each request (with --dp-size > 1): "
                                                      "round_robin, shortest_queue (fewest unfinished requests), or cache_aware (the replica "
                                                      "whose prefix cache holds the longest prefix of the prompt, unless the load is imbalanced)",
                                                      choices=("round_robin", "shortest_queue", "cache_aware")), NS("parallel"))
    use_ray: bool = arg(False, Arg("launch the scheduler ranks as Ray actors in a placement group (needs sglang[ray]); the cluster is "
                                   "--ray-address, else RAY_ADDRESS, else a local one started here"), NS("parallel"))
    ray_address: str | None = arg(None, Arg("address of the Ray cluster for --use-ray (HOST:PORT of its head; default: RAY_ADDRESS)"),
                                  NS("parallel"))
    # -- prefill/decode disaggregation ---------------------------------------
    disaggregation_mode: str = arg("null", Arg("this server's role in a prefill/decode split (see docs/scale_out.md): null (it does both), "
                                               "prefill (it prefills and sends each request's KV pages to a decode server) or decode "
                                               "(it takes the KV from a prefill server and decodes)", choices=("null", "prefill", "decode")),
                                   NS("disagg"))
    disaggregation_transfer_backend: str = arg("mooncake", Arg("how KV pages move between prefill and decode servers: mooncake (the Mooncake "
                                                               "transfer engine; TCP where no RDMA device is named), mooncake_tcp (mooncake over "
                                                               "TCP), or fake (decode only: no prefill server, the KV is not computed; for "
                                                               "benchmarking the decode side)", choices=TRANSFER_BACKENDS),
                                               NS("disagg"))
    disaggregation_bootstrap_port: int = arg(8998, Arg("port of the prefill server's bootstrap endpoint, where decode servers find its KV "
                                                       "transfer endpoint"), NS("disagg"))
    disaggregation_ib_device: str | None = arg(None, Arg("RDMA device(s) for the mooncake backend (e.g. mlx5_0); unset: TCP"), NS("disagg"))
    disaggregation_decode_enable_radix_cache: bool = arg(False, Arg("keep a prefix cache on a decode server: a prompt whose leading "
                                                                    "pages it holds takes only the rest from the prefill server"), NS("disagg"))
    num_reserved_decode_tokens: int = arg(512, Arg("KV tokens a decode server reserves per request beyond its prompt when it "
                                                   "pre-allocates (at most max_new_tokens)"), NS("disagg"))
    # -- serving -------------------------------------------------------------
    host: str = arg("127.0.0.1", Arg("address the HTTP server binds"), NS("serving"))
    port: int = arg(30000, Arg("port of the HTTP server"), NS("serving"))
    api_key: str | None = arg(None, Arg("require Authorization: Bearer KEY on every route but /health (never logged or served)", secret=True), NS("serving"))
    max_request_bytes: int = arg(4 << 20, Arg("largest request body accepted; a larger one gets 413"), NS("serving"))
    allowed_hosts: str | None = arg(None, Arg("comma-separated Host header values accepted (others get 400, against DNS rebinding); "
                                              "default: the bound host and localhost, or any host when binding all interfaces; * allows any"),
                                    NS("serving"))
    served_model_name: str | None = arg(None, Arg("model name reported by the API (default: the model path)"), NS("serving"))
    sampling_defaults: str = arg("model", Arg("where a request's missing sampling fields come from: model (the model's generation "
                                              "config, or its card's values for a model this project knows; see docs/server.md) or "
                                              "openai (the plain OpenAI defaults: temperature 1, top_p 1)", choices=("model", "openai")),
                                 NS("serving"))
    preferred_sampling_params: str | None = arg(None, Arg("a JSON object of sampling parameters used for any field a request does not "
                                                          "send, over --sampling-defaults (reported by /get_model_info)",
                                                          metavar="JSON", json_object=True), NS("serving"))
    # -- LoRA adapters (sglang.srt.lora; normalised by sglang.srt.arg_groups.lora_hook before publish) --
    enable_lora: bool | None = arg(None, Arg("serve LoRA adapters (set by --lora-paths)", resolvable=True), NS("lora"))
    lora_paths: list | None = arg(None, Arg("adapters loaded at start: PATH, NAME=PATH, or JSON {\"lora_name\", \"lora_path\", \"pinned\"}",
                                            resolvable=True, nargs="*", metavar="ADAPTER"), NS("lora"))
    max_loras_per_batch: int = arg(8, Arg("adapter pool slots: most distinct adapters in one batch (the base model counts as one)"), NS("lora"))
    max_lora_rank: int | None = arg(None, Arg("largest adapter rank the pool holds (default: the largest of --lora-paths)", resolvable=True), NS("lora"))
    lora_target_modules: list | None = arg(None, Arg("modules adapters may target: q_proj k_proj v_proj o_proj gate_proj up_proj down_proj "
                                                     "qkv_proj gate_up_proj, or all (default: the union of --lora-paths)",
                                                     resolvable=True, nargs="*", metavar="MODULE"), NS("lora"))
    max_loaded_loras: int | None = arg(None, Arg("most adapters held in host memory (others are re-read from disk when asked for)"), NS("lora"))
    lora_eviction_policy: str = arg("lru", Arg("which unpinned adapter leaves a full pool", choices=("lru", "fifo")), NS("lora"))
    lora_backend: str = arg("torch_native", Arg("segmented adapter products (a registry: sglang.srt.lora.backend; torch_native runs on CPUs)"),
                            NS("lora"))
    # -- observability -------------------------------------------------------
    log_level: str = arg("info", Arg("logging level", choices=("debug", "info", "warning", "error")), NS("observability"))
    log_requests: bool = arg(False, Arg("log every request and its output"), NS("observability"))
    profile_dir: str | None = arg(None, Arg("directory for torch profiler traces of POST /start_profile and /stop_profile "
                                            "(unset: profiling is off; a request's output_dir is a subdirectory of it)"), NS("observability"))

    def __new__(cls, *args: Any, **kwargs: Any) -> ServerArgs:
        """Run the start-up order first (as upstream: plugins load before any ``ServerArgs``), so a
        hook on ``ServerArgs.__post_init__`` applies under every entry point, unpickling included.

        Once per process; the ``model_path="dummy"`` fixture shortcut skips it, and so does the
        unpickling that starts a ``spawn`` child: that child is not yet itself (no parent process,
        no logging), and its entry function loads plugins at its documented call site.
        """
        import multiprocessing.process

        spawning = getattr(multiprocessing.process.current_process(), "_inheriting", False)
        if not spawning and kwargs.get("model_path", args[0] if args else None) != DUMMY_MODEL:
            from sglang.srt.bootstrap import bootstrap

            bootstrap(str(kwargs.get("device", "auto")))
        return super().__new__(cls)

    def __post_init__(self) -> None:
        if self.model_path == DUMMY_MODEL:
            object.__setattr__(self, "_state", "dummy")
            return
        from sglang.srt.arg_groups.pipeline import run_pipeline

        object.__setattr__(self, "_state", "resolving")
        try:
            prov = run_pipeline(self)
        except BaseException:
            object.__setattr__(self, "_state", "failed")
            raise
        object.__setattr__(self, "_provenance", prov)
        object.__setattr__(self, "_state", "sealed")

    def __setattr__(self, name: str, value: Any) -> None:
        state = self.__dict__.get("_state")
        if state == "sealed":
            raise AttributeError(f"ServerArgs.{name} is read-only after resolution: " + _GUARD_HINT.format(name=name))
        if state == "resolving":
            raise AttributeError(
                f"ServerArgs.{name} is read-only during resolution: return a declaration from the handler, "
                f"or call sglang.srt.arg_groups.overrides.declare(server_args, source, {name}=...)"
            )
        object.__setattr__(self, name, value)

    def __delattr__(self, name: str) -> None:
        if self.__dict__.get("_state") in ("sealed", "resolving"):
            raise AttributeError(f"ServerArgs.{name} cannot be deleted: " + _GUARD_HINT.format(name=name))
        object.__delattr__(self, name)

    # -- CLI -----------------------------------------------------------------
    @staticmethod
    def add_cli_args(parser: argparse.ArgumentParser) -> None:
        """Add one flag per field (generated from the ``Arg`` metadata)."""
        _cli.add_cli_args(ServerArgs, parser)

    @classmethod
    def from_cli_args(cls, args: argparse.Namespace) -> ServerArgs:
        return _cli.from_cli_args(cls, args, getattr(args, "_given", frozenset()))

    def check_server_args(self) -> None:
        """Validate; errors name the flag and the fix (:class:`ServerArgsError`)."""
        _check(self)

    # -- variants and provenance ---------------------------------------------
    def derive(self, source: str, **fields: Any) -> ServerArgs:
        """A frozen variant with ``fields`` replaced, for another runner/worker/process.

        The receiver is untouched, nothing is re-resolved, nothing is published.
        """
        names = [f.name for f in public_fields(type(self))]
        for k in fields:
            if k not in names:
                raise ServerArgsError(f"derive({source!r}): unknown server argument {k!r}{suggest(k, names)}")
        variant = copy.copy(self)
        d = variant.__dict__
        d.update(fields)
        d["_provenance"] = {**self.provenance(), **{k: f"derived ({source})" for k in fields}}
        d["_derived_from"] = (source, dict(fields))
        d["_state"] = "sealed"
        return variant

    def provenance(self) -> dict[str, str]:
        """Where each value came from: default, cli, constructor, or the declaring source."""
        return dict(self.__dict__.get("_provenance", {}))

    @property
    def derived_from(self) -> tuple[str, dict[str, Any]] | None:
        return self.__dict__.get("_derived_from")

    def is_resolved(self) -> bool:
        return self.__dict__.get("_state") == "sealed"

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in public_fields(type(self))}


def prepare_server_args(argv: list[str]) -> ServerArgs:
    """Parse ``argv`` into a resolved ``ServerArgs`` (what ``sglang serve`` calls)."""
    parser = argparse.ArgumentParser(prog="sglang serve")
    ServerArgs.add_cli_args(parser)
    args = parser.parse_args(argv)
    args._given = _cli.given_flags(ServerArgs, parser, argv)
    return ServerArgs.from_cli_args(args)


def get_global_server_args() -> ServerArgs:
    """Legacy accessor kept as a shim; new code uses ``runtime_context.get_server_args()``.

    Its call sites are pinned by a guardrail test and must not grow.
    """
    from sglang.srt.runtime_context import get_server_args

    return get_server_args()


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    dump = "--dump" in argv
    if dump:
        argv.remove("--dump")
    sa = prepare_server_args(argv)
    sa.check_server_args()
    if dump:
        from sglang.srt.arg_groups.dump import format_dump

        print(format_dump(sa))
    else:
        print(sa)
    return 0


__all__ = ["DEFAULT_MODEL", "ServerArgs", "ServerArgsError", "get_global_server_args", "prepare_server_args"]

if __name__ == "__main__":
    sys.exit(main())
