"""torch.distributed set-up; the live topology lands in ``get_parallel()``."""

from sglang.srt.distributed.parallel_state import (
    destroy_model_parallel,
    init_distributed_environment,
    initialize_model_parallel,
)

__all__ = ["destroy_model_parallel", "init_distributed_environment", "initialize_model_parallel"]
