"""``python -m minisgl``: the ``minisgl`` CLI, where bare flags are mini-sglang's and launch it."""

from __future__ import annotations

import sys
from collections.abc import Sequence

import typer

from minisgl_core.cli.app import main as cli_main
from minisgl_core.cli.common import EXIT_USAGE

# what python -m minisgl adds before the user's own -s: a later -s (accept_any_model=false) wins
ANY_MODEL = ("-s", "frontends.openai.accept_any_model=true")

# mini-sglang's spelling -> `minisgl launch`'s flag of the same meaning
RENAMED: dict[str, str] = {
    "--model-path": "--model",
    "--tp-size": "--tp",
    "--tensor-parallel-size": "--tp",
    "--cache-type": "--cache",
}
# mini-sglang's flags that are launch config keys without a flag of their own (-s KEY=VALUE)
AS_KEYS: dict[str, str] = {
    "--max-running-requests": "max_running_requests",
    "--max-prefill-length": "max_prefill_tokens",
    "--max-extend-length": "max_prefill_tokens",
}
# mini-sglang's flags with nothing to map onto here, and what to use instead
UNSUPPORTED: dict[str, str] = {
    "--memory-ratio": "the KV cache is sized by --num-pages (unset: from free memory)",
    "--cuda-graph-max-bs": "no CUDA graphs are captured; --compile compiles the decode step",
    "--graph": "no CUDA graphs are captured; --compile compiles the decode step",
    "--attention-backend": "the attention kernel is chosen here (MINISGL_ATTENTION=sdpa forces "
                           "SDPA)",
    "--attn": "the attention kernel is chosen here (MINISGL_ATTENTION=sdpa forces SDPA)",
    "--num-tokenizer": "the service always runs one tokenizer and one detokenizer process",
    "--tokenizer-count": "the service always runs one tokenizer and one detokenizer process",
    "--expert-parallel-size": "there is no expert parallelism (--tp splits every layer)",
    "--ep-size": "there is no expert parallelism (--tp splits every layer)",
    "--moe-backend": "no MoE model is served",
    "--dummy-weight": "the model's own weights are loaded; --scheduler synthetic serves no model",
    "--disable-pynccl": "--tp all-reduces over torch.distributed, never PyNCCL",
    "--shell-mode": "`minisgl chat` talks to a running service (or --offline to a model here)",
}
MODEL_SOURCE = "--model-source"  # huggingface (what --model does) is accepted; nothing else
ROOT_OPTIONS = ("--help", "--version")  # the CLI's own: the bare flags launch nothing

SEED_HELP = """
python -m minisgl --model PATH [FLAGS]: the same as `minisgl launch` with the default
transport and frontend, answering a request whatever model it names (the served name is
reported; -s frontends.openai.accept_any_model=false refuses unknown names, as launch does).
mini-sglang's flags: --model (--model-path), --dtype, --host, --port, --num-pages,
--page-size, --max-seq-len-override, --tp (--tp-size, --tensor-parallel-size),
--max-running-requests, --max-prefill-length (--max-extend-length), --cache-type; every
`minisgl launch` flag works too. python -m minisgl SUBCOMMAND is the minisgl command."""


class SeedFlagError(ValueError):
    """A mini-sglang flag that has no equivalent here; the message says what to use instead."""


def _split(token: str) -> tuple[str, str | None]:
    """``--flag=value`` -> (``--flag``, ``value``); ``--flag`` -> (``--flag``, None)."""
    name, eq, value = token.partition("=")
    return (name, value) if eq else (token, None)


def _value(argv: Sequence[str], i: int, name: str, inline: str | None) -> tuple[str, int]:
    """The flag's value and the index after it."""
    if inline is not None:
        return inline, i + 1
    if i + 1 >= len(argv):
        raise SeedFlagError(f"{name} needs a value")
    return argv[i + 1], i + 2


def launch_args(argv: Sequence[str]) -> list[str]:
    """``minisgl launch``'s argv for mini-sglang's flags ``argv``; SeedFlagError for a flag
    with no equivalent. Flags launch knows under the same name pass through unchanged."""
    out = ["launch", *ANY_MODEL]
    i = 0
    while i < len(argv):
        name, inline = _split(argv[i])
        if name in UNSUPPORTED:
            raise SeedFlagError(f"{name} is mini-sglang's and has no equivalent here: "
                                f"{UNSUPPORTED[name]}")
        if name == MODEL_SOURCE:
            source, i = _value(argv, i, name, inline)
            if source != "huggingface":
                raise SeedFlagError(f"{name} {source}: only huggingface (--model takes a "
                                    "directory, a .gguf file or a Hugging Face Hub id)")
        elif name in RENAMED:
            value, i = _value(argv, i, name, inline)
            out += [RENAMED[name], value]
        elif name in AS_KEYS:
            value, i = _value(argv, i, name, inline)
            out += ["-s", f"{AS_KEYS[name]}={value}"]
        else:  # launch's own flag (or a mistake typer reports with launch's usage)
            out.append(argv[i])
            i += 1
    return out


def is_seed_call(argv: Sequence[str]) -> bool:
    """True when ``argv`` starts with a flag that is not the CLI's own (--help, --version)."""
    return bool(argv) and argv[0].startswith("-") and argv[0] not in ROOT_OPTIONS


def main(argv: Sequence[str] | None = None) -> None:
    """``python -m minisgl``: bare flags launch the service, anything else is ``minisgl``."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not is_seed_call(args):
        try:
            cli_main(args)
        finally:
            if args in ([], ["--help"]):  # the CLI's help, then what this spelling adds to it
                typer.echo(SEED_HELP)
        return
    try:
        translated = launch_args(args)
    except SeedFlagError as exc:
        typer.echo(f"minisgl: error: {exc}", err=True)
        sys.exit(EXIT_USAGE)
    cli_main(translated)
