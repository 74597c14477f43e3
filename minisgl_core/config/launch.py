"""Launch configuration: a frozen dataclass and its keys (how layers of settings merge into it is
``config.merge``; where they come from, TOML < env < flags < -s key=value, ``config.sources``).

The file form (TOML, ``minisgl config show``) and the ``-s`` keys are the same: top-level keys are
the core settings; ``frontend`` lists the frontends to run; ``[transports.<name>]``,
``[frontends.<name>]`` and ``[plugins.<name>]`` are free-form tables handed to their owners (a
frontend's host, port and API key are its own options: ``port``, ``host`` and ``api_key`` are
top-level shorthands that write them, see ``config.shorthands``); ``[roles]`` picks the
tokenizer, detokenizer and scheduler (see ``config.roles``).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any

from minisgl_core import deprecated
from minisgl_core.config import parallel, shorthands
from minisgl_core.config import roles as config_roles
from minisgl_core.did_you_mean import suggest
from minisgl_core.kernels.schemes import KV_CACHE_DTYPES, QUANTIZATION_OPTIONS

DTYPES = ("float32", "float16", "bfloat16", "auto")
CACHES = ("radix", "naive")
LOAD_FORMATS = ("auto", "dummy")  # vLLM's names: the model's safetensors, or random weights
SPECULATIVE = ("ngram",)
DP_POLICIES = ("cache_aware", "round_robin")
LOG_LEVELS = ("debug", "info", "warning", "error", "critical")
# file/-s key of each free-form table -> the LaunchConfig field holding it
TABLES = {"transports": "transports", "frontends": "frontends_options", "plugins": "plugins"}


class ConfigError(ValueError):
    """A bad setting; the message says which key, which value and where it came from."""


Tables = dict[str, dict[str, Any]]


@dataclass(frozen=True)
class LaunchConfig:
    """Everything ``minisgl launch`` needs; plain data, picklable, sent to every process.

    ``None`` in an engine setting means "let the engine choose" (e.g. ``num_pages`` from memory).
    """

    # None: the one an installed plugin offers as the default (``register(..., default=True)``:
    # zmq and openai from the first-party plugins), chosen when the service starts
    transport: str | None = None
    frontends: tuple[str, ...] | None = None
    model: str | None = None  # None = the default model; a directory, a .gguf file, ORG/NAME
    revision: str | None = None  # of a Hub model: a branch, tag or commit (None: main)
    gguf_file: str | None = None  # a GGUF file of the Hub repo (or directory) in ``model``
    served_model_name: tuple[str, ...] = ()  # names clients may use (the first is reported)
    dtype: str = "auto"  # bf16 where it measures faster here, else fp32 (dtype_choice.py)
    device: str = "cpu"
    num_pages: int | None = None
    page_size: int | None = None
    max_seq_len_override: int | None = None
    max_running_requests: int | None = None
    max_prefill_tokens: int | None = None
    max_waiting_requests: int = 1024
    num_threads: int | None = None  # torch threads of the scheduler; None = every core
    tp: int = 1  # tensor-parallel ranks (docs/tensor-parallel.md)
    tp_local_ranks: str | None = None  # ranks this launch starts, e.g. "0" or "0,1"; None = all
    dist_addr: str = "127.0.0.1"  # where rank 0 hosts the tensor-parallel group
    dist_port: int = 0  # its port; 0 = a free one (only when every rank is local)
    dp: int = 1  # data-parallel scheduler replicas, each its own process (docs/scale-out.md)
    dp_policy: str = "cache_aware"  # how the tokenizer picks a replica: cache_aware, round_robin
    dp_affinity_threshold: int = 4  # requests by which the prefix's replica may be busier
    dp_cpus: str = ""  # each replica's cores, "0-3;4-7"; "" splits this host's, "none": unpinned
    cache: str = "radix"
    # auto: a GGUF in its own weight format (engine/quantization_choice.py), else unquantized;
    # none, int8, int8-wo or int4 (docs/models.md, docs/design/kernels.md 4. and 6.)
    quantization: str = "auto"
    speculative: str | None = None  # "ngram": prompt-lookup speculation (docs/speculative.md)
    num_speculative_tokens: int = 4  # draft tokens per step (k)
    prompt_lookup_min: int = 2  # shortest suffix n-gram looked up (docs/speculative.md)
    prompt_lookup_max: int = 4  # longest suffix n-gram looked up
    # decode steps as torch.compile'd graphs (docs/design/kernels.md, 12.); None (auto): where
    # the configuration has them (engine/compile_choice.py)
    compile: bool | None = None
    # batch-invariant kernels: tokens independent of the batch (docs/speculative.md)
    deterministic: bool = False
    prefix_cache_dir: str | None = None  # the prefix cache's disk tier (docs/prefix-cache.md)
    prefix_cache_disk_gb: float = 10.0  # its budget: least recently used pages go beyond it
    load_format: str = "auto"  # dummy: random weights from config.json (docs/models.md)
    kv_cache_dtype: str = "auto"  # int8: int8 KV pages, a scale per token and head
    reasoning_parser: str | None = None  # qwen3, deepseek_r1: <think> -> reasoning_content
    # hermes, llama3_json, mistral, qwen3_coder: how tool calls are written (None: the template's)
    tool_call_parser: str | None = None
    log_level: str = "info"
    ready_timeout_s: float = 300.0
    transports: Tables = field(default_factory=dict)
    frontends_options: Tables = field(default_factory=dict)
    plugins: Tables = field(default_factory=dict)
    roles: Tables = field(default_factory=dict)  # config_roles.RoleTables; every kind named

    def __post_init__(self) -> None:
        for name in SCALARS:  # direct construction gets the same checks as the file form
            object.__setattr__(self, name, coerce(name, getattr(self, name), "LaunchConfig()"))
        try:
            roles = config_roles.with_defaults(config_roles.normalize(self.roles, "roles"))
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        object.__setattr__(self, "roles", roles)
        problem = self._problem()
        if problem:
            raise ConfigError(problem)
        for name in TABLES.values():  # own private copies: callers cannot mutate us by aliasing
            object.__setattr__(self, name, copy.deepcopy(dict(getattr(self, name))))

    def _problem(self) -> str | None:
        if self.transport is not None and not self.transport.strip():
            return "transport must be a non-empty name"
        if self.frontends is not None and (not self.frontends or not all(self.frontends)):
            return "frontend must name at least one frontend"
        if self.frontends is not None and len(set(self.frontends)) != len(self.frontends):
            return f"frontend lists a frontend twice: {', '.join(self.frontends)}"
        if not 0 <= self.dist_port <= 65535:
            return f"dist_port must be in 0..65535, got {self.dist_port}"
        for name in ("num_pages", "page_size", "max_seq_len_override", "max_running_requests",
                     "max_prefill_tokens", "max_waiting_requests", "num_threads", "tp", "dp"):
            value = getattr(self, name)
            if value is not None and value < 1:
                return f"{name} must be at least 1, got {value}"
        if self.num_speculative_tokens < 1:
            return f"num_speculative_tokens must be at least 1, got {self.num_speculative_tokens}"
        if not 1 <= self.prompt_lookup_min <= self.prompt_lookup_max:
            return (f"need 1 <= prompt_lookup_min <= prompt_lookup_max, got "
                    f"{self.prompt_lookup_min} and {self.prompt_lookup_max}")
        for name, allowed in (("dtype", DTYPES), ("cache", CACHES), ("log_level", LOG_LEVELS),
                              ("quantization", QUANTIZATION_OPTIONS),
                              ("speculative", SPECULATIVE),
                              ("dp_policy", DP_POLICIES), ("load_format", LOAD_FORMATS),
                              ("kv_cache_dtype", KV_CACHE_DTYPES)):
            if name == "speculative" and getattr(self, name) is None:
                continue
            if getattr(self, name) not in allowed:
                return (f'{name} must be one of {", ".join(allowed)}, got "{getattr(self, name)}";'
                        f"{suggest(getattr(self, name), list(allowed))}")
        if self.reasoning_parser is not None:
            from minisgl_core.text.reasoning import parser_names

            if self.reasoning_parser not in parser_names():
                return (f'reasoning_parser must be one of {", ".join(parser_names())}, got '
                        f'"{self.reasoning_parser}";'
                        f"{suggest(self.reasoning_parser, parser_names())}")
        if self.tool_call_parser is not None:
            from minisgl_core.text.tool_parsers import parser_names as tool_parser_names

            if self.tool_call_parser not in tool_parser_names():
                return (f'tool_call_parser must be one of {", ".join(tool_parser_names())}, got '
                        f'"{self.tool_call_parser}";'
                        f"{suggest(self.tool_call_parser, tool_parser_names())}")
        problem = parallel.tp_problem(self) or parallel.dp_problem(self)
        if problem:
            return problem
        if not self.prefix_cache_disk_gb > 0:
            return f"prefix_cache_disk_gb must be > 0, got {self.prefix_cache_disk_gb}"
        if not self.ready_timeout_s > 0:
            return f"ready_timeout_s must be > 0, got {self.ready_timeout_s}"
        for key, name in TABLES.items():
            table = getattr(self, name)
            if not isinstance(table, Mapping) or not all(
                isinstance(k, str) and isinstance(v, Mapping) for k, v in table.items()
            ):
                return f"{key} must be a table of tables ([{key}.<name>])"
        return None

    def dp_cpu_sets(self) -> list[set[int]]:
        """The cores ``dp_cpus`` names for each replica (``"0-1;2,3"`` -> [{0, 1}, {2, 3}])."""
        return parallel.cpu_sets(self.dp_cpus)

    def local_ranks(self) -> tuple[int, ...]:
        """The tensor-parallel ranks this launch starts, sorted (all of 0..tp-1 by default)."""
        return parallel.local_ranks(self.tp_local_ranks, self.tp)

    def transport_table(self, name: str) -> dict[str, Any]:
        """The ``[transports.<name>]`` table (empty when absent)."""
        return dict(self.transports.get(name, {}))

    def frontend_table(self, name: str) -> dict[str, Any]:
        """The ``[frontends.<name>]`` table (empty when absent); while no frontend is named, one
        without a table of its own gets what ``--host`` / ``--api-key`` wrote for every one."""
        table = self.frontends_options.get(name)
        if table is None and self.frontends is None:
            table = self.frontends_options.get(shorthands.EVERY_FRONTEND)
        return dict(table or {})

    def with_plugin_defaults(self, transport: str, frontends: tuple[str, ...]) -> LaunchConfig:
        """This config with an unset transport / frontend list set to the given defaults (the
        ones the installed plugins offer), and ``--host`` / ``--api-key`` written into each."""
        options = {k: v for k, v in self.frontends_options.items()
                   if k != shorthands.EVERY_FRONTEND}
        if self.frontends is None:
            for name in frontends:
                options.setdefault(name, self.frontend_table(name))
        return replace(self, transport=self.transport or transport,
                       frontends=self.frontends or frontends,
                       frontends_options={k: v for k, v in options.items() if v})

    def __getattr__(self, name: str) -> Any:
        # host, port and api_key were core keys: they are the openai frontend's options now
        if name not in shorthands.DEPRECATED_DEFAULTS:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        return shorthands.deprecated_key(self.frontend_table("openai"), name)

    def role_name(self, kind: str) -> str:
        """The selected implementation of role ``kind`` (tokenizer, detokenizer, scheduler)."""
        return str(self.roles[kind]["name"])

    def role_table(self, kind: str, name: str | None = None) -> dict[str, Any]:
        """The ``[roles.<kind>.<name>]`` table of the selected (or named) implementation."""
        return copy.deepcopy(dict(self.roles[kind].get(name or self.role_name(kind), {})))

    def plugin_table(self, name: str) -> dict[str, Any]:
        """The ``[plugins.<name>]`` table (empty when absent)."""
        return dict(self.plugins.get(name, {}))

    def to_dict(self) -> dict[str, Any]:
        """The file form: JSON-able, and ``merge.from_file_form(to_dict())`` gives back an equal
        config."""
        out: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name == "frontends":
                out["frontend"] = None if value is None else list(value)
            elif f.name == "roles":
                out["roles"] = config_roles.to_file_form(value)
            elif f.name in TABLES.values():
                key = next(k for k, v in TABLES.items() if v == f.name)
                out[key] = copy.deepcopy(value)
            else:
                out[f.name] = value
        return out


SCALARS: dict[str, type] = {}  # field -> base type, filled below from the annotations
OPTIONAL: set[str] = set()


def _scan_fields() -> None:
    for f in fields(LaunchConfig):
        if f.name in TABLES.values() or f.name == "roles":
            continue
        text = str(f.type)
        if "| None" in text:
            OPTIONAL.add(f.name)
        base = text.replace(" | None", "")
        SCALARS[f.name] = {"str": str, "int": int, "float": float, "bool": bool}.get(base, tuple)


_scan_fields()
# every key a user can write at the top level of the file, in a -s key, or as MINISGL_<KEY>
KNOWN_KEYS = sorted([k for k in SCALARS if k != "frontends"]
                    + ["frontend", "roles", *TABLES, *shorthands.SHORTHANDS])


def coerce(name: str, value: Any, source: str, text: bool = True) -> Any:
    """Check/convert ``value`` for field ``name``: strings are parsed when ``text`` (env, flags,
    -s) and must already have the field's type otherwise (TOML)."""
    kind = SCALARS[name]
    shown = "frontend" if name == "frontends" else name
    if kind is bool:
        if name in OPTIONAL and (value is None or (
                isinstance(value, str) and value.strip().lower() == "auto")):
            return None  # auto: the engine decides
        return _boolean(shown, value, source, text)
    if isinstance(value, str) and kind is str:
        return None if name in OPTIONAL and not value else value  # "-s api_key=" unsets it
    if isinstance(value, str) and (text or kind is tuple):
        stripped = value.strip()
        if name in OPTIONAL and stripped.lower() in ("", "none", "null"):
            return None
        if kind is tuple:
            return tuple(part.strip() for part in stripped.split(",") if part.strip())
        try:
            return kind(stripped)
        except ValueError:
            raise ConfigError(
                f'{shown} must be {"an integer" if kind is int else "a number"}, '
                f'got "{value}" ({source})'
            ) from None
    if value is None and name in OPTIONAL:
        return None
    if kind is tuple and isinstance(value, list | tuple) and all(isinstance(v, str) for v in value):
        return tuple(value)
    if kind is float and isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    if kind in (int, str) and isinstance(value, kind) and not isinstance(value, bool):
        return value
    want = {str: "a string", int: "an integer", float: "a number", tuple: "a list of names"}[kind]
    raise ConfigError(f"{shown} must be {want}, got {value!r} ({source})")


_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off")


def _boolean(name: str, value: Any, source: str, text: bool) -> bool:
    if isinstance(value, bool):
        return value
    if text and isinstance(value, str) and value.strip().lower() in (*_TRUE, *_FALSE):
        return value.strip().lower() in _TRUE
    also = ", or auto" if name in OPTIONAL else ""
    raise ConfigError(f"{name} must be true or false{also}, got {value!r} ({source})")


def unknown_key(key: str, source: str) -> ConfigError:
    """The error for a key no layer may set, with the closest known key."""
    return ConfigError(f'unknown config key "{key}" ({source});{suggest(key, KNOWN_KEYS)} '
                       f"known keys: {', '.join(KNOWN_KEYS)}")


__all__ = ["ConfigError", "LaunchConfig"]

__getattr__ = deprecated.forwarder(__name__)  # load_config and read_toml moved to config.sources
