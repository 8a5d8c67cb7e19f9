"""``SamplingParams``: one generation request, validated with errors naming the field."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

MAX_IMAGES_PER_REQUEST = 256
MAX_INFERENCE_STEPS = 1000
MAX_OUTPUT_SIZE = 512
# The work of one request is bounded, so the heaviest legal request delays others by a bounded time:
MAX_IMAGE_STEPS = 6400  # images x denoising steps: every image of a full request (256) at the default 25 steps
MAX_OUTPUT_PIXELS = 16 * MAX_OUTPUT_SIZE * MAX_OUTPUT_SIZE  # images x size x size


class SamplingParamsError(ValueError):
    """A request parameter is invalid; ``param`` names it."""

    def __init__(self, param: str, message: str) -> None:
        super().__init__(f"{param}: {message}")
        self.param, self.message = param, message


@dataclass
class SamplingParams:
    """What to draw and how.

    ``prompt`` may be a list (one image per prompt, times
    ``num_images_per_prompt``). ``seed`` is one integer (image ``i`` uses
    ``seed + i``), one integer per image, or ``None`` (random seeds, reported
    in each output so the image can be redrawn). ``size`` upscales the native
    resolution by nearest neighbour to ``size`` x ``size`` pixels.
    """

    prompt: str | list[str] = ""
    num_images_per_prompt: int = 1
    num_inference_steps: int | None = None
    guidance_scale: float | None = None
    seed: int | list[int] | None = None
    size: int | None = None
    extra: dict[str, object] = field(default_factory=dict)

    def prompts(self) -> list[str]:
        """The prompt of every image, in output order."""
        base = [self.prompt] if isinstance(self.prompt, str) else list(self.prompt)
        return [p for p in base for _ in range(self.num_images_per_prompt)]

    def seeds(self, count: int) -> list[int]:
        if self.seed is None:
            rng = random.SystemRandom()
            return [rng.randrange(0, 2**31) for _ in range(count)]
        if isinstance(self.seed, int):
            return [self.seed + i for i in range(count)]
        return list(self.seed)

    def validate(self, native_size: int, default_steps: int = 1) -> None:
        """Raise :class:`SamplingParamsError` naming the first bad field (``default_steps``: the
        pipeline's step count when the request gives none, for the per-request work bound)."""
        if isinstance(self.prompt, list):
            if not self.prompt or not all(isinstance(p, str) for p in self.prompt):
                raise SamplingParamsError("prompt", "must be a string or a non-empty list of strings")
        elif not isinstance(self.prompt, str):
            raise SamplingParamsError("prompt", f"must be a string, got {type(self.prompt).__name__}")
        if not isinstance(self.num_images_per_prompt, int) or isinstance(self.num_images_per_prompt, bool) or not 1 <= self.num_images_per_prompt <= MAX_IMAGES_PER_REQUEST:
            raise SamplingParamsError("n", f"must be an integer from 1 to {MAX_IMAGES_PER_REQUEST}, got {self.num_images_per_prompt!r}")
        count = len(self.prompts())
        if count > MAX_IMAGES_PER_REQUEST:
            raise SamplingParamsError("n", f"{count} images requested; at most {MAX_IMAGES_PER_REQUEST} per request")
        steps = self.num_inference_steps
        if steps is not None and (not isinstance(steps, int) or isinstance(steps, bool) or not 1 <= steps <= MAX_INFERENCE_STEPS):
            raise SamplingParamsError("num_inference_steps", f"must be an integer from 1 to {MAX_INFERENCE_STEPS}, got {steps!r}")
        g = self.guidance_scale
        if g is not None and (isinstance(g, bool) or not isinstance(g, (int, float)) or not 0 <= g <= 50):
            raise SamplingParamsError("guidance_scale", f"must be a number from 0 to 50, got {g!r}")
        if isinstance(self.seed, list):
            if len(self.seed) != count or not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in self.seed):
                raise SamplingParamsError("seed", f"a list of seeds needs one non-negative integer per image ({count})")
        elif self.seed is not None and (not isinstance(self.seed, int) or isinstance(self.seed, bool) or self.seed < 0):
            raise SamplingParamsError("seed", f"must be a non-negative integer, got {self.seed!r}")
        if self.size is not None and (
            not isinstance(self.size, int) or self.size < native_size or self.size % native_size or self.size > MAX_OUTPUT_SIZE
        ):
            raise SamplingParamsError(
                "size", f"must be a multiple of the native {native_size} pixels up to {MAX_OUTPUT_SIZE}, got {self.size!r}"
            )
        work = count * (steps or default_steps)
        if work > MAX_IMAGE_STEPS:
            raise SamplingParamsError("num_inference_steps", f"{count} images x {steps or default_steps} steps = {work}; at most "
                                      f"{MAX_IMAGE_STEPS} image-steps per request: ask for fewer images or steps, or split the request")
        pixels = count * (self.size or native_size) ** 2
        if pixels > MAX_OUTPUT_PIXELS:
            raise SamplingParamsError("size", f"{count} images of {self.size or native_size}x{self.size or native_size} pixels; at most "
                                      f"{MAX_OUTPUT_PIXELS} output pixels per request: ask for fewer or smaller images")
