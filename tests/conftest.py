from __future__ import annotations

import os

# Tests choose their own SGLANG_* settings; a developer's shell must not leak in.
for _k in [k for k in os.environ if k.startswith("SGLANG_")]:
    del os.environ[_k]
