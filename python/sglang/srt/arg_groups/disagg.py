"""``--disaggregation-*`` checks and the timeouts of the handshake and the transfer.

Out of scope here, refused at start-up: tensor or data parallelism on either side (``--tp-size``,
``--dp-size``, ``--nnodes``, ``--use-ray``), LoRA adapters, and the ``fake`` backend on a prefill server.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sglang.srt.arg_groups.errors import ServerArgsError
from sglang.utils.env import EnvValueError, env_number

MODES = ("null", "prefill", "decode")
TRANSFER_BACKENDS = ("mooncake", "mooncake_tcp", "fake")
DEBIAN_PACKAGES = ("libibverbs1", "librdmacm1", "libnuma1")
PIP_PACKAGE = "mooncake-transfer-engine-non-cuda"


@dataclass(frozen=True)
class Timeouts:
    """Bounds on every wait, from the environment (upstream's names and defaults)."""

    bootstrap: float  # prefill: a request waits this long for its decode server's page list
    waiting: float  # decode: a request waits this long for its prefill server's KV
    heartbeat: float  # decode: how often each prefill server's bootstrap endpoint is polled
    heartbeat_failures: int  # consecutive failed polls before a prefill server counts as gone

    @classmethod
    def from_env(cls) -> Timeouts:
        def num(name: str, default: float) -> float:
            try:
                value = env_number(name, default, float)
            except EnvValueError as e:
                raise ServerArgsError(str(e)) from None
            if value <= 0:
                raise ServerArgsError(f"{name}={value!r} must be positive")
            return value

        return cls(num("SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT", 300.0), num("SGLANG_DISAGGREGATION_WAITING_TIMEOUT", 300.0),
                   num("SGLANG_DISAGGREGATION_HEARTBEAT_INTERVAL", 5.0), int(num("SGLANG_DISAGGREGATION_HEARTBEAT_MAX_FAILURE", 2)))


def check_mooncake() -> None:
    """Raise :class:`ServerArgsError` naming what to install when Mooncake's transfer engine does not import."""
    try:
        import mooncake.engine  # noqa: F401
    except ImportError as exc:
        text = str(exc)
        if isinstance(exc, ModuleNotFoundError):
            fix = f"pip install {PIP_PACKAGE} (or `make install-disagg`)"
        else:  # the wheel is there, a shared library it links is not
            fix = f"install the Debian packages {' '.join(DEBIAN_PACKAGES)} (apt-get install {' '.join(DEBIAN_PACKAGES)})"
        raise ServerArgsError(f"--disaggregation-transfer-backend mooncake needs Mooncake's transfer engine, which does not "
                              f"import ({text}): {fix}") from None


def check_disagg_args(sa: Any) -> None:
    """Start-up checks of the ``--disaggregation-*`` flags; errors name the flag and the fix."""
    mode = sa.disaggregation_mode
    if mode == "null":
        given = [f for f, default in (("--disaggregation-transfer-backend", sa.disaggregation_transfer_backend == "mooncake"),
                                      ("--disaggregation-bootstrap-port", sa.disaggregation_bootstrap_port == 8998),
                                      ("--disaggregation-ib-device", sa.disaggregation_ib_device is None),
                                      ("--disaggregation-decode-enable-radix-cache", not sa.disaggregation_decode_enable_radix_cache),
                                      ("--num-reserved-decode-tokens", sa.num_reserved_decode_tokens == 512)) if not default]
        if given:
            raise ServerArgsError(f"{', '.join(given)} take effect only with --disaggregation-mode prefill or decode")
        return
    for flag, bad in (("--tp-size", sa.tp_size != 1), ("--dp-size", sa.dp_size != 1), ("--nnodes", sa.nnodes != 1), ("--use-ray", sa.use_ray)):
        if bad:
            raise ServerArgsError(f"--disaggregation-mode {mode} runs one scheduler rank per server here: drop {flag} (tensor- or "
                                  "data-parallel prefill/decode servers are not implemented; scale out with more servers behind the router)")
    if sa.enable_lora or sa.lora_paths:
        raise ServerArgsError(f"--disaggregation-mode {mode} with LoRA adapters is not implemented here (the KV a prefill server "
                              "sends is not tagged with its adapter); drop --enable-lora / --lora-paths, or serve adapters colocated")
    fake = sa.disaggregation_transfer_backend == "fake"
    if fake and mode == "prefill":
        raise ServerArgsError("--disaggregation-transfer-backend fake is for decode servers only (it benchmarks decoding with no "
                              "prefill server; nothing would receive a prefill server's KV): use mooncake on a prefill server")
    if fake and sa.disaggregation_ib_device is not None:
        raise ServerArgsError("--disaggregation-ib-device names an RDMA device, which --disaggregation-transfer-backend fake does not "
                              "use; drop one of them")
    if fake and sa.disaggregation_decode_enable_radix_cache:
        raise ServerArgsError("--disaggregation-decode-enable-radix-cache caches KV a prefill server sent, which "
                              "--disaggregation-transfer-backend fake never receives (as upstream): drop one of them")
    if sa.disaggregation_decode_enable_radix_cache and mode != "decode":
        raise ServerArgsError("--disaggregation-decode-enable-radix-cache is for decode servers (a prefill server keeps its prefix "
                              "cache anyway): drop it or use --disaggregation-mode decode")
    if sa.disaggregation_decode_enable_radix_cache and sa.disable_radix_cache:
        raise ServerArgsError("--disaggregation-decode-enable-radix-cache keeps a prefix cache, which --disable-radix-cache turns off: "
                              "drop one of them")
    if sa.disaggregation_ib_device is not None and sa.disaggregation_transfer_backend == "mooncake_tcp":
        raise ServerArgsError("--disaggregation-ib-device names an RDMA device, which --disaggregation-transfer-backend mooncake_tcp "
                              "does not use; drop one of them")
    port = sa.disaggregation_bootstrap_port
    if not 1 <= port <= 65535 or port == sa.port:
        raise ServerArgsError(f"--disaggregation-bootstrap-port must be in 1..65535 and differ from --port, got {port}")
    if sa.num_reserved_decode_tokens < 0:
        raise ServerArgsError(f"--num-reserved-decode-tokens must be >= 0, got {sa.num_reserved_decode_tokens}")
    Timeouts.from_env()
    if not fake:
        check_mooncake()
