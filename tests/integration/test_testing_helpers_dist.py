"""The plugin_dist fixture: a distribution a subprocess discovers."""

from __future__ import annotations

import pytest

from sglang.testing.plugins import PluginDists

pytestmark = [pytest.mark.slow]


def test_plugin_dist_fixture_installs_a_distribution_a_subprocess_discovers(plugin_dist):
    assert isinstance(plugin_dist, PluginDists)
    plugin_dist.add(
        "demo-plugin",
        {"sglang.srt.platforms": {"demo": "demo_plugin:activate"}},
        files={
            "demo_plugin/__init__.py": "def activate():\n    return 'demo_plugin.p.P'\n",
            "demo_plugin/p.py": (
                "from sglang.srt.platforms import SRTPlatform, PlatformEnum\n"
                "class P(SRTPlatform):\n    _enum = PlatformEnum.OOT\n    device_name = 'demo'\n"
            ),
        },
    )
    out = plugin_dist.run("from sglang.srt.platforms import get_platform_decision as d; print(d().dist, d().rule)", SGLANG_PLATFORM="demo")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "demo-plugin explicit: SGLANG_PLATFORM=demo"


