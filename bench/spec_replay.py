"""NGRAM's draft policy replayed on recorded greedy answers: a deterministic figure for tuning it, free of the
machine's noise.

Greedy answers do not depend on speculation, so which drafts a policy would have verified and how many of each
the target would have accepted follow from the answer alone. This generates ``bench/speculative.py``'s workloads
once in-process with the default configuration (``--extra-args`` adds server flags), timing each prompt's prefill
and the decode steps, then replays every answer through the speculator's own rule (``ngram_worker.ngram_want``, the
n-gram store, ``DraftState`` and ``MatchAcceptance``, the store fresh per request as the bench flushes it) and
prices each step with ``draft_policy.verify_cost`` (the host's table as measured: a server calibrates it live,
``speculative/cost_meter.py``, so its drafts can differ from the replay's where the table is off). It prints, per
workload, the verify steps, the accept length, the modelled decode-phase speed-up and the end-to-end one with the
measured prefill added to both sides, and the ceiling of both on this CPU model: every draft accepted, at the draft
length that earns the most under its verify costs (no policy beats it; where a target exceeds it, the CPU's verify
rows put it out of reach). What it leaves out is what ``bench/speculative.py`` measures: the scheduler's work per
step and the serving processes.

    .venv/bin/python bench/spec_replay.py [--max-tokens 96] [--extra-args "..."]
"""

from __future__ import annotations

import argparse
import shlex
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from speculative import WORKLOADS


def generate(extra: list[str], max_tokens: int) -> tuple[dict[str, list[tuple[list[int], list[int], float]]], float]:
    """Per workload (prompt ids, greedy answer, prefill seconds); and the mean decode step in seconds."""
    from sglang.srt.managers.io_struct import BatchTokenIDOut, TokenizedGenerateReqInput
    from sglang.srt.managers.scheduler import Scheduler
    from sglang.srt.runtime_context import get_context
    from sglang.srt.server_args import ServerArgs
    from sglang.utils.process import free_port

    parser = argparse.ArgumentParser()
    ServerArgs.add_cli_args(parser)
    sa = ServerArgs.from_cli_args(parser.parse_args(["--log-level", "warning", *extra]))
    get_context().publish(sa, role="scheduler", warn=False)
    s = Scheduler(sa, 0, 0, f"tcp://127.0.0.1:{free_port()}")
    out: dict[str, list[tuple[list[int], list[int], float]]] = {}
    decode_s, decode_n = 0.0, 0
    for warm in (True, False):
        for name, prompts in WORKLOADS.items():
            for text in prompts:
                ids = s.tokenizer.encode(s.tokenizer.apply_chat_template([{"role": "user", "content": text}]))
                if s.tree is not None:
                    s.tree.reset()
                s.add_request(TokenizedGenerateReqInput("r", ids, {"temperature": 0, "max_new_tokens": max_tokens}))
                t0 = time.perf_counter()
                s.step()
                t1 = time.perf_counter()
                while s.has_work():
                    s.step()
                t2 = time.perf_counter()
                answer = [t for o in s.outbox if isinstance(o, BatchTokenIDOut) for t in o.new_token_ids[0]]
                s.outbox.clear()
                if not warm:
                    out.setdefault(name, []).append((ids, answer, t1 - t0))
                    decode_s, decode_n = decode_s + t2 - t1, decode_n + len(answer) - 1
            if warm:
                break  # one workload warms every kernel up
    return out, decode_s / max(decode_n, 1)


def replay(runs: list[tuple[list[int], list[int], float]], k_max: int, max_tokens: int) -> tuple[int, int, float, int]:
    """(decode-phase tokens, decode steps, their cost in plain decode steps, steps with drafts) of one workload's
    answers under the policy; the first token of each answer comes from its prefill, as in the engine."""
    from sglang.srt.speculative.draft_policy import DraftState, MatchAcceptance, verify_cost
    from sglang.srt.speculative.ngram_store import NgramStore
    from sglang.srt.speculative.ngram_worker import ngram_want

    matches = MatchAcceptance()  # the server's: kept across requests and flushes
    tokens = steps = verifies = 0
    cost = 0.0
    for prompt, answer, _ in runs:
        store, state = NgramStore(), DraftState()
        store.add("r", prompt + answer[:1])
        pos = 1
        while pos < len(answer):
            k, match = ngram_want(store, matches, "r", state, k_max)
            k = min(k, max_tokens - pos - 1)  # the speculator's room: max_new_tokens (an answer may end sooner, at EOS)
            drafts = store.draft("r", k) if k > 0 else []
            ok = 0
            while ok < len(drafts) and pos + ok < len(answer) and drafts[ok] == answer[pos + ok]:
                ok += 1
            if drafts:
                state.update(len(drafts), ok)
                matches.update(match[0], len(drafts), ok, match[1])
                verifies += 1
            cost += verify_cost(1 + len(drafts)) if drafts else 1.0
            steps += 1
            store.extend("r", answer[pos : pos + ok + 1])
            pos += ok + 1
        tokens += len(answer) - 1
    return tokens, steps, cost, verifies


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--max-tokens", type=int, default=96)
    ap.add_argument("--extra-args", default="", help="server flags for the generating scheduler")
    args = ap.parse_args()
    from sglang.srt.speculative.draft_policy import COMPUTE_KNEE, verify_cost

    answers, step_s = generate(shlex.split(args.extra_args), args.max_tokens)
    k_max = min(7, COMPUTE_KNEE - 1)  # NGRAM's default 8 tokens a verify, cut by the knee at one request
    # the ceiling: every draft accepted, k drafts a step for the k that earns the most tokens per decode row
    k_top = max(range(k_max + 1), key=lambda k: (k + 1) / verify_cost(k + 1) if k else 1.0)  # 0: plain decoding
    top = (k_top + 1) / verify_cost(k_top + 1) if k_top else 1.0
    print(f"decode step {step_s * 1e3:.2f} ms (measured); drafts per step at most {k_max}; every draft accepted, "
          f"{k_top} a step earns the most: {top:.2f} tokens a decode row (the ceiling)")
    print(f"{'workload':<16} {'tokens':>7} {'verifies':>9} {'accept len':>11} {'decode x':>9} {'with prefill x':>15} "
          f"{'ceiling x':>10} {'with prefill':>13}")
    print("(tokens after each answer's first; accept len: tokens per decode step; x: plain decode steps over the replay's cost)")
    for name, runs in answers.items():
        tokens, steps, cost, verifies = replay(runs, k_max, args.max_tokens)
        prefill = sum(r[2] for r in runs) / step_s  # in decode steps
        print(f"{name:<16} {tokens:>7} {verifies:>9} {tokens / max(steps, 1):>11.2f} {tokens / max(cost, 1e-9):>8.2f}x "
              f"{(tokens + prefill) / max(cost + prefill, 1e-9):>14.2f}x {top:>9.2f}x "
              f"{(tokens + prefill) / max(tokens / top + prefill, 1e-9):>12.2f}x")

if __name__ == "__main__":
    main()
