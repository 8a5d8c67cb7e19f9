"""``DiffGenerator`` on the shipped digits model: quality gate and determinism."""

from __future__ import annotations

import numpy as np
import pytest

from sglang.multimodal_gen import DiffGenerator
from sglang.multimodal_gen.training.evaluate import classify, digit_classifier, per_digit_scores


def _decode_png(data: bytes) -> np.ndarray:
    """A PNG file's pixels, read by Pillow (the format check a client would make)."""
    import io

    from PIL import Image

    with Image.open(io.BytesIO(data)) as img:
        assert img.format == "PNG" and img.mode == "L"
        return np.asarray(img)


@pytest.fixture(scope="module")
def gen():
    g = DiffGenerator.from_pretrained(model_path="digits-dit", log_level="warning")
    yield g
    g.shutdown()


def test_a_classifier_recognises_the_requested_digit(gen):
    prompts = [f"a handwritten digit {d}" for d in range(10) for _ in range(10)]
    outputs = gen.generate(prompt=prompts, seed=2026, num_inference_steps=25, guidance_scale=3.0)
    assert len(outputs) == 100 and [o.label for o in outputs] == [d for d in range(10) for _ in range(10)]
    assert all(o.image.shape == (8, 8) and o.image.dtype == np.float32 for o in outputs)
    predicted = classify([o.image for o in outputs], digit_classifier())
    scores = per_digit_scores([o.label for o in outputs], predicted)
    assert sum(scores.values()) >= 95, scores
    assert min(scores.values()) >= 8, scores


def test_same_seed_and_request_give_the_same_image_bit_for_bit(gen):
    a = gen.generate(prompt="a handwritten digit 4", seed=11, num_inference_steps=10)
    b = gen.generate(prompt="a handwritten digit 4", seed=11, num_inference_steps=10)
    assert np.array_equal(a[0].image, b[0].image) and a[0].to_png() == b[0].to_png()


def test_same_seed_inside_another_batch_gives_a_close_image(gen):
    alone = gen.generate(prompt="seven", seed=5, num_inference_steps=10)[0].image
    batch = gen.generate(prompt=["a 1", "seven", "a 9", "0"], seed=[40, 5, 41, 42], num_inference_steps=10)
    assert batch[1].seed == 5
    assert np.abs(batch[1].image - alone).max() <= 1e-3


def test_different_seeds_give_different_images(gen):
    a, b = gen.generate(prompt="eight", seed=[1, 2], num_inference_steps=10, num_images_per_prompt=2)
    assert not np.array_equal(a.image, b.image)


def test_guidance_scale_changes_the_image(gen):
    a = gen.generate(prompt="two", seed=3, num_inference_steps=10, guidance_scale=0.0)[0]
    b = gen.generate(prompt="two", seed=3, num_inference_steps=10, guidance_scale=6.0)[0]
    assert np.abs(a.image - b.image).max() > 0.05


def test_output_path_saves_pngs_that_decode_to_the_image(gen, tmp_path):
    outs = gen.generate(prompt="a handwritten digit 6", seed=9, num_inference_steps=8, size=32, output_path=tmp_path)
    path = tmp_path / "000_6_9.png"
    assert outs[0].path == str(path) and path.is_file()
    px = _decode_png(path.read_bytes())
    assert px.shape == (32, 32)
    assert np.array_equal(px[::4, ::4], outs[0].to_uint8(8))


@pytest.mark.parametrize(
    ("kwargs", "param", "text"),
    [
        ({"prompt": "a cat"}, "prompt", "'a cat' names no digit"),
        ({"prompt": "3 or 4"}, "prompt", "names several digits (3, 4)"),
        ({"prompt": "3", "num_inference_steps": 0}, "num_inference_steps", "must be an integer from 1 to 1000, got 0"),
        ({"prompt": "3", "guidance_scale": -1}, "guidance_scale", "must be a number from 0 to 50, got -1"),
        ({"prompt": ["3", "4"], "seed": [1]}, "seed", "a list of seeds needs one non-negative integer per image (2)"),
        ({"prompt": "3", "size": 12}, "size", "must be a multiple of the native 8 pixels up to 512, got 12"),
    ],
)
def test_bad_requests_name_the_parameter_and_the_generator_keeps_serving(gen, kwargs, param, text):
    from sglang.multimodal_gen import SamplingParams  # noqa: F401  (lazy facade attribute)
    from sglang.multimodal_gen.runtime.pipelines.sampling_params import SamplingParamsError

    with pytest.raises(SamplingParamsError) as info:
        gen.generate(**kwargs)
    assert info.value.param == param and text in str(info.value)
    assert gen.generate(prompt="1", seed=0, num_inference_steps=2)[0].label == 1


def test_sequence_parallel_over_two_workers_matches_one(gen):
    prompts = ["a handwritten digit 0", "five", "a 9"]
    single = gen.generate(prompt=prompts, seed=77, num_inference_steps=10)
    with DiffGenerator.from_pretrained(model_path="digits-dit", num_gpus=2, log_level="warning") as sp:
        assert sp.info["num_gpus"] == 2
        split = sp.generate(prompt=prompts, seed=77, num_inference_steps=10)
    assert [o.label for o in split] == [0, 5, 9]
    for a, b in zip(single, split):
        assert np.abs(a.image - b.image).max() <= 1e-4


def test_worker_count_that_cannot_split_the_model_is_refused_naming_the_flag():
    from sglang.multimodal_gen.runtime.managers.launcher import SchedulerStartError

    with pytest.raises(SchedulerStartError, match=r"--num-gpus 3 cannot split DigitsDiT \(16 tokens, 4 heads\) evenly; choose one of 1, 2, 4"):
        DiffGenerator.from_pretrained(model_path="digits-dit", num_gpus=3, log_level="error")


def test_a_dead_worker_fails_requests_instead_of_hanging():
    import time

    from sglang.multimodal_gen.runtime.entrypoints.client import SchedulerDiedError

    with DiffGenerator.from_pretrained(model_path="digits-dit", num_gpus=2, log_level="error") as sp:
        sp._procs[1].kill()
        t0 = time.monotonic()
        # either the client sees the dead process, or rank 0 reports the broken process group first (gloo says the
        # peer reset or closed the connection, whichever side of the socket noticed first)
        with pytest.raises(SchedulerDiedError, match=r"sglang-diffusion-scheduler-1 \(exit code -9\)|Connection (reset|closed) by peer"):
            for _ in range(50):  # the death is noticed within a poll interval
                sp.generate(prompt="1", seed=0, num_inference_steps=2, timeout=30)
                time.sleep(0.1)
        assert time.monotonic() - t0 < 30
