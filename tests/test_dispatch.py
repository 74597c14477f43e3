"""The --dp dispatcher over real inproc channels: least load, first-page affinity within the
threshold, round robin, aborts to the owning replica only."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from minisgl_core.default_plugins.inproc import InprocTransport
from minisgl_core.interfaces import Receiver
from minisgl_core.sampling import SamplingParams
from minisgl_core.service.dispatch import Dispatcher
from minisgl_core.service.rundir import private_run_dir
from minisgl_core.wire import codec
from minisgl_core.wire.schema import Abort, DetokenizeInfo, Stats, TokenizedRequest

PAGE = 4
SYSTEM = tuple(range(100, 100 + 2 * PAGE))  # two full pages every prompt below shares


@pytest.fixture
def replicas() -> Iterator[tuple[InprocTransport, list[Receiver], list[str]]]:
    transport = InprocTransport()
    with private_run_dir() as run_dir:
        eps = [transport.endpoint(run_dir, f"scheduler.dp{i}") for i in range(2)]
        inboxes = [transport.pull(ep, bind=True) for ep in eps]
        yield transport, inboxes, eps
        transport.close()


def request(rid: str, ids: tuple[int, ...]) -> TokenizedRequest:
    return TokenizedRequest(rid, ids, SamplingParams(), DetokenizeInfo(owner="fe"))


def drain(inbox: Receiver) -> list[object]:
    out = []
    while (data := inbox.recv_nowait()) is not None:
        out.append(codec.decode_scheduler(data))
    return out


def report(d: Dispatcher, rank: int, *, received: int, queued: int) -> None:
    d.update(Stats("scheduler:1", gauges={"requests_running": float(queued),
                                          "kv_page_size": float(PAGE)},
                   counters={"scheduler_requests_received_total": float(received)},
                   dp_rank=rank))


def test_least_loaded_counts_what_was_sent_since_the_last_report(replicas: tuple) -> None:
    transport, inboxes, eps = replicas
    d = Dispatcher([transport.push(ep) for ep in eps], page_size=PAGE)
    short = (1, 2)  # no full page: load alone decides
    picks = [d.send_request(request(f"r{i}", short)) for i in range(6)]
    assert picks == [0, 1, 0, 1, 0, 1]  # no report yet: the sent counts balance them
    report(d, 0, received=3, queued=0)  # replica 0 finished its three
    assert [d.send_request(request(f"s{i}", short)) for i in range(3)] == [0, 0, 0]
    assert len(drain(inboxes[0])) == 6 and len(drain(inboxes[1])) == 3


def test_prefix_affinity_until_the_threshold_then_both_hold_it(replicas: tuple) -> None:
    transport, _, eps = replicas
    d = Dispatcher([transport.push(ep) for ep in eps], threshold=2, page_size=PAGE)
    picks = [d.send_request(request(f"r{i}", (*SYSTEM, i))) for i in range(4)]
    # the first page's replica wins while at most 2 requests busier than the other
    assert picks == [0, 0, 0, 1]
    # now both hold the prefix: the less busy of the two takes the next
    assert d.send_request(request("r4", (*SYSTEM, 4))) == 1
    other = (7,) * (2 * PAGE)  # a different first page goes to the least loaded
    assert d.send_request(request("o", other)) == 1


def test_round_robin_ignores_prefixes(replicas: tuple) -> None:
    transport, _, eps = replicas
    d = Dispatcher([transport.push(ep) for ep in eps], policy="round_robin", page_size=PAGE)
    assert [d.send_request(request(f"r{i}", SYSTEM)) for i in range(4)] == [0, 1, 0, 1]


def test_aborts_reach_the_owner_only_and_unknown_ids_reach_all(replicas: tuple) -> None:
    transport, inboxes, eps = replicas
    d = Dispatcher([transport.push(ep) for ep in eps], page_size=PAGE)
    owner = d.send_request(request("a", (1,)))
    for inbox in inboxes:
        drain(inbox)
    d.send_abort("a", codec.encode(Abort("a")))
    assert drain(inboxes[owner]) == [Abort("a")] and drain(inboxes[1 - owner]) == []
    d.send_abort("never-sent", codec.encode(Abort("never-sent")))
    assert all(drain(inbox) == [Abort("never-sent")] for inbox in inboxes)
