"""The resolved configuration with the provenance of every value."""

from __future__ import annotations

from typing import Any

from sglang.srt.arg_groups.meta import REDACTED, field_arg, field_ns, public_fields, shown_value


def resolved_with_provenance(sa: Any) -> dict[str, dict[str, Any]]:
    """``{field: {"value", "source", "ns"}}``; post-publish overrides win when ``sa`` is published.

    Secret fields (``--api-key``) show ``***``: the result may be logged or served.
    """
    from sglang.srt.runtime_context import get_context

    prov = sa.provenance()
    fields_by_name = {f.name: f for f in public_fields(type(sa))}
    out = {
        f.name: {"value": shown_value(f, getattr(sa, f.name)), "source": prov.get(f.name, "default"), "ns": field_ns(f).path}
        for f in fields_by_name.values()
    }
    ctx = get_context()
    if ctx.is_published(sa):
        for source, fields in ctx.overrides_log():
            for k, v in fields.items():
                secret = k in fields_by_name and field_arg(fields_by_name[k]).secret
                out[k]["value"], out[k]["source"] = (REDACTED if secret else v), f"post-publish override ({source})"
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
