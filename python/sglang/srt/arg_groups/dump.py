"""The resolved configuration with the provenance of every value."""

from __future__ import annotations

from typing import Any

from sglang.srt.arg_groups.meta import field_ns, public_fields


def resolved_with_provenance(sa: Any) -> dict[str, dict[str, Any]]:
    """``{field: {"value", "source", "ns"}}``; post-publish overrides win when ``sa`` is published."""
    from sglang.srt.runtime_context import get_context

    prov = sa.provenance()
    out = {
        f.name: {"value": getattr(sa, f.name), "source": prov.get(f.name, "default"), "ns": field_ns(f).path}
        for f in public_fields(type(sa))
    }
    ctx = get_context()
    if ctx.is_published(sa):
        for source, fields in ctx.overrides_log():
            for k, v in fields.items():
                out[k]["value"], out[k]["source"] = v, f"post-publish override ({source})"
    return out


def format_dump(sa: Any) -> str:
    rows = resolved_with_provenance(sa)
    width = max(len(k) for k in rows)
    lines = []
    for ns in sorted({r["ns"] for r in rows.values()}):
        lines.append(f"[{ns}]")
        for k, r in rows.items():
            if r["ns"] == ns:
                lines.append(f"  {k:<{width}} = {r['value']!r:<28} # {r['source']}")
    return "\n".join(lines)
