"""Find a diffusion model directory, build its pipeline, load its weights."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import torch

from sglang.multimodal_gen.runtime.loader.paths import DiffusionModelLoadError, resolve_model_path

if TYPE_CHECKING:
    from sglang.multimodal_gen.runtime.server_args import ServerArgs

logger = logging.getLogger(__name__)

def _model_registry() -> dict[str, Any]:
    from sglang.multimodal_gen.runtime.models.digits_dit import DigitsDiT

    return {DigitsDiT.arch: DigitsDiT}


def build_torch_compile_kwargs() -> dict[str, Any]:
    """``torch.compile`` arguments from the platform (affects only callers of this function)."""
    from sglang.multimodal_gen.runtime.platforms import current_platform

    kwargs: dict[str, Any] = {"backend": current_platform.get_compile_backend()}
    options = current_platform.get_compile_options()
    if options:
        kwargs["options"] = options
    return kwargs


def _layerwise_offload(model: torch.nn.Module, device: torch.device) -> None:
    """Keep each block on the CPU and move it to ``device`` only for its forward."""
    for blk in getattr(model, "blocks", []):
        blk.to("cpu")
        blk.register_forward_pre_hook(lambda m, _a: m.to(device) and None)
        blk.register_forward_hook(lambda m, _a, _o: m.to("cpu") and None)


def load_pipeline(server_args: ServerArgs, device: torch.device) -> Any:
    """Build the pipeline of ``server_args.model_path`` on ``device``."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    from sglang.multimodal_gen.runtime.layers.attention.backends import AttentionBackendEnum
    from sglang.multimodal_gen.runtime.models.digits_dit import PixelDecoder
    from sglang.multimodal_gen.runtime.pipelines.digits_pipeline import DigitsDiffusionPipeline
    from sglang.multimodal_gen.runtime.pipelines.pipeline_config import PipelineConfig, PipelineConfigError
    from sglang.multimodal_gen.runtime.platforms import current_platform

    model_dir = resolve_model_path(server_args.model_path)
    try:
        config = PipelineConfig.from_pretrained(model_dir)
    except PipelineConfigError as exc:
        raise DiffusionModelLoadError(str(exc)) from exc
    registry = _model_registry()
    if config.architecture not in registry:
        raise DiffusionModelLoadError(
            f"{model_dir / 'pipeline_config.json'}: architecture {config.architecture!r} is not supported; supported: {', '.join(registry)}"
        )
    current_platform.verify_model_arch(config.architecture)
    n = server_args.num_gpus
    if n > 1 and (config.dit.num_tokens % n or config.dit.num_heads % n):
        ok = [k for k in range(1, 65) if config.dit.num_tokens % k == 0 and config.dit.num_heads % k == 0]
        raise DiffusionModelLoadError(
            f"--num-gpus {n} cannot split {config.architecture} ({config.dit.num_tokens} tokens, {config.dit.num_heads} heads) "
            f"evenly; choose one of {', '.join(map(str, ok))}"
        )
    backend = AttentionBackendEnum.parse(server_args.attention_backend) if server_args.attention_backend else None
    dtype = getattr(torch, server_args.dtype)
    model = registry[config.architecture](config.dit, attn_backend=backend)
    weights = model_dir / "model.safetensors"
    try:
        state = load_file(str(weights))
    except (FileNotFoundError, SafetensorError, OSError) as exc:
        raise DiffusionModelLoadError(f"cannot read weights {weights}: {exc}") from exc
    expected = model.state_dict()
    missing = sorted(set(expected) - set(state))
    unexpected = sorted(set(state) - set(expected))
    if missing or unexpected:
        raise DiffusionModelLoadError(f"{weights}: missing tensors {missing[:5]}, unexpected tensors {unexpected[:5]}")
    for name, tensor in state.items():
        if tensor.shape != expected[name].shape:
            raise DiffusionModelLoadError(f"{weights}: tensor {name!r} has shape {tuple(tensor.shape)}, the config expects {tuple(expected[name].shape)}")
    model.load_state_dict(state)
    model = model.to(device=device, dtype=dtype).eval()
    if server_args.dit_layerwise_offload and device.type != "cpu":
        _layerwise_offload(model, device)
    vae = current_platform.optimize_vae(PixelDecoder().to(device))
    if server_args.enable_torch_compile:
        model = torch.compile(model, **build_torch_compile_kwargs())
    count = sum(p.numel() for p in model.parameters())
    logger.info("loaded %s from %s: %.2f M parameters, %s on %s", config.architecture, model_dir, count / 1e6, dtype, device)
    return DigitsDiffusionPipeline(config, model, vae, device, dtype)
