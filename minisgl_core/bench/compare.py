"""`minisgl bench compare`: the same load on the service once per transport, next to the offline
engine, written to a folder as results.json, results.md and plot.png."""

from __future__ import annotations

import datetime
import json
import os
import platform
import shlex
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Annotated, Any

import typer

from minisgl_core.bench.ceilings import host_rooflines, measure_all_cores
from minisgl_core.bench.compare_report import markdown, plot
from minisgl_core.bench.compare_service import (
    MODES,
    ServiceUnderTest,
    median_run,
    say,
    scheme_of,
    service_bytes,
    sized_like_peers,
    start_peer,
)
from minisgl_core.bench.offline import OfflineEngine
from minisgl_core.bench.peers import (
    DUMMY_GGUF_TYPES,
    PEERS,
    build_specs,
    check_names,
    dummy_ggufs,
)
from minisgl_core.bench.results import known_names
from minisgl_core.bench.serve_cli import json_object
from minisgl_core.store.dummy_models import config_names, config_spec, ensure_dummy_model
from minisgl_core.store.errors import ModelNotFoundError
from minisgl_core.store.naming import model_name_of

GGUF_TYPES = ("F16", *DUMMY_GGUF_TYPES)  # what --gguf serves


def check_modes(names: Sequence[str]) -> list[str]:
    """``names`` once each if each is one of MODES; else ValueError naming them."""
    return known_names("mode", names, list(MODES))


def multiprocess_transports(names: Sequence[str] | None = None) -> list[str]:
    """Registered transports that work across processes (all of them, or those of ``names``)."""
    from minisgl_core.plugin.loading import build_manager, collect

    regs = collect(build_manager())
    out = []
    for name in names or regs.transports.names():
        factory = regs.transports.get(name)  # unknown names raise with a did-you-mean
        flag = getattr(factory, "multiprocess", None)
        if flag is None:  # a factory function: build one to ask
            transport = factory({})
            flag = transport.multiprocess
            getattr(transport, "close", lambda: None)()
        if flag:
            out.append(name)
        elif names:
            raise ValueError(f"transport {name} only works inside one process")
    return out


def _quantization(launch_args: Sequence[str]) -> str | None:
    """The ``-s quantization=...`` passed to every launch, if any."""
    for arg in launch_args:
        key, _, value = arg.partition("=")
        if key.strip() == "quantization":
            return value.strip() or None
    return None


def main(transports: list[str] | None, concurrency: list[int], requests: int | None,
         max_tokens: int, model: str | None, out_dir: Path, prompt_len: int | None = None,
         duration_limit_s: float = 300.0, offline: bool = True, launch_args: Sequence[str] = (),
         command: str = "minisgl bench compare", progress: bool = True,
         repeat: int = 1, scheduler: str | None = None,
         peers: Sequence[str] = (), peer_commands: Sequence[str] = (),
         modes: Sequence[str] = (), model_config: str | None = None,
         ggufs: Sequence[str] = (), extra_body: dict[str, Any] | None = None,
         request_rate: float | None = None) -> dict[str, Any]:
    """Run everything, write results.json, results.md and plot.png into ``out_dir``.

    ``modes`` (names of MODES): one service per transport and mode, instead of one per
    transport; the offline engine then is not measured (it would be one per mode).

    ``peers`` (vllm, llamacpp) and ``peer_commands`` (LABEL=COMMAND) are other engines: they
    start after the services and run each level right after them, same requests, same client.

    ``model_config`` (a shipped config's name, or a path to a config.json) serves random
    weights at its shapes instead of ``model``: minisgl and vLLM the safetensors, llama.cpp
    its GGUFs; ``ggufs`` (F16, Q4_0, Q8_0) add a minisgl service per transport on each of
    those files, as `minisgl launch --model FILE.gguf` serves it.

    ``extra_body`` goes into every request of every engine (``{"temperature": 1.0}``: sampled
    rather than greedy, each engine's other sampling defaults as its users get them);
    ``request_rate`` sends the requests at Poisson arrival times instead of a closed loop.

    ``scheduler`` picks the services' scheduler role; with one other than ``continuous`` (the
    model) there is no offline engine to compare with, and ``synthetic`` leaves the transports
    and the processes around the model as all that is measured.
    """
    from minisgl_core.plugin.loading import build_manager
    from minisgl_core.plugin.model_lookup import resolve_model

    if repeat < 1:
        raise ValueError(f"--repeat must be at least 1, got {repeat}")
    if model and model_config:
        raise ValueError(f"--model {model} and --model-config {model_config} both name the "
                         "model: give one (--model-config serves random weights at a "
                         "config's shapes)")
    if ggufs and not model_config:
        raise ValueError("--gguf serves the GGUFs of --model-config's random model: name one "
                         "(for any other GGUF: --model FILE.gguf)")
    concurrency = list(dict.fromkeys(concurrency))  # one level per value, in the order given
    modes = check_modes(modes)
    if modes or extra_body or request_rate:  # the offline engine: one configuration, decoding
        offline = False  # greedily, a whole batch at once
    if scheduler not in (None, "continuous"):
        offline = False  # the offline engine runs the model: nothing to compare a stub with
    if scheduler is not None:
        launch_args = ["--scheduler", scheduler, *launch_args]
    if scheduler is not None:  # a typo fails here, before any service starts
        from minisgl_core.plugin.loading import build_manager, collect

        collect(build_manager()).roles.check("scheduler", scheduler)
    names = multiprocess_transports(transports)
    if not names:
        raise ValueError("no multi-process transport is installed")
    if model_config:
        say(f"random weights at {model_config}'s shapes (written once, then cached)")
        model_dir = str(ensure_dummy_model(model_config))
        launch_args = [*sized_like_peers(model_dir, launch_args), *launch_args]
    else:
        model_dir = resolve_model(build_manager(), model)
    # not installed: fail here, before anything starts
    peer_specs = build_specs(peers, peer_commands, model_dir, max(concurrency), model_config)
    gguf_files = _model_ggufs(model_config, ggufs) if model_config and ggufs else {}
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "logs").mkdir(exist_ok=True)
    prompt = (f"prompt padded to ~{prompt_len} words" if prompt_len
              else "prompt: a one-line question")
    results: dict[str, Any] = {
        "command": command, "model": model_name_of(Path(model_dir)), "model_dir": model_dir,
        "model_config": model_config, "ggufs": {k: str(v) for k, v in gguf_files.items()},
        "max_tokens": max_tokens, "concurrency": list(concurrency), "requests": requests,
        "prompt_len": prompt_len, "prompt": prompt, "extra_body": extra_body,
        "request_rate": request_rate,
        "date": datetime.datetime.now().isoformat(timespec="seconds"),
        "machine": {"cpus": os.cpu_count(), "machine": platform.machine(),
                    "processor": platform.processor(), "python": platform.python_version()},
        "repeat": repeat, "service": [], "offline": [], "offline_runs": [], "offline_meta": {},
        "scheduler": scheduler or "continuous", "peers": [],
    }
    # Every service is up at once (idle, each costs ~0.3% of a core), and each level runs on
    # the offline engine and then on every transport back to back: the machine's speed drifts
    # over minutes, so the figures compared with each other are taken minutes apart at most.
    running: list[ServiceUnderTest] = []
    others: list[ServiceUnderTest] = []
    ceiling: OfflineEngine | None = None
    try:
        for name in names:
            for mode in modes or [None]:
                running.append(ServiceUnderTest.start(model_dir, name, out_dir / "logs",
                                                      launch_args, mode))
            for kind, gguf in gguf_files.items():
                running.append(ServiceUnderTest.start(str(gguf), name, out_dir / "logs",
                                                      launch_args, label=f"{name} gguf {kind}"))
        for spec in peer_specs:
            others.append(start_peer(spec, out_dir / "logs"))
        ceiling = OfflineEngine(model_dir, prompt_len, launch_args) if offline else None
        if ceiling is not None:  # what it runs, as a service's /v1/models meta says
            results["offline_meta"] = ceiling.engine.info()
        quantization = (_quantization(launch_args) if ceiling is None  # the offline engine's
                        else scheme_of(results["offline_meta"]))  # choice: what "auto" chose
        quantization = None if quantization in ("fp32", "bf16", "auto", "none") else quantization
        schemes = [svc.scheme for svc in running] + [
            spec.scheme for spec in peer_specs if spec.gguf is None]
        files = {spec.scheme: spec.gguf for spec in peer_specs if spec.gguf and spec.scheme}
        first = measure_all_cores()  # again after the levels: the host's speed moves
        for c in concurrency:
            offline_runs = []
            for _ in range(repeat):
                if ceiling is not None:
                    offline_runs.append(ceiling.measure(c, max_tokens, requests))
                for svc in running + others:
                    svc.run_level(c, requests, max_tokens, prompt_len, duration_limit_s,
                                  progress, extra_body, request_rate)
            if offline_runs:
                results["offline"].append(median_run(offline_runs))
                results["offline_runs"].append(offline_runs)
        # None: no offline engine ran (its meta, like a service's, holds the bytes as text)
        own_bytes = int(results["offline_meta"].get("weight_bytes") or 0) or None
        results["ceilings"] = host_rooflines((first, measure_all_cores()), model_dir,
                                             quantization, concurrency, schemes, files,
                                             service_bytes(running), own_bytes)
    finally:
        results["service"] = [svc.finish() for svc in running]
        results["peers"] = [peer.finish() for peer in others]
        if ceiling is not None:
            ceiling.engine.close()
    (out_dir / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    (out_dir / "results.md").write_text(markdown(results))
    plot(results, out_dir / "plot.png")
    return results


def _model_ggufs(model_config: str, kinds: Sequence[str]) -> dict[str, Path]:
    """The GGUF file of each of ``kinds`` of ``model_config``'s random model, by kind."""
    kinds = _gguf_types(kinds)
    return dict(zip(kinds, dummy_ggufs(model_config, kinds), strict=True))


def _checked(check: Callable[[Any], object]) -> Callable[[Any], Any]:
    """A typer callback: the option's value if ``check`` passes it (or it is unset), else
    the error ``check`` raised, as a usage error (exit 2) before anything starts."""
    def callback(value: Any) -> Any:
        try:
            if value:
                check(value)
        except (ValueError, ModelNotFoundError) as exc:
            raise typer.BadParameter(str(exc)) from None
        return value
    return callback


def _gguf_types(kinds: Sequence[str]) -> list[str]:
    return known_names("GGUF type", [k.upper() for k in kinds], GGUF_TYPES)


def compare_command(
    transport: Annotated[list[str] | None, typer.Option(
        help="Only these transports (repeat) (default: every multi-process one).")] = None,
    concurrency: Annotated[list[int] | None, typer.Option(
        help="Concurrency levels and offline batch sizes (repeat) (default: 1, 8, 32).")] = None,
    requests: Annotated[int | None, typer.Option(
        help="Requests per level (default: 2 x concurrency, at least 8).")] = None,
    max_tokens: Annotated[int, typer.Option(help="Tokens generated per request.")] = 64,
    model: Annotated[str | None, typer.Option(help="Model directory or name.")] = None,
    model_config: Annotated[str | None, typer.Option(
        metavar="NAME", callback=_checked(config_spec),
        help=f"Instead of --model: random weights at the shapes of a public config "
             f"({', '.join(config_names())}) or of a config.json path, written once into the "
             f"cache; every engine serves the same weights (llama.cpp as GGUFs "
             f"{' and '.join(DUMMY_GGUF_TYPES)}).")] = None,
    gguf: Annotated[list[str] | None, typer.Option(
        metavar="TYPE", callback=_checked(_gguf_types),
        help=f"With --model-config: also serve its GGUF of TYPE (repeat: "
             f"{', '.join(GGUF_TYPES)}; all but F16 written by llama.cpp's llama-quantize) "
             f"with minisgl, one service per transport, as `minisgl launch --model FILE.gguf` "
             f"serves it.")] = None,
    out: Annotated[Path, typer.Option(help="Results folder.")] = Path("results/compare"),
    prompt_len: Annotated[int | None, typer.Option(
        help="Pad the prompt to about this many words (default: a short question).")] = None,
    duration_limit: Annotated[float, typer.Option(
        help="Seconds per level after which no new request starts.")] = 300.0,
    offline: Annotated[bool, typer.Option(help="Measure the offline engine too.")] = True,
    repeat: Annotated[int, typer.Option(
        help="Runs of each level per engine, interleaved; the median run is reported.")] = 1,
    scheduler: Annotated[str | None, typer.Option(
        help="Scheduler role of the services: continuous (the model, the default) or synthetic "
             "(no model: measures the transports and the processes around it).")] = None,
    mode: Annotated[list[str] | None, typer.Option(
        help=f"One service per transport and mode (repeat), measured side by side: "
             f"{', '.join(MODES)}; the offline engine is then left out.",
        callback=_checked(check_modes))] = None,
    peer: Annotated[list[str] | None, typer.Option(
        help=f"Also start and measure this engine (repeat): {', '.join(PEERS)} "
             "(installed by `make bench-peers`).", callback=_checked(check_names))] = None,
    peer_command: Annotated[list[str] | None, typer.Option(
        metavar="LABEL=COMMAND", help="Also start and measure this OpenAI-compatible server "
                                      "(repeat); {port} in COMMAND is replaced by a free port.")
    ] = None,
    set_: Annotated[list[str] | None, typer.Option(
        "-s", "--set", metavar="KEY=VALUE", help="Passed to every `minisgl launch`.")] = None,
    extra_body: Annotated[str | None, typer.Option(
        help='JSON object merged into every request of every engine, e.g. \'{"temperature": '
             '1.0}\' to sample rather than decode greedily.')] = None,
    request_rate: Annotated[float | None, typer.Option(
        min=0.001, help="Requests a second, sent at the same random (Poisson) times to every "
        "engine, the level's concurrency the most in flight (default: a closed loop).")] = None,
) -> None:
    """Run the same streaming load on the service once per transport, next to the offline
    engine and any peers (other servers); write results.json, results.md and plot.png."""
    argv = [f"--transport={t}" for t in transport or []]
    argv += [f"--concurrency={c}" for c in concurrency or []]
    for flag, value, default in (("requests", requests, None), ("max-tokens", max_tokens, 64),
                                 ("model", model, None), ("model-config", model_config, None),
                                 ("prompt-len", prompt_len, None),
                                 ("request-rate", request_rate, None),
                                 ("repeat", repeat, 1),
                                 ("out", out, Path("results/compare"))):
        if value != default:
            argv.append(f"--{flag}={value}")
    argv += [] if offline else ["--no-offline"]
    argv += [f"--scheduler={scheduler}"] if scheduler else []
    argv += [f"--mode={m}" for m in mode or []]
    argv += [f"--gguf={g}" for g in gguf or []]
    argv += [f"--peer={p}" for p in peer or []]
    argv += [f"--peer-command={p}" for p in peer_command or []]
    extra = json_object(extra_body)
    argv += [f"--extra-body={json.dumps(extra)}"] if extra is not None else []
    launch_args = [arg for kv in set_ or [] for arg in ("-s", kv)]
    argv += launch_args
    try:
        main(transport or None, concurrency or [1, 8, 32], requests, max_tokens, model, out,
             prompt_len, duration_limit, offline, launch_args,
             command=shlex.join(["minisgl", "bench", "compare", *argv]), repeat=repeat,
             scheduler=scheduler, peers=peer or (), peer_commands=peer_command or (),
             modes=mode or (), model_config=model_config, ggufs=gguf or (),
             extra_body=extra, request_rate=request_rate)
    except (ValueError, LookupError, RuntimeError, ModelNotFoundError) as exc:
        typer.echo(f"minisgl: error: {exc}", err=True)
        raise typer.Exit(1) from None
    typer.echo(f"wrote {out}/results.json, results.md, plot.png")
    typer.echo((out / "results.md").read_text())
