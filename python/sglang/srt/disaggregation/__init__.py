"""Prefill/decode disaggregation (``--disaggregation-mode prefill|decode``): a prefill server runs each
request's prompt and writes its KV pages, with the first output token, into a decode server's KV pool
through a transfer engine (Mooncake); the decode server then decodes. See docs/scale_out.md.

Layout: :mod:`sglang.srt.arg_groups.disagg` (flag checks, timeouts) and
:mod:`sglang.srt.managers.bootstrap_fields` (request fields) sit where every server reads them; here
:mod:`.base` (states, errors, KV layout), :mod:`.bootstrap_server` (the prefill side's registry), :mod:`.transfer` (the engines),
:mod:`.kv_manager` (the control plane), :mod:`.prefill` and :mod:`.decode` (the scheduler's two sides),
:mod:`.scheduler` (attaching a side to a scheduler rank), :mod:`.mini_lb` (the router).
"""
