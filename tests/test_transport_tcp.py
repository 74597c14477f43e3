"""The tcp options table, port picking, key files, the refusal log and `minisgl keys new`."""

from __future__ import annotations

import logging
import os
import socket
import stat
from pathlib import Path

import pytest
from typer.testing import CliRunner

from minisgl_core.cli.app import make_app
from minisgl_core.interfaces import AddressInUse
from minisgl_core.plugin.loading import build_manager
from minisgl_core.plugin.transport_tcp import (
    NetworkOptions,
    PortRange,
    RefusalLog,
    check_tcp_endpoint,
    is_loopback,
    read_private,
    split_tcp,
    write_private,
)
from minisgl_core.service.ports import free_port
from minisgl_core.service.rundir import pick_port, private_run_dir, tcp_endpoint

runner = CliRunner()
PLUGINS = ["minisgl_transport_zmq", "minisgl_transport_nng"]


@pytest.mark.parametrize(("text", "expected"), [
    (0, PortRange()), ("0", PortRange()), (5600, PortRange(5600, 5600)),
    ("5600-5699", PortRange(5600, 5699)), (" 7000 - 7001 ", PortRange(7000, 7001))])
def test_port_ranges_parse(text: object, expected: PortRange) -> None:
    assert PortRange.parse(text) == expected
    assert PortRange.parse(str(expected)) == expected


@pytest.mark.parametrize("text", ["70000", "5700-5600", "x", "0-10", "-5", True, 1.5])
def test_bad_port_ranges_are_refused(text: object) -> None:
    with pytest.raises(ValueError):
        PortRange.parse(text)


def test_network_options_defaults_and_checks(tmp_path: Path) -> None:
    assert not NetworkOptions.from_mapping("zmq", {}).tcp
    opts = NetworkOptions.from_mapping("zmq", {"endpoints": "tcp", "host": "[::1]",
                                               "ports": "5600-5601"})
    assert (opts.host, opts.ports, opts.keys) == ("::1", PortRange(5600, 5601), "")
    with pytest.raises(ValueError, match=r"0\.0\.0\.0.*minisgl keys new DIR.*transports\.zmq"):
        NetworkOptions.from_mapping("zmq", {"endpoints": "tcp", "host": "0.0.0.0"})
    # ipc endpoints never leave the host: a wildcard host alone is no reason to refuse
    NetworkOptions.from_mapping("zmq", {"host": "0.0.0.0"})
    with pytest.raises(ValueError, match="option 'host' of transport 'nng'"):
        NetworkOptions.from_mapping("nng", {"host": "example.org"})
    with pytest.raises(ValueError, match="unknown option 'hots'.*did you mean"):
        NetworkOptions.from_mapping("zmq", {"hots": "127.0.0.1"})
    opts = NetworkOptions.from_mapping("zmq", {"endpoints": "tcp", "keys": str(tmp_path)})
    with pytest.raises(ValueError, match=r"zmq does not exist.*minisgl keys new"):
        opts.key_dir("zmq")
    (tmp_path / "zmq").mkdir()
    assert opts.key_dir("zmq") == tmp_path / "zmq"


def test_loopback_and_tcp_endpoint_checks() -> None:
    assert is_loopback("127.0.0.2") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("10.0.0.1")
    assert not is_loopback("scheduler.example")
    assert split_tcp("tls+tcp://[::1]:5600") == ("tls+tcp", "::1", 5600)
    assert split_tcp("tcp://127.0.0.1:*") == ("tcp", "127.0.0.1", 0)
    assert split_tcp("ipc:///tmp/x") is None
    check_tcp_endpoint("zmq", "tcp://127.0.0.1:5600", has_keys=False)
    check_tcp_endpoint("zmq", "tcp://10.0.0.1:5600", has_keys=True)
    with pytest.raises(ValueError, match="minisgl keys new"):
        check_tcp_endpoint("zmq", "tcp://scheduler.example:5600", has_keys=False)


def test_pick_port_honours_the_range_and_never_repeats() -> None:
    base = free_port()
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        taken = busy.getsockname()[1]
        with pytest.raises(AddressInUse, match=f"no free tcp port in {taken}-{taken}"):
            pick_port("127.0.0.1", taken, taken)
    first = pick_port("127.0.0.1", base, base + 3)
    second = pick_port("127.0.0.1", base, base + 3)
    assert base <= first < second <= base + 3
    with pytest.raises(ValueError, match="no interface has that address"):
        pick_port("192.0.2.1")  # TEST-NET-1: no interface of this host has it


def test_tcp_endpoints_are_agreed_through_the_run_dir() -> None:
    with private_run_dir() as run_dir:
        ep = tcp_endpoint(run_dir, "scheduler", host="127.0.0.1", scheme="tls+tcp")
        assert ep.startswith("tls+tcp://127.0.0.1:")
        assert tcp_endpoint(run_dir, "scheduler", host="127.0.0.1", scheme="tls+tcp") == ep
        assert (run_dir / "scheduler.port").read_text() == ep.rpartition(":")[2]
        assert tcp_endpoint(run_dir, "other", host="127.0.0.1") != ep.replace("tls+", "")


def test_key_files_are_private(tmp_path: Path) -> None:
    path = write_private(tmp_path / "secret", b"s3cret")
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert read_private(path, "zmq") == b"s3cret"
    with pytest.raises(FileExistsError):
        write_private(path, b"again")
    os.chmod(path, 0o644)
    with pytest.raises(ValueError, match="chmod 600"):
        read_private(path, "zmq")
    with pytest.raises(ValueError, match="missing.*minisgl keys new"):
        read_private(tmp_path / "absent", "zmq")


def test_refusal_log_holds_back_repeats(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING)
    refusals = RefusalLog("zmq", every=3600, burst=2)
    for _ in range(4):
        refusals.refused("tcp://127.0.0.1:5600", "bad key", "10.0.0.9")
    refusals.refused("tcp://127.0.0.1:5600", "garbage")
    refusals.every = 0  # the window is over: the next line reports what was held back
    refusals.refused("tcp://127.0.0.1:5600", "bad key")
    refusals.failed("tcp://10.0.0.9:5601", "bad key")
    assert [r.getMessage() for r in caplog.records] == [
        "transport zmq: refused a peer at 10.0.0.9 on tcp://127.0.0.1:5600: bad key",
        "transport zmq: refused a peer at 10.0.0.9 on tcp://127.0.0.1:5600: bad key",
        "transport zmq: refused a peer on tcp://127.0.0.1:5600: garbage",
        "transport zmq: refused a peer on tcp://127.0.0.1:5600: bad key "
        "(and 2 more like it since the last report)",
        "transport zmq: handshake with tcp://10.0.0.9:5601 failed: bad key"]


def test_keys_new_writes_private_keys_for_each_transport(tmp_path: Path) -> None:
    app = make_app(build_manager(autoload=False, extra=PLUGINS))
    target = tmp_path / "keys"
    result = runner.invoke(app, ["keys", "new", str(target)])
    assert result.exit_code == 0, result.output
    assert f"-s transports.zmq.keys={target}" in result.stdout
    assert sorted(p.name for p in target.iterdir()) == ["nng", "zmq"]
    assert sorted(p.name for p in (target / "nng").iterdir()) == ["ca.pem", "cert.pem", "key.pem"]
    assert sorted(p.name for p in (target / "zmq").iterdir()) == [
        "client.key", "client.key_secret", "server.key", "server.key_secret"]
    for path in [target, *target.rglob("*")]:
        mode = stat.S_IMODE(os.stat(path).st_mode)
        assert mode == (0o700 if path.is_dir() else 0o600), (path, oct(mode))
    before = (target / "zmq" / "server.key_secret").read_bytes()

    again = runner.invoke(app, ["keys", "new", str(target)])
    assert again.exit_code == 1 and "--force replaces them" in again.stderr
    assert (target / "zmq" / "server.key_secret").read_bytes() == before

    forced = runner.invoke(app, ["keys", "new", str(target), "--force", "--transport", "zmq"])
    assert forced.exit_code == 0, forced.output
    assert (target / "zmq" / "server.key_secret").read_bytes() != before

    bad = runner.invoke(app, ["keys", "new", str(target), "--transport", "inproc"])
    assert bad.exit_code == 1 and "'inproc' has no keys to write" in bad.stderr
