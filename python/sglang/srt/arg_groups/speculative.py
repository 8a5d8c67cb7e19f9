"""Speculative decoding's flags: upstream's derived values (resolution) and the start-up checks.

Resolution publishes into the ``spec`` bag; the runtime reads ``get_spec()``, never ``server_args``.
"""

from __future__ import annotations

from typing import Any

from sglang.srt.arg_groups.errors import ServerArgsError

# Upstream's default batch cap of a speculative server (each request verifies several rows per step).
SPEC_MAX_RUNNING_REQUESTS = 48

_NEEDS = {
    "EAGLE": "an EAGLE draft head (--speculative-draft-model-path) run for --speculative-num-steps tree-drafting forwards "
             "on the target's hidden states, which this build does not implement",
    "EAGLE3": "an EAGLE-3 draft head (--speculative-draft-model-path) fed with three of the target's hidden-state layers, "
              "which this build does not implement",
}

# STANDALONE without --speculative-num-steps: upstream's auto choice for models without a tuned table
# (steps 3, topk 1, 4 tokens verified); its Llama/Grok table (5, 4, 8) drafts trees, which this build does not.
STANDALONE_AUTO = (3, 1, 4)


def speculative_declarations(view: Any) -> dict[str, Any]:
    """What upstream's ``_handle_speculative_decoding`` derives, as declarations (pipeline-internal)."""
    algo = view.speculative_algorithm
    if algo is None:
        return {}
    decl: dict[str, Any] = {}
    if algo == "NEXTN":  # upstream rewrites NEXTN (multi-token-prediction heads) to EAGLE
        decl["speculative_algorithm"] = "EAGLE"
    if view.max_running_requests is None:
        decl["max_running_requests"] = SPEC_MAX_RUNNING_REQUESTS
    if algo == "NGRAM":
        decl["speculative_eagle_topk"] = view.speculative_ngram_max_bfs_breadth  # always, as upstream
        if view.speculative_num_draft_tokens is None:
            decl["speculative_num_draft_tokens"] = view.speculative_ngram_max_match_window_size
    if algo == "STANDALONE":
        steps, topk = view.speculative_num_steps, view.speculative_eagle_topk
        if steps is None:
            if topk is None and view.speculative_num_draft_tokens is None:  # else check_speculative says set all three
                decl.update(zip(("speculative_num_steps", "speculative_eagle_topk", "speculative_num_draft_tokens"), STANDALONE_AUTO))
        else:
            if topk is None:
                decl["speculative_eagle_topk"] = topk = 1
            if topk == 1:  # a chain verifies its root and every draft step, as upstream forces
                decl["speculative_num_draft_tokens"] = steps + 1
    return decl


def _need(cond: bool, msg: str) -> None:
    if not cond:
        raise ServerArgsError(msg)


def check_speculative(sa: Any) -> None:
    """Refuse what this build cannot run, naming the flag and what it needs."""
    algo = sa.speculative_algorithm
    if algo is None:
        return
    _need(algo not in _NEEDS, f"--speculative-algorithm {algo} needs {_NEEDS.get(algo)}; use --speculative-algorithm NGRAM "
                              "(draft-free: drafts come from the prompt and earlier outputs) or STANDALONE (a draft model)")
    if algo == "STANDALONE":
        _check_standalone(sa)
    _need(sa.tp_size == 1, f"--speculative-algorithm {algo} runs on one tensor-parallel rank here: drop --tp-size {sa.tp_size} "
                           "(or --speculative-algorithm)")
    _need(not (sa.enable_lora or sa.lora_paths), f"--speculative-algorithm {algo} with LoRA adapters is not implemented here (a verify "
                                                 "step runs the fused plan, which adapter rows stand aside from): drop --enable-lora / "
                                                 "--lora-paths, or --speculative-algorithm")
    _need(sa.disaggregation_mode in (None, "null"), f"--speculative-algorithm {algo} on a prefill or decode server is not implemented "
                                                    f"here: drop --disaggregation-mode {sa.disaggregation_mode} or --speculative-algorithm")
    n = sa.speculative_num_draft_tokens
    _need(n is None or n >= 1, f"--speculative-num-draft-tokens must be >= 1 (the last sampled token counts), got {n}")
    for flag, v in (("single", sa.speculative_accept_threshold_single), ("acc", sa.speculative_accept_threshold_acc)):
        _need(0 < v <= 1, f"--speculative-accept-threshold-{flag} must be in (0, 1] (1.0: lossless), got {v}")
    lo, hi = sa.speculative_ngram_min_match_window_size, sa.speculative_ngram_max_match_window_size
    _need(1 <= lo <= hi, f"--speculative-ngram-min-match-window-size ({lo}) must be >= 1 and at most "
                         f"--speculative-ngram-max-match-window-size ({hi})")
    _need(sa.speculative_ngram_max_trie_depth >= 1, "--speculative-ngram-max-trie-depth must be >= 1")
    _need(sa.speculative_ngram_capacity >= 1, "--speculative-ngram-capacity must be >= 1")
    _need(1 <= sa.speculative_ngram_min_bfs_breadth <= sa.speculative_ngram_max_bfs_breadth,
          "--speculative-ngram-min-bfs-breadth must be >= 1 and at most --speculative-ngram-max-bfs-breadth")


def _check_standalone(sa: Any) -> None:
    _need(bool(sa.speculative_draft_model_path), "--speculative-algorithm STANDALONE needs --speculative-draft-model-path (a model "
                                                 "with the target's vocabulary, e.g. a smaller one of its family)")
    steps, topk = sa.speculative_num_steps, sa.speculative_eagle_topk
    _need(steps is not None, "--speculative-eagle-topk and --speculative-num-draft-tokens need --speculative-num-steps too (set the "
                             "three together, or none for the default 3 / 1 / 4)")
    _need(steps >= 1, f"--speculative-num-steps must be >= 1 (draft forwards per step), got {steps}")
    _need(topk == 1, f"--speculative-eagle-topk {topk}: STANDALONE drafts a chain here (topk 1); draft trees (topk > 1) are not "
                     "implemented: use --speculative-eagle-topk 1")
