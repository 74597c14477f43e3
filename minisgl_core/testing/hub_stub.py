"""A local stand-in for the Hugging Face Hub, for tests: point ``HF_ENDPOINT`` at ``stub.url``.

It serves model repos from local directories with the endpoints and headers huggingface_hub's
``model_info``, ``snapshot_download`` and ``hf_hub_download`` use: ``/api/models/{repo}``
(``/revision/{rev}``: id, sha, siblings, gated), ``/api/models/{repo}/tree/{rev}`` (the file
listing) and ``/{repo}/resolve/{rev}/{file}`` (HEAD and GET, with ETag, X-Repo-Commit,
Content-Length, X-Linked-Etag / X-Linked-Size for LFS files). An unknown repo is a 404
``RepoNotFound``, a gated repo's files a 401 ``GatedRepo`` without the right bearer token, an
unknown revision ``RevisionNotFound``, as the Hub answers. Every request is recorded.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import socket
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

LFS_SUFFIXES = (".safetensors", ".bin", ".gguf", ".pt")


@dataclass
class StubRepo:
    """One model repo: its files (repo path -> bytes) at one commit."""

    repo_id: str
    files: dict[str, bytes]
    gated: bool = False
    token: str | None = None  # the bearer token that opens a gated repo
    commit: str = ""

    def __post_init__(self) -> None:
        if not self.commit:
            digest = hashlib.sha1(self.repo_id.encode())
            for name in sorted(self.files):
                digest.update(name.encode() + hashlib.sha1(self.files[name]).digest())
            self.commit = digest.hexdigest()


def repo_from_dir(repo_id: str, directory: Path, *, gated: bool = False,
                  token: str | None = None, skip: tuple[str, ...] = ()) -> StubRepo:
    """A repo holding every file of ``directory`` (none of ``skip``), as uploaded."""
    files = {p.relative_to(directory).as_posix(): p.read_bytes()
             for p in sorted(directory.rglob("*")) if p.is_file() and p.name not in skip}
    return StubRepo(repo_id, files, gated=gated, token=token)


@dataclass
class HubStub:
    """The server: ``add`` repos, ``start``, use ``url``, ``stop`` (also as a context manager)."""

    repos: dict[str, StubRepo] = field(default_factory=dict)
    requests: list[tuple[str, str]] = field(default_factory=list)  # (method, path)
    _connections: set[socket.socket] = field(default_factory=set)
    _server: ThreadingHTTPServer | None = None
    _thread: threading.Thread | None = None

    def add(self, repo: StubRepo) -> StubRepo:
        self.repos[repo.repo_id] = repo
        return repo

    @property
    def url(self) -> str:
        assert self._server is not None, "start() the stub first"
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> HubStub:
        stub = self

        class Handler(_Handler):
            hub = stub

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="hub-stub",
                                        daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving, kept-alive connections included (a client's pool would reach a
        stopped stub through them otherwise)."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            for conn in list(self._connections):
                with contextlib.suppress(OSError):
                    conn.shutdown(socket.SHUT_RDWR)
            assert self._thread is not None
            self._thread.join(10)
            self._server = None

    def __enter__(self) -> HubStub:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def downloads(self) -> list[str]:
        """The files fetched with GET so far (repo/file)."""
        return [path.split("/resolve/", 1)[0].lstrip("/") + "/" + path.split("/", 5)[-1]
                for method, path in self.requests if method == "GET" and "/resolve/" in path]


def _etag(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class _Handler(BaseHTTPRequestHandler):
    hub: HubStub
    protocol_version = "HTTP/1.1"

    def setup(self) -> None:
        super().setup()
        self.hub._connections.add(self.connection)

    def finish(self) -> None:
        self.hub._connections.discard(self.connection)
        with contextlib.suppress(OSError):
            super().finish()

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base's name
        pass  # quiet: the tests read hub.requests instead

    def do_HEAD(self) -> None:  # noqa: N802 - http.server's naming
        self._route(head=True)

    def do_GET(self) -> None:  # noqa: N802
        self._route(head=False)

    def _route(self, head: bool) -> None:
        path = unquote(urlsplit(self.path).path)
        self.hub.requests.append(("HEAD" if head else "GET", path))
        parts = [p for p in path.split("/") if p]
        if parts[:2] == ["api", "models"] and len(parts) >= 4:
            repo_id, rest = "/".join(parts[2:4]), parts[4:]
            repo = self._repo(repo_id)
            if repo is None:
                return
            if not rest or rest[0] == "revision":
                if rest and not self._revision_ok(repo, "/".join(rest[1:])):
                    return
                return self._json(self._info(repo))
            if rest[0] == "tree" and len(rest) >= 2:
                if not self._revision_ok(repo, rest[1]):
                    return
                return self._json(self._tree(repo))
        if len(parts) >= 5 and parts[2] == "resolve":
            repo = self._repo("/".join(parts[:2]))
            if repo is None or not self._revision_ok(repo, parts[3]):
                return
            return self._file(repo, "/".join(parts[4:]), head)
        self._error(404, "EntryNotFound", "no such endpoint")

    def _repo(self, repo_id: str) -> StubRepo | None:
        repo = self.hub.repos.get(repo_id)
        if repo is None:
            self._error(404, "RepoNotFound", "Repository not found")
        return repo

    def _revision_ok(self, repo: StubRepo, revision: str) -> bool:
        if revision in ("main", repo.commit):
            return True
        self._error(404, "RevisionNotFound", f"Invalid rev id: {revision}")
        return False

    def _info(self, repo: StubRepo) -> dict[str, Any]:
        return {"id": repo.repo_id, "modelId": repo.repo_id, "sha": repo.commit,
                "private": False, "gated": "manual" if repo.gated else False,
                "disabled": False, "tags": [],
                "siblings": [{"rfilename": name} for name in sorted(repo.files)]}

    def _tree(self, repo: StubRepo) -> list[dict[str, Any]]:
        out = []
        for name, data in sorted(repo.files.items()):
            entry: dict[str, Any] = {"type": "file", "path": name, "size": len(data),
                                     "oid": hashlib.sha1(data).hexdigest()}
            if name.endswith(LFS_SUFFIXES):
                entry["lfs"] = {"oid": _etag(data), "size": len(data), "pointerSize": 134}
            out.append(entry)
        return out

    def _file(self, repo: StubRepo, name: str, head: bool) -> None:
        if repo.gated and self.headers.get("Authorization") != f"Bearer {repo.token}":
            return self._error(401, "GatedRepo", "Access to model is restricted")
        data = repo.files.get(name)
        if data is None:
            return self._error(404, "EntryNotFound", f"{name} does not exist")
        self.send_response(200)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("ETag", f'"{_etag(data)}"')
        self.send_header("X-Repo-Commit", repo.commit)
        if name.endswith(LFS_SUFFIXES):
            self.send_header("X-Linked-Etag", f'"{_etag(data)}"')
            self.send_header("X-Linked-Size", str(len(data)))
        self.end_headers()
        if not head:
            self.wfile.write(data)

    def _json(self, body: Any) -> None:
        raw = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(raw)

    def _error(self, status: int, code: str, message: str) -> None:
        raw = json.dumps({"error": message}).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("X-Error-Code", code)
        self.send_header("X-Error-Message", message)
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(raw)


__all__ = ["HubStub", "StubRepo", "repo_from_dir"]
