"""The tiers of ``sglang.srt.runtime_context``: bags, flags, resources, forward, parallel, roles."""
