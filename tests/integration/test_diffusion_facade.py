"""The facade and the module-scope-safe modules import nothing of the runtime (fresh interpreters)."""

from __future__ import annotations

import pytest

from helpers.dists import ok, run_python

pytestmark = [pytest.mark.slow]


RUNTIME = """
import sys
heavy = sorted(m for m in sys.modules if m == "torch" or (m.startswith("sglang.multimodal_gen.runtime.") and not m.startswith("sglang.multimodal_gen.runtime.platforms")))
print(heavy)
"""


@pytest.mark.parametrize(
    "stmt",
    [
        "from sglang.multimodal_gen import DiffGenerator",
        "import sglang.multimodal_gen.envs",
        "from sglang.multimodal_gen.runtime.platforms import Platform, PlatformEnum",
        "from sglang.multimodal_gen.runtime.platforms.plugins import HookType, plugin_hook",
    ],
)
def test_module_scope_imports_are_light(stmt):
    assert ok(run_python(stmt + "\n" + RUNTIME)).strip() == "[]"


def test_diff_generator_proxy_resolves_on_use():
    code = """
    import sys
    from sglang.multimodal_gen import DiffGenerator
    print(repr(DiffGenerator))
    f = DiffGenerator.from_pretrained
    print(f.__qualname__, "sglang.multimodal_gen.runtime.entrypoints.diffusion_generator" in sys.modules)
    """
    out = ok(run_python(code)).splitlines()
    assert out == ["<lazy sglang.multimodal_gen.DiffGenerator>", "DiffGenerator.from_pretrained True"]


def test_upstream_module_path_of_the_facade_imports_the_same_class():
    code = """
    from sglang.multimodal_gen import DiffGenerator as lazy
    from sglang.multimodal_gen.runtime.entrypoints.diffusion_generator import DiffGenerator
    print(DiffGenerator.__module__, DiffGenerator.from_pretrained.__func__ is lazy.from_pretrained.__func__)
    """
    assert ok(run_python(code)).split() == ["sglang.multimodal_gen.runtime.entrypoints.diffusion_generator", "True"]


def test_sampling_params_and_pipeline_config_load_on_use():
    code = """
    import sys
    import sglang.multimodal_gen as mg
    before = "sglang.multimodal_gen.runtime.pipelines.sampling_params" in sys.modules
    print(before, mg.SamplingParams.__module__, mg.PipelineConfig().architecture)
    """
    assert ok(run_python(code)).strip() == "False sglang.multimodal_gen.runtime.pipelines.sampling_params DigitsDiT"


def test_unknown_facade_attribute_is_an_attribute_error():
    code = """
    import sglang.multimodal_gen as mg
    try:
        mg.Nope
    except AttributeError as e:
        print(e)
    """
    assert "has no attribute 'Nope'" in ok(run_python(code))
