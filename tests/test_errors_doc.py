"""docs/errors.md lists every error code the core and the first-party frontends can answer with."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCES = [ROOT / "minisgl_core", ROOT / "plugins" / "frontend_openai" / "minisgl_frontend_openai",
           ROOT / "plugins" / "frontend_grpc" / "minisgl_frontend_grpc"]
# code="..." in any raise, and ToolRequestError(message, param, code)
CODE = re.compile(r'\bcode="([a-z_]+)"|ToolRequestError\([^()]*?"[^"]*",\s*"([a-z_]+)"\)', re.S)


def codes_in_source() -> set[str]:
    found: set[str] = set()
    for root in SOURCES:
        for path in root.rglob("*.py"):
            for keyword, positional in CODE.findall(path.read_text()):
                found.add(keyword or positional)
    return found


def test_every_code_is_in_the_table() -> None:
    codes = codes_in_source()
    assert {"context_length_exceeded", "unknown_function", "kv_cache_exceeded"} <= codes
    listed = set(re.findall(r"`([a-z_]+)`", (ROOT / "docs" / "errors.md").read_text()))
    assert sorted(codes - listed) == []
