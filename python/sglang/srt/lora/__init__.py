"""Multi-LoRA serving: adapters per request, mixed in one batch, loaded and unloaded at run time.

Roles (upstream's layout): ``lora_registry`` (names -> frozen ``LoRARef``s, in-flight counters),
``config`` / ``adapter`` (PEFT files), ``mem_pool`` (the fixed pool of adapter slots), ``backend`` (the
segmented products, a registry), ``layers`` (the per-layer hook), ``manager`` (the model runner's side:
host cache, pool, per-forward plan, admission check), ``tokenizer_side`` (names to ids, load and unload),
``messages`` (the load/unload messages). The flags are resolved by ``sglang.srt.arg_groups.lora_hook``.
Importing this package imports no torch.
"""
