"""Pass configs from a benchmark's command line: ``--pass-configs KEY=VALUE ...`` and
``--variant NAME:KEY=VALUE,...`` (shared by the benchmark scripts)."""

from __future__ import annotations


def config_value(text: str):
    """A pass-config value from the command line: int, float, true/false or the text."""
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return {"true": True, "false": False}.get(text.lower(), text)


def parse_pass_configs(pairs) -> dict:
    """``["KEY=VALUE", ...]`` -> {key: value}; a pair without ``=`` is a ValueError."""
    out = {}
    for kv in pairs:
        key, eq, value = kv.partition("=")
        if not eq:
            raise ValueError(f"pass config {kv!r}: expected KEY=VALUE")
        out[key] = config_value(value)
    return out


def parse_variants(specs) -> list:
    """``NAME:KEY=VALUE,...`` -> [(name, {key: value})]."""
    out = []
    for spec in specs:
        name, _, pairs = spec.partition(":")
        out.append((name, parse_pass_configs(kv for kv in pairs.split(",") if kv)))
    return out
