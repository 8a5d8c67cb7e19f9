"""The platform contract document (``docs/plugin_contract.md``), rendered from both runtimes' tables.

It lives in the CLI because it reads both runtimes; ``sglang.plugin_core``
(the tables' format and rendering helpers) imports neither.

    python -m sglang.cli.plugins.contract_doc > docs/plugin_contract.md
"""

from __future__ import annotations

from sglang.plugin_core.contract_table import render


def render_document() -> str:
    from sglang.multimodal_gen.runtime.platforms.contract import DIFFUSION_CONTRACT, diffusion_classes
    from sglang.srt.platforms.contract import SRT_CONTRACT, srt_classes

    head = (
        "# Platform contract\n\n"
        "Generated from the platform classes and the contract tables by "
        "`python -m sglang.cli.plugins.contract_doc > docs/plugin_contract.md`; "
        "`tests/unit/test_plugin_contract_doc.py` fails when this file, the tables or the classes drift apart.\n\n"
        "Status: **Active** members are called by this project through `current_platform` (an out-of-tree "
        "implementation takes effect at once); **Planned** members are reserved; **Compatibility** members are "
        "kept adapters; **Identity** members describe the platform. \"spec:\" notes where the spec's table "
        "gives another status (this project calls more of the device operations than the reference does). "
        "`sglang plugins check DIST` reports every Active member a platform leaves at its default.\n\n"
        "Defining a platform class checks it against these tables' classes (rules: docs/plugins.md, \"The contract "
        "is checked when your class is defined\"): a public name not listed here, or an override the engine "
        "cannot call positionally with the listed parameters, is one `TypeError` naming every problem.\n"
    )
    srt = render(
        "SRT (`sglang.srt.platforms`)",
        srt_classes(),
        SRT_CONTRACT,
        "A platform class subclasses `SRTPlatform` (and usually a `DeviceMixin` subclass of its own).",
    )
    diff = render(
        "Diffusion (`sglang.multimodal_gen.runtime.platforms`)",
        diffusion_classes(),
        DIFFUSION_CONTRACT,
        "A platform class subclasses the diffusion `Platform`, sets `_enum = PlatformEnum.OOT` and non-blank "
        "`device_name` / `device_type`, and constructs without arguments.",
    )
    return f"{head}\n{srt}\n{diff}"


def main() -> None:
    print(render_document(), end="")


if __name__ == "__main__":
    main()
