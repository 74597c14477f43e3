"""Registry: name -> factory or lazy "module:attr" target, with its owner and did-you-mean."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from minisgl_core.did_you_mean import suggest as suggest  # re-exported: transports use it
from minisgl_core.import_path import load_target as load_target  # re-exported

if TYPE_CHECKING:
    from minisgl_core.config.launch import LaunchConfig

T = TypeVar("T")


class RegistryError(LookupError):
    """Base of every registry failure; the CLI turns it into exit code 2."""


class UnknownName(RegistryError):
    """A name nobody registered; the message suggests the closest and lists the installed names."""


class DuplicateName(RegistryError):
    """Two plugins registered the same name; the message names both."""


class TargetLoadError(RegistryError):
    """A lazy ``"module:attr"`` target could not be imported; the message names the plugin."""


class InvalidTarget(RegistryError):
    """A plugin tried to register something that is neither callable nor ``"module:attr"``."""


def unknown_message(kind: str, name: str, names: list[str]) -> str:
    """The one message for an unknown name: suggestion plus the installed names."""
    installed = ", ".join(sorted(names)) if names else "(none)"
    return f'unknown {kind} "{name}";{suggest(name, names)} installed: {installed}'


def check_target(target: object) -> None:
    """Raise InvalidTarget unless ``target`` is callable or a well-formed ``"module:attr"``."""
    if isinstance(target, str):
        module_name, sep, attr = target.partition(":")
        if not (sep and module_name and attr and " " not in target):
            raise InvalidTarget(f'target {target!r} is not of the form "package.module:attr"')
    elif not callable(target):
        raise InvalidTarget(f"target {target!r} is neither callable nor a 'module:attr' string")


@dataclass(frozen=True)
class Entry:
    """One registration: what ``name`` maps to and which plugin said so."""

    name: str
    target: Any
    owner: str
    default: bool = False  # offered as the one used when the user names none

    @property
    def lazy(self) -> bool:
        return isinstance(self.target, str)


class Registry(Generic[T]):
    """Names of one kind (transports, frontends, a role kind, models) mapped to factories.

    Filled while registries are collected (see ``plugins.collect``), read afterwards. A second
    registration of a name is kept as a conflict rather than raised at once, so that
    ``minisgl plugins`` can still list everything; selecting that name raises DuplicateName.
    """

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._entries: dict[str, list[Entry]] = {}  # name -> registrations, in order
        self._loaded: dict[str, T] = {}

    def add(self, name: str, target: T | str, owner: str, *, default: bool = False) -> None:
        """Register ``name``; InvalidTarget if ``name`` or ``target`` is malformed."""
        if not isinstance(name, str) or not name or name != name.strip():
            raise InvalidTarget(f"{self.kind} name must be a non-empty string, got {name!r}")
        check_target(target)
        self._entries.setdefault(name, []).append(Entry(name, target, owner, bool(default)))
        self._loaded.pop(name, None)

    def drop_owner(self, owner: str) -> None:
        """Forget every name ``owner`` registered (its plugin turned out to be broken)."""
        for name in list(self._entries):
            kept = [e for e in self._entries[name] if e.owner != owner]
            if len(kept) != len(self._entries[name]):
                self._loaded.pop(name, None)
            if kept:
                self._entries[name] = kept
            else:
                del self._entries[name]

    def names(self) -> list[str]:
        return sorted(self._entries)

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[Entry]:
        """Every registration, conflicting ones included, sorted by name."""
        return iter([e for name in sorted(self._entries) for e in self._entries[name]])

    def __len__(self) -> int:
        return len(self._entries)

    def conflicts(self) -> list[tuple[DuplicateName, list[str]]]:
        """Each name more than one plugin registered: the error and the owners involved."""
        return [
            (self._duplicate(name), [e.owner for e in entries])
            for name, entries in sorted(self._entries.items())
            if len(entries) > 1
        ]

    def _duplicate(self, name: str) -> DuplicateName:
        owners = " and ".join(e.owner for e in self._entries[name])
        return DuplicateName(
            f'{self.kind} "{name}" registered by {owners}; uninstall one of them or leave it out '
            "of MINISGL_LOAD_PLUGINS"
        )

    def entry(self, name: str) -> Entry:
        """Return the registration of ``name`` without importing anything."""
        entries = self._entries.get(name)
        if not entries:
            raise UnknownName(unknown_message(self.kind, name, self.names()))
        if len(entries) > 1:
            raise self._duplicate(name)
        return entries[0]

    def check(self, name: str) -> None:
        """Raise UnknownName / DuplicateName if ``name`` cannot be selected; imports nothing."""
        self.entry(name)

    def default(self) -> str:
        """The name a plugin offered with ``default=True``: the one used when the user names
        none. RegistryError when no plugin offers one, or when several do."""
        offered = [e for e in self if e.default]
        if len(offered) == 1:
            return offered[0].name
        if not offered:
            raise RegistryError(f"no {self.kind} was named and no installed plugin offers a "
                                f"default one; name one (installed: "
                                f"{', '.join(self.names()) or '(none)'})")
        both = ", ".join(f'"{e.name}" ({e.owner})' for e in offered)
        raise RegistryError(f"several plugins offer a default {self.kind}: {both}; name one")

    def owner(self, name: str) -> str:
        return self.entry(name).owner

    def get(self, name: str) -> T:
        """Return the factory for ``name``, importing a lazy target on first use."""
        entry = self.entry(name)
        if not entry.lazy:
            return entry.target
        if name not in self._loaded:
            try:
                self._loaded[name] = load_target(entry.target)
            except Exception as exc:
                raise TargetLoadError(
                    f'{self.kind} "{name}" (from {entry.owner}) failed to load {entry.target}: '
                    f"{type(exc).__name__}: {exc}"
                ) from exc
        return self._loaded[name]


class RoleRegistries:
    """One registry per role kind; ``roles.get("tokenizer", "hf")`` returns a role factory."""

    def __init__(self, kinds: tuple[str, ...]) -> None:
        self._by_kind: dict[str, Registry[Any]] = {kind: Registry(kind) for kind in kinds}

    def __getitem__(self, kind: str) -> Registry[Any]:
        """The registry of one role kind; UnknownName for a kind that does not exist."""
        if kind not in self._by_kind:
            raise UnknownName(unknown_message("role kind", kind, list(self._by_kind)))
        return self._by_kind[kind]

    def kinds(self) -> list[str]:
        return list(self._by_kind)

    def add(self, kind: str, name: str, target: Any, owner: str) -> None:
        self[kind].add(name, target, owner)

    def get(self, kind: str, name: str) -> Any:
        return self[kind].get(name)

    def check(self, kind: str, name: str) -> None:
        self[kind].check(name)

    def names(self, kind: str) -> list[str]:
        return self[kind].names()


@dataclass
class Registries:
    """Every registry a process needs, filled by ``plugins.collect``."""

    transports: Registry[Any]
    frontends: Registry[Any]
    roles: RoleRegistries
    models: Registry[Any]

    @classmethod
    def empty(cls, role_kinds: tuple[str, ...]) -> Registries:
        return cls(
            transports=Registry("transport"),
            frontends=Registry("frontend"),
            roles=RoleRegistries(role_kinds),
            models=Registry("model"),
        )

    def all(self) -> list[tuple[str, Registry[Any]]]:
        """(provides-prefix, registry) pairs, e.g. ("role:tokenizer", the tokenizer registry)."""
        pairs = [("transport", self.transports), ("frontend", self.frontends)]
        pairs += [(f"role:{kind}", self.roles[kind]) for kind in self.roles.kinds()]
        return [*pairs, ("model", self.models)]

    def drop_owner(self, owner: str) -> None:
        for _, reg in self.all():
            reg.drop_owner(owner)

    def provides(self) -> dict[str, list[str]]:
        """owner -> ["transport:zmq", "role:tokenizer:hf", "model:LlamaForCausalLM", ...]."""
        out: dict[str, list[str]] = {}
        for prefix, reg in self.all():
            for entry in reg:
                out.setdefault(entry.owner, []).append(f"{prefix}:{entry.name}")
        return out

    def conflicts(self) -> list[tuple[DuplicateName, list[str]]]:
        """Each name registered more than once: the error and the owners involved."""
        return [pair for _, reg in self.all() for pair in reg.conflicts()]

    def with_defaults(self, config: LaunchConfig) -> LaunchConfig:
        """``config`` with an unset transport and frontend list set to the ones the installed
        plugins offer as defaults; RegistryError when one is needed and none (or two) is."""
        transport = config.transport or self.transports.default()
        frontends = config.frontends or (self.frontends.default(),)
        return config.with_plugin_defaults(transport, frontends)
