"""``check_server_args``: validation whose errors name the flag and the fix."""

from __future__ import annotations

from typing import Any

from sglang.srt.arg_groups.errors import ServerArgsError


def _need(cond: bool, msg: str) -> None:
    if not cond:
        raise ServerArgsError(msg)


_KIND = {bool: "true or false", int: "an integer", float: "a number", str: "a string"}


def check_field_values(sa: Any) -> None:
    """Every field has its annotated type and, where ``Arg.choices`` lists them, one of its choices: the
    command line enforces both through argparse; ``sglang.Engine(**kwargs)`` and ``ServerArgs(...)`` come here."""
    import typing

    from sglang.srt.arg_groups.cli import base_type, flag_of
    from sglang.srt.arg_groups.meta import field_arg, public_fields

    hints = typing.get_type_hints(type(sa))
    for f in public_fields(type(sa)):
        value, (tp, optional) = getattr(sa, f.name), base_type(hints[f.name])
        if value is None:
            _need(optional, f"{flag_of(f)} must be set ({_KIND.get(tp, tp.__name__)}), got None")
            continue
        if tp is list:  # a list field also takes what late resolution normalises it to (a set) and, from Python, a dict
            _need(isinstance(value, (list, tuple, set, frozenset, dict)), f"{flag_of(f)} must be a list, got {value!r}")
            continue
        ok = isinstance(value, tp) and (tp is bool or not isinstance(value, bool)) or (tp is float and type(value) is int)
        ok = ok or (field_arg(f).json_object and isinstance(value, dict))
        _need(ok, f"{flag_of(f)} must be {_KIND.get(tp, tp.__name__)}, got {value!r} ({type(value).__name__})")
        choices = field_arg(f).choices
        _need(choices is None or value in choices, f"{flag_of(f)} must be one of {', '.join(map(str, choices or ()))}, got {value!r}")


def check_server_args(sa: Any) -> None:
    """Raise :class:`ServerArgsError` for the first invalid argument."""
    check_field_values(sa)
    _need(bool(sa.model_path), "--model-path is empty: pass a .gguf file, a model directory, or smollm2-135m-instruct")
    _need(sa.tp_size >= 1, f"--tp-size must be >= 1, got {sa.tp_size}")
    _need(sa.nnodes >= 1, f"--nnodes must be >= 1, got {sa.nnodes}")
    _need(0 <= sa.node_rank < sa.nnodes, f"--node-rank must be in [0, --nnodes={sa.nnodes}), got {sa.node_rank}")
    _need(sa.nnodes == 1 or bool(sa.dist_init_addr) or sa.use_ray,
          f"--nnodes {sa.nnodes} needs --dist-init-addr HOST:PORT of node 0 (or --use-ray, which takes it from rank 0's node)")
    _need(sa.tp_size % sa.nnodes == 0, f"--tp-size {sa.tp_size} must be a multiple of --nnodes {sa.nnodes}")
    _need(sa.dp_size >= 1, f"--dp-size must be >= 1, got {sa.dp_size}")
    _need(sa.dp_size == 1 or sa.nnodes == 1 or sa.use_ray,
          f"--dp-size {sa.dp_size} with --nnodes {sa.nnodes}: data-parallel replicas run on one machine, or across machines with --use-ray")
    _need(not (sa.use_ray and sa.node_rank != 0), "--use-ray launches every rank from node 0: start one server, without --node-rank")
    _need(1 <= sa.port <= 65535, f"--port must be in 1..65535, got {sa.port}")
    _need(sa.max_request_bytes >= 1024, f"--max-request-bytes must be at least 1024, got {sa.max_request_bytes}")
    _need(sa.page_size >= 1 and (sa.page_size & (sa.page_size - 1)) == 0, f"--page-size must be a power of two, got {sa.page_size}")
    if sa.mem_fraction_static is not None:
        _need(0 < sa.mem_fraction_static < 1, f"--mem-fraction-static must be in (0, 1), got {sa.mem_fraction_static}")
    if sa.max_total_tokens is not None:
        _need(sa.max_total_tokens >= sa.page_size, f"--max-total-tokens {sa.max_total_tokens} must hold at least one page (--page-size {sa.page_size})")
    if sa.max_running_requests is not None:
        _need(sa.max_running_requests >= 1, f"--max-running-requests must be >= 1, got {sa.max_running_requests}")
    if sa.chunked_prefill_size is not None:
        _need(sa.chunked_prefill_size == -1 or sa.chunked_prefill_size >= sa.page_size,
              f"--chunked-prefill-size must be -1 (off) or at least --page-size {sa.page_size}, got {sa.chunked_prefill_size}")
    _need(sa.stream_interval >= 1, f"--stream-interval must be >= 1, got {sa.stream_interval}")
    if sa.context_length is not None:
        _need(sa.context_length >= 1, f"--context-length must be >= 1, got {sa.context_length}")
    _need(sa.torch_compile_max_bs >= 1, f"--torch-compile-max-bs must be >= 1, got {sa.torch_compile_max_bs}")
    _check_sampling_defaults(sa)
    from sglang.srt.arg_groups.disagg import check_disagg_args

    check_disagg_args(sa)
    from sglang.srt.arg_groups.speculative import check_speculative

    check_speculative(sa)
    if sa.dist_init_addr:
        host, sep, port = sa.dist_init_addr.rpartition(":")
        _need(bool(sep and host and port.isdigit()), f"--dist-init-addr must be HOST:PORT, got {sa.dist_init_addr!r}")


def _check_sampling_defaults(sa: Any) -> None:
    """``--preferred-sampling-params``: a JSON object of sampling parameters the engine accepts."""
    from sglang.srt.configs.generation_config import preferred_sampling_params
    from sglang.srt.sampling.sampling_params import SamplingParams, SamplingParamsError

    try:
        SamplingParams.from_dict(preferred_sampling_params(sa.preferred_sampling_params))
    except (ValueError, SamplingParamsError) as exc:
        raise ServerArgsError(f"--preferred-sampling-params: {exc}; pass a JSON object such as '{{\"temperature\": 0.6, \"top_p\": 0.95}}'") from None
