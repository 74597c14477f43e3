"""The transport and tokenizer-role contract suites, run against the example plugin as a third
party would."""

from __future__ import annotations

import minisgl_transport_loopback

from minisgl_core.api import (
    GenerateRequest,
    SamplingParams,
    TokenizerContract,
    TokenizerRole,
    TransportContract,
    build_manager,
    collect,
    make_tiny_model,
    private_run_dir,
)


class TestLoopbackContract(TransportContract):
    transport = "loopback"
    plugins = ("minisgl_transport_loopback",)


def test_registered_lazily_under_its_own_name() -> None:
    regs = collect(build_manager(autoload=False, extra=[minisgl_transport_loopback]))
    entry = regs.transports.entry("loopback")
    assert entry.target == "minisgl_transport_loopback.transport:LoopbackTransport"


def test_every_process_of_a_run_agrees_on_a_channel_port() -> None:
    from minisgl_transport_loopback.transport import LoopbackTransport

    a, b = LoopbackTransport(), LoopbackTransport()
    try:
        with private_run_dir() as run_dir:
            ep = a.endpoint(run_dir, "scheduler")
            assert ep.startswith("tcp://127.0.0.1:")
            assert b.endpoint(run_dir, "scheduler") == ep  # read back from the run dir
            assert (run_dir / "scheduler.port").read_text() == ep.rsplit(":", 1)[1]
    finally:
        a.close()
        b.close()


class TestShoutContract(TokenizerContract):
    """The tokenizer role contract, as for any tokenizer role."""

    role = "shout"
    plugins = ("minisgl_transport_loopback",)


class TestShoutLowerContract(TestShoutContract):
    options = {"case": "lower"}


def test_shout_tokenizes_the_recased_prompt(tmp_path) -> None:  # noqa: ANN001
    from minisgl_transport_loopback.shout import ShoutTokenizer

    plain = TokenizerRole(make_tiny_model(tmp_path / "tiny", "llama"), 512)
    loud = ShoutTokenizer(plain)

    def ids(role: object, prompt: str) -> tuple[int, ...]:
        request = GenerateRequest(request_id="r", owner="o", sampling=SamplingParams(),
                                  prompt=prompt)
        return role.tokenize(request).prompt_ids  # type: ignore[attr-defined]

    assert ids(loud, "Hello world") == ids(plain, "HELLO WORLD") != ids(plain, "Hello world")
    try:
        ShoutTokenizer(plain, "sideways")
    except ValueError as exc:
        assert 'case must be "upper" or "lower"' in str(exc)
    else:
        raise AssertionError("a bad case was accepted")
