"""Every hook a minisgl plugin can implement; nothing else in minisgl declares hooks.

A plugin is a module (or object) with functions decorated by ``hookimpl`` (defined here, imported
as ``minisgl_core.hookimpl`` or ``minisgl_core.api.hookimpl``) whose names
match the specs below. Plugins are found through the ``minisgl`` entry-point group, loaded in every
process of a service (so their import must be light, idempotent and free of side effects), and
never called on a per-token path: hooks run while a process assembles itself.

Registration hooks receive a ``register`` callback. Pass it a *factory* or, better, a lazy
``"module:attr"`` string: the target is imported only when that name is selected, which keeps
``minisgl --help`` fast and keeps a plugin with a missing native library from breaking the others.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import pluggy

from minisgl_core.interfaces import ROLE_KINDS as ROLE_KINDS  # re-exported: the hooks speak of it
from minisgl_core.interfaces import RoleKind

if TYPE_CHECKING:
    import typer

    from minisgl_core.config.launch import LaunchConfig

hookspec = pluggy.HookspecMarker("minisgl")
hookimpl = pluggy.HookimplMarker("minisgl")

T = TypeVar("T")

Target = Any
"""A factory (any callable) or a lazy ``"module:attr"`` string naming one."""

class Register(Protocol):
    """``register(name, factory_or_"module:attr", default=False)``; a name may be registered by
    one plugin only. ``default=True`` offers it as the one used when the user names none (the
    first-party zmq transport and openai frontend do); two defaults of one kind are an error."""

    def __call__(self, name: str, target: Target, *, default: bool = False) -> None: ...


RoleRegister = Callable[[RoleKind, str, Target], None]
"""``register(kind, name, factory_or_"module:attr")`` with ``kind`` one of ``ROLE_KINDS``."""

ProcessName = str
"""Which process a hook runs in: "launcher" (it also runs the frontends), "tokenizer",
"detokenizer", "scheduler" (scheduler ranks > 0 of a tensor-parallel group also say "scheduler")."""


@hookspec
def minisgl_register_transports(register: Register) -> None:
    """Add transports by name, e.g. ``register("zmq", "minisgl_transport_zmq.transport:Zmq")``.

    Called in every process when its registries are collected. The factory is called with the
    ``[transports.<name>]`` config table (a mapping, possibly empty) and returns an object
    satisfying ``minisgl_core.interfaces.Transport``. The return value of the hook is ignored.
    """


@hookspec
def minisgl_register_frontends(register: Register) -> None:
    """Add frontends by name, e.g. ``register("openai", "pkg.server:OpenAIFrontend")``.

    Called in the launcher/frontend process. The launcher calls
    ``factory(client, config, options)`` with the ``EngineClient``, the ``LaunchConfig`` and the
    ``[frontends.<name>]`` table, and gets a ``minisgl_core.interfaces.Frontend``. The table is
    the frontend's own options (its host, port, API key ...: ``--host``, ``--api-key`` write
    them for every selected frontend); a factory with ``check_options(table)`` has it called by
    ``minisgl launch`` before any worker starts, to raise ValueError for a bad one. The return
    value of the hook is ignored.
    """


@hookspec
def minisgl_register_roles(register: RoleRegister) -> None:
    """Add role implementations: ``register("tokenizer", "hf", "pkg.tok:HFTokenizer")``.

    ``kind`` is "tokenizer", "detokenizer" or "scheduler"; the launch selects one name per kind
    (``--tokenizer``/``--detokenizer``/``--scheduler``, ``[roles]``, default hf, hf,
    continuous) and checks it before anything starts. Called in every process; the process that
    runs a role calls ``factory(context)`` with a ``minisgl_core.service.spec.RoleContext``
    (its WorkerSpec, its ``[roles.<kind>.<name>]`` options table, the model registry) and gets
    an object satisfying ``interfaces.Tokenizer``, ``Detokenizer`` or ``Scheduler``. The
    return value of the hook is ignored.
    """


@hookspec
def minisgl_register_models(register: Register) -> None:
    """Map a Hugging Face ``architectures[0]`` name to a model class.

    E.g. ``register("LlamaForCausalLM", "minisgl_core.engine.models.llama:LlamaForCausalLM")``.
    This is the only table of architectures (the core's own are registered the same way):
    ``model_lookup.model_class`` picks the class for the scheduler processes, ``minisgl
    tp-worker`` and offline ``LLM``, and the engine is handed it. The return value is ignored.
    """


@hookspec
def minisgl_register_commands(app: typer.Typer) -> None:
    """Add CLI commands or sub-apps with ``app.command()`` / ``app.add_typer()``.

    Called once in the ``minisgl`` command before it parses its arguments, so it must be fast and
    must not import heavy libraries at top level. The return value is ignored.
    """


@hookspec(firstresult=True)
def minisgl_resolve_model(spec: str | None, revision: str | None, gguf_file: str | None,
                          architectures: tuple[str, ...] | None) -> str | None:
    """Turn ``--model`` (None = the default model) into a local Hugging Face-format directory.

    Called through ``model_lookup.resolve_model`` by the launcher, ``minisgl tp-worker``, the
    benchmarks and offline ``LLM``. Return the directory's path, or None to let the next plugin
    try; the first non-None answer wins. The core's own resolver runs last.

    An implementation takes only the arguments it uses (``spec`` alone is enough):
    ``revision`` (``--revision``: a branch, tag or commit) and ``gguf_file`` (``--gguf-file``)
    qualify ``spec``; ``architectures`` are those the model registry can build (None when the
    caller does not know them), for a resolver that can refuse a model before fetching it.
    """


@hookspec
def minisgl_configure(config: LaunchConfig, process: ProcessName) -> None:
    """Called once in every process after plugins load, before its components are built.

    Use it to read ``config.plugin_table(<your name>)``, set up logging or metrics. Return ignored.
    """


@hookspec
def minisgl_unconfigure(config: LaunchConfig, process: ProcessName) -> None:
    """Mirror of ``minisgl_configure``: called once in every process as it shuts down."""
