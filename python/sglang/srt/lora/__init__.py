"""Multi-LoRA serving: adapters per request, mixed in one batch, loaded and unloaded at run time.

Roles (upstream's layout): ``lora_registry`` (names -> frozen ``LoRARef``s, in-flight counters; the
tokenizer manager's), ``sglang.srt.arg_groups.lora_hook`` (launcher-stage late resolution of the ``lora`` namespace),
``config`` / ``adapter`` (PEFT files), ``mem_pool`` (the fixed pool of adapter slots), ``backend`` (the
segmented products, a registry), ``layers`` (the per-layer hook), ``manager`` (the model runner's side),
``scheduling`` (the scheduler's side). Importing this package imports no torch.
"""
