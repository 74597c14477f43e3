"""A tokenizer on the ``tokenizers`` library and jinja2 alone, for the text processes.

transformers' AutoTokenizer imports torch (~350 MB of RSS per process) although the tokenizer
and detokenizer need only the Rust tokenizer and the chat template. ``load_light`` reads the same
files and renders the template the way transformers does (same sandbox, options, filters and
variables), so ids, text and chat prompts are identical. Directories whose loading transformers
changes in ways not reproduced here (a model-specific tokenizer class, special tokens missing
from tokenizer.json, text clean-up) raise ``NeedsTransformers``, and the caller falls back.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

# tokenizer_class values that mean "tokenizer.json as it is" (no model-specific Python code)
PLAIN_CLASSES = frozenset({"PreTrainedTokenizerFast", "TokenizersBackend"})
# transformers' SPECIAL_TOKENS_ATTRIBUTES: what chat templates see as bos_token, eos_token...
SPECIAL_KEYS = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token",
                "mask_token")
_FLAGS = ("lstrip", "rstrip", "normalized", "single_word", "special")
MAX_PLAIN_VOCAB = 100_000  # above this transformers may patch a Mistral pre-tokenizer regex


class NeedsTransformers(Exception):
    """This tokenizer directory needs transformers' own loading to behave as it should."""


def _content(value: Any) -> str | None:
    if isinstance(value, dict):  # a serialized AddedToken
        value = value.get("content")
    return value if isinstance(value, str) else None


def _values(value: Any) -> list[Any]:
    if isinstance(value, dict):
        return list(value.values())
    return list(value) if isinstance(value, list) else []


def _read_json(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}


def _chat_template(path: Path, config: Mapping[str, Any]) -> str | None:
    """The default chat template: chat_template.jinja first, then tokenizer_config.json's."""
    jinja = path / "chat_template.jinja"
    if jinja.is_file():
        return jinja.read_text(encoding="utf-8")
    if (path / "chat_template.json").is_file():
        raise NeedsTransformers("chat_template.json")
    value = config.get("chat_template")
    if isinstance(value, list):
        named = {t.get("name"): t.get("template") for t in value if isinstance(t, dict)}
        value = named.get("default")
    return value if isinstance(value, str) else None


def _compile(template: str) -> Any:
    """The template in transformers' environment: immutable sandbox, trim/lstrip blocks,
    loopcontrols, its tojson, raise_exception, strftime_now, dict and namespace."""
    import jinja2
    import jinja2.ext
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class Generation(jinja2.ext.Extension):
        # {% generation %} marks assistant tokens for training masks; rendering ignores it
        tags = {"generation"}

        def parse(self, parser: Any) -> Any:
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
            return jinja2.nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(
                lineno)

        def _body(self, caller: Any) -> str:
            return str(caller())

    class Namespace(jinja2.utils.Namespace):
        # no underscore attributes: no way to reach interpreter internals
        def __init__(*args: Any, **kwargs: Any) -> None:
            self, rest = args[0], args[1:]
            attrs = dict(*rest, **kwargs)
            for name in attrs:
                Namespace.check(name)
            jinja2.utils.Namespace.__init__(self, attrs)

        def __setitem__(self, name: str, value: Any) -> None:
            Namespace.check(name)
            jinja2.utils.Namespace.__setitem__(self, name, value)

        @staticmethod
        def check(name: Any) -> None:
            if isinstance(name, str) and name.startswith("_"):
                raise jinja2.exceptions.SecurityError(
                    f"Chat templates cannot store underscore-prefixed attributes on a namespace, "
                    f"but got {name!r}.")

    class TemplateDict:
        def __call__(self, *args: Any, **kwargs: Any) -> dict[Any, Any]:
            return dict(*args, **kwargs)

        def fromkeys(self, *args: Any, **kwargs: Any) -> dict[Any, Any]:
            return dict.fromkeys(*args, **kwargs)

    def raise_exception(message: str) -> None:
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x: Any, ensure_ascii: bool = False, indent: int | None = None,
               separators: Any = None, sort_keys: bool = False) -> str:
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    def strftime_now(fmt: str) -> str:
        return datetime.now().strftime(fmt)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[Generation, jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals.update(raise_exception=raise_exception, strftime_now=strftime_now,
                       dict=TemplateDict(), namespace=Namespace)
    return env.from_string(template)


class LightTokenizer:
    """The part of a transformers fast tokenizer the text roles use, on ``tokenizers.Tokenizer``."""

    clean_up_tokenization_spaces = False  # only BPE or explicitly-off tokenizers load here

    def __init__(self, backend: Any, special: Mapping[str, str], chat_template: str | None,
                 name: str = "") -> None:
        self._backend = backend
        self.special_tokens_map = dict(special)
        self.chat_template = chat_template
        self.name_or_path = name
        self._compiled: Any = None
        self.eos_token: str | None = None
        self.eos_token_id: int | None = None
        for key in SPECIAL_KEYS:  # bos_token, bos_token_id, eos_token, eos_token_id, ...
            token = special.get(key)
            setattr(self, key, token)
            setattr(self, f"{key}_id", None if token is None else backend.token_to_id(token))

    @property
    def backend_tokenizer(self) -> Any:
        """The ``tokenizers.Tokenizer`` (as transformers names it)."""
        return self._backend

    def __len__(self) -> int:
        return int(self._backend.get_vocab_size(with_added_tokens=True))

    def convert_tokens_to_ids(self, tokens: str | Sequence[str]) -> Any:
        """A token's id (a list for a list); unknown tokens map to the unk token's id or None."""
        unk = self.special_tokens_map.get("unk_token")
        unk_id = self._backend.token_to_id(unk) if unk is not None else None

        def one(token: str) -> int | None:
            found = self._backend.token_to_id(token)
            return unk_id if found is None else int(found)

        return one(tokens) if isinstance(tokens, str) else [one(t) for t in tokens]

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        """Token ids of ``text`` (the post-processor adds BOS/EOS when asked, as transformers)."""
        return list(self._backend.encode(text, add_special_tokens=add_special_tokens).ids)

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = False) -> str:
        """Text of ``ids``."""
        return str(self._backend.decode(list(ids), skip_special_tokens=skip_special_tokens))

    def batch_decode(self, batch: Sequence[Sequence[int]],
                     skip_special_tokens: bool = False) -> list[str]:
        """``decode`` of each sequence."""
        return [self.decode(ids, skip_special_tokens) for ids in batch]

    def convert_ids_to_tokens(self, ids: int | Sequence[int]) -> Any:
        """The vocabulary entry of an id (a list for a list)."""
        if isinstance(ids, int):
            return self._backend.id_to_token(ids)
        return [self._backend.id_to_token(i) for i in ids]

    def get_vocab(self) -> dict[str, int]:
        """Token -> id, added tokens included."""
        return dict(self._backend.get_vocab(with_added_tokens=True))

    def apply_chat_template(self, conversation: Sequence[Mapping[str, Any]], *,
                            tokenize: bool = False, add_generation_prompt: bool = False,
                            **kwargs: Any) -> str | list[int]:
        """The conversation rendered by the model's template (the special tokens as variables)."""
        if self.chat_template is None:
            raise ValueError("this tokenizer has no chat template")
        if self._compiled is None:
            self._compiled = _compile(self.chat_template)
        # tools=, documents= and chat_template_kwargs (enable_thinking...) as transformers passes
        variables = {"tools": None, "documents": None, **self.special_tokens_map, **kwargs}
        text = self._compiled.render(messages=[dict(m) for m in conversation],
                                     add_generation_prompt=add_generation_prompt, **variables)
        return self.encode(text, add_special_tokens=False) if tokenize else str(text)


def load_light(model_dir: str | Path) -> LightTokenizer:
    """Load ``model_dir``'s tokenizer without transformers; NeedsTransformers when it cannot be
    loaded identically."""
    from tokenizers import Tokenizer

    path = Path(model_dir)
    file = path / "tokenizer.json"
    if not file.is_file():
        raise NeedsTransformers("no tokenizer.json")
    config = _read_json(path / "tokenizer_config.json")
    if config.get("tokenizer_class", "PreTrainedTokenizerFast") not in PLAIN_CLASSES:
        raise NeedsTransformers(f"tokenizer class {config.get('tokenizer_class')}")
    if config.get("split_special_tokens") or config.get("add_prefix_space") is not None:
        raise NeedsTransformers("split_special_tokens / add_prefix_space")
    backend = Tokenizer.from_file(str(file))
    if config.get("clean_up_tokenization_spaces", True) and type(backend.model).__name__ != "BPE":
        raise NeedsTransformers("clean_up_tokenization_spaces on a non-BPE tokenizer")
    if backend.get_vocab_size() > MAX_PLAIN_VOCAB:
        raise NeedsTransformers("large vocabulary")
    special_map = _read_json(path / "special_tokens_map.json")
    special: dict[str, str] = {}
    for key in SPECIAL_KEYS:
        value = _content(config.get(key, special_map.get(key)))
        if value is not None:
            special[key] = value
    _check_added_tokens(backend, config, special.values())
    backend.no_truncation()
    backend.no_padding()
    return LightTokenizer(backend, special, _chat_template(path, config), str(path))


def _check_added_tokens(backend: Any, config: Mapping[str, Any], named: Any) -> None:
    """transformers adds config-only special tokens at load: require they are there already."""
    added = backend.get_added_tokens_decoder()  # id -> AddedToken
    by_content = {t.content for t in added.values()}
    listed = [*_values(config.get("additional_special_tokens")),
              *_values(config.get("extra_special_tokens"))]
    for content in [*named, *map(_content, listed)]:
        if content is not None and content not in by_content:
            raise NeedsTransformers(f"special token {content!r} is not in tokenizer.json")
    for index, entry in (config.get("added_tokens_decoder") or {}).items():
        have = added.get(int(index))
        if have is None or any(getattr(have, k) != entry.get(k, getattr(have, k))
                               for k in ("content", *_FLAGS)):
            raise NeedsTransformers(f"added token {index} differs from tokenizer.json")
