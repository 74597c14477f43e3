"""minisgl_core.api: every name docs/plugins.md calls public imports from it, nothing else is
exported, and importing it stays light."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import minisgl_core
from minisgl_core import api

PLUGINS_DOC = Path(__file__).resolve().parents[1] / "docs" / "plugins.md"
HEAVY = ("torch", "transformers", "tokenizers", "jinja2", "xgrammar", "pytest", "zmq", "pynng",
         "fastapi", "grpc")


def documented_names() -> list[str]:
    """The names in the first column of the table under "What is public"."""
    text = PLUGINS_DOC.read_text()
    section = text.split("## What is public", 1)[1].split("\n## ", 1)[0]
    names = []
    for line in section.splitlines():
        if line.startswith("| `"):
            names += re.findall(r"`([A-Za-z_][A-Za-z0-9_]*)`", line.split(" | ")[0])
    return names


def test_the_docs_and_the_module_list_the_same_names() -> None:
    names = documented_names()
    assert len(names) == len(set(names)), "a name is listed twice"
    assert sorted(names) == sorted(api.__all__)


def test_every_documented_name_imports() -> None:
    namespace: dict[str, object] = {}
    for name in documented_names():
        exec(f"from minisgl_core.api import {name}", namespace)  # the statement a plugin writes
        assert namespace[name] is not None, name


def test_the_names_the_root_package_also_exports_are_the_same_objects() -> None:
    for name in ("hookimpl", "SamplingParams", "LLM", "__version__"):
        assert getattr(minisgl_core, name) is getattr(api, name)


def test_importing_the_api_loads_nothing_heavy() -> None:
    code = ("import sys, minisgl_core.api; "
            f"print([m for m in {HEAVY!r} if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=120)
    assert out.stdout.strip() == "[]"
