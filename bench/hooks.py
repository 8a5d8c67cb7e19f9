"""Per-call overhead of hook chains, beside hand-written closures and wrapt.

Run: .venv/bin/python bench/hooks.py   (prints ns per call and ratios)

All hooks are trivial, so the numbers are the cost of the machinery: the
composed chain against the same logic written by hand as one closure.
"""

from __future__ import annotations

import sys
import timeit
import types

import wrapt

from sglang.srt.plugins.hook_registry import HookRegistry, HookType

N = 200_000
REPEAT = 21


def target(x):
    return x


def before(*args, **kwargs):
    return None


def after(result, *args, **kwargs):
    return None


def around(original_fn, *args, **kwargs):
    return original_fn(*args, **kwargs)


def closure_passthrough(fn):
    def w(*args, **kwargs):
        return fn(*args, **kwargs)

    return w


def closure_before_around_after(fn):
    """The BEFORE+AROUND+AFTER logic written by hand as one closure."""

    def w(*args, **kwargs):
        r = before(*args, **kwargs)
        if r is not None:
            args, kwargs = r
        result = around(fn, *args, **kwargs)
        r = after(result, *args, **kwargs)
        if r is not None:
            result = r
        return result

    return w


def closure_before_after(fn):
    """The BEFORE+AFTER logic written by hand as one closure."""

    def w(*args, **kwargs):
        r = before(*args, **kwargs)
        if r is not None:
            args, kwargs = r
        result = fn(*args, **kwargs)
        r = after(result, *args, **kwargs)
        if r is not None:
            result = r
        return result

    return w


def nested_closures(fn):
    """Three stacked wrappers, one per hook (the usual monkey-patching shape)."""

    def b(f):
        def w(*a, **k):
            r = before(*a, **k)
            if r is not None:
                a, k = r
            return f(*a, **k)

        return w

    def ar(f):
        def w(*a, **k):
            return around(f, *a, **k)

        return w

    def af(f):
        def w(*a, **k):
            res = f(*a, **k)
            r = after(res, *a, **k)
            return res if r is None else r

        return w

    return af(ar(b(fn)))


def hooked(types_: list[HookType]):
    # A fresh module and a fresh target per case: alias rebinding would
    # otherwise (correctly) rebind this file's own `target` to the chain.
    mod = types.ModuleType("bench_target")
    exec("def target(x):\n    return x\n", mod.__dict__)
    sys.modules["bench_target"] = mod
    HookRegistry.reset()
    fns = {HookType.BEFORE: before, HookType.AFTER: after, HookType.AROUND: around}
    for t in types_:
        HookRegistry.register("bench_target.target", fns[t], t)
    HookRegistry.apply_hooks()
    return mod.target


def measure(cases: dict[str, object]) -> dict[str, float]:
    """Best ns/call of each case; rounds interleave the cases so noise hits all alike."""
    best = {name: float("inf") for name in cases}
    for _ in range(REPEAT):
        for name, fn in cases.items():
            t = timeit.timeit(lambda fn=fn: fn(1), number=N)
            best[name] = min(best[name], t / N * 1e9)
    return best


def main() -> None:
    cases = {
        "plain call": target,
        "hand-written closure (pass-through)": closure_passthrough(target),
        "hand-written closure (BEFORE+AFTER)": closure_before_after(target),
        "hand-written closure (BEFORE+AROUND+AFTER)": closure_before_around_after(target),
        "three nested closures (BEFORE+AROUND+AFTER)": nested_closures(target),
        "wrapt.FunctionWrapper (AROUND)": wrapt.FunctionWrapper(target, lambda w, i, a, k: around(w, *a, **k)),
        "sglang AROUND": hooked([HookType.AROUND]),
        "sglang BEFORE+AFTER": hooked([HookType.BEFORE, HookType.AFTER]),
        "sglang BEFORE+AROUND+AFTER": hooked([HookType.BEFORE, HookType.AROUND, HookType.AFTER]),
    }
    HookRegistry.reset()
    rows = measure(cases)
    width = max(map(len, rows))
    print(f"{'case':<{width}}  ns/call")
    for name, ns in rows.items():
        print(f"{name:<{width}}  {ns:7.1f}")
    bar = rows["sglang BEFORE+AROUND+AFTER"]
    same = rows["hand-written closure (BEFORE+AROUND+AFTER)"]
    print()
    print(f"sglang BEFORE+AROUND+AFTER / hand-written closure with the same hooks: {bar / same:.2f}x (target <= 1.5x)")
    print(f"sglang BEFORE+AFTER / hand-written closure with the same hooks:        {rows['sglang BEFORE+AFTER'] / rows['hand-written closure (BEFORE+AFTER)']:.2f}x")
    print(f"sglang BEFORE+AROUND+AFTER / three nested closures:                    {bar / rows['three nested closures (BEFORE+AROUND+AFTER)']:.2f}x")
    print(f"sglang AROUND / wrapt.FunctionWrapper AROUND:                          {rows['sglang AROUND'] / rows['wrapt.FunctionWrapper (AROUND)']:.2f}x")
    print(f"sglang AROUND / hand-written pass-through closure:                     {rows['sglang AROUND'] / rows['hand-written closure (pass-through)']:.2f}x")


if __name__ == "__main__":
    main()
