"""``sglang generate``: draw images with a diffusion model from the command line."""

from __future__ import annotations

import argparse
import sys


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="sglang generate", description="Generate images with a diffusion model and save them as PNG files.")
    p.add_argument("--model-path", default="digits-dit", help="diffusion model directory or alias (default: digits-dit)")
    p.add_argument("--prompt", action="append", required=True, help="what to draw, e.g. 'a handwritten digit 7'; repeat for several")
    p.add_argument("--num-inference-steps", type=int, default=None)
    p.add_argument("--guidance-scale", type=float, default=None)
    p.add_argument("--seed", type=int, default=None, help="seed of the first image; image i uses seed + i")
    p.add_argument("--num-images", type=int, default=1, help="images per prompt")
    p.add_argument("--size", type=int, default=None, help="output side in pixels (a multiple of the native size)")
    p.add_argument("--output-path", default="outputs", help="directory for the PNG files (default: outputs)")
    p.add_argument("--attention-backend", default=None)
    p.add_argument("--dtype", default="float32")
    p.add_argument("--log-level", default="warning")
    return p


def generate(argv: list[str]) -> int:
    from sglang.multimodal_gen import DiffGenerator

    args = build_parser().parse_args(argv)
    prompt = args.prompt[0] if len(args.prompt) == 1 else args.prompt
    with DiffGenerator.from_pretrained(
        model_path=args.model_path, attention_backend=args.attention_backend, dtype=args.dtype, log_level=args.log_level
    ) as gen:
        outputs = gen.generate(
            prompt=prompt,
            num_inference_steps=args.num_inference_steps,
            guidance_scale=args.guidance_scale,
            seed=args.seed,
            num_images_per_prompt=args.num_images,
            size=args.size,
            output_path=args.output_path,
        )
    for out in outputs:
        print(f"{out.path}\tprompt={out.prompt!r} seed={out.seed} steps={out.num_inference_steps} guidance={out.guidance_scale}")
    return 0


if __name__ == "__main__":
    sys.exit(generate(sys.argv[1:]))
