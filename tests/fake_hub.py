"""A Hugging Face Hub on 127.0.0.1 for the download tests, and a hand-built Hub cache for the offline ones.

`FakeHub` answers the requests huggingface_hub 2.4 makes for ``hf_hub_download``, ``snapshot_download`` and
``HfApi.get_paths_info`` (the resolve HEAD/GET with ``X-Repo-Commit``, ``X-Linked-Etag``, ``X-Linked-Size``;
``/api/{models,datasets}/<repo>/revision/<rev>``; ``.../tree/<rev>``; ``.../paths-info/<rev>``), with faults on
demand: ``truncate`` sends half the body and closes the connection, ``corrupt`` sends bytes of the right length but
the wrong content. Every request is logged in ``requests``.

    with FakeHub({("datasets", "org/data"): {"file.txt": b"..."}}) as hub:
        hf_hub_download("org/data", "file.txt", repo_type="dataset", endpoint=hub.url)
"""

import hashlib
import json
import re
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlparse

COMMIT = "c0ffee" * 6 + "c0ff"  # 40 hex characters

LFS_THRESHOLD = 64  # bytes: larger files are served as LFS files (etag = sha256), smaller ones as git blobs


def git_blob_id(data: bytes) -> str:
    return hashlib.sha1(f"blob {len(data)}\0".encode() + data).hexdigest()


def etag(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest() if len(data) > LFS_THRESHOLD else git_blob_id(data)


class FakeHub:
    """``repos``: ``{(kind, "org/name"): {path: bytes}}`` with ``kind`` ``"models"`` or ``"datasets"``."""

    def __init__(self, repos: dict, fault: str = "none"):
        self.repos = repos
        self.fault = fault
        self.requests = []
        hub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_HEAD(self):
                hub.requests.append(("HEAD", self.path))
                hub.resolve(self, body=False)

            def do_GET(self):
                hub.requests.append(("GET", self.path))
                if self.path.startswith("/api/"):
                    hub.api(self)
                else:
                    hub.resolve(self, body=True)

            def do_POST(self):
                hub.requests.append(("POST", self.path))
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                hub.api(self)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self):
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()

    # ------------------------------------------------------------------------------------------------ routes
    def find(self, kind: str, repo: str):
        return self.repos.get((kind, repo))

    def resolve(self, handler, body: bool) -> None:
        match = re.fullmatch(r"/(datasets/)?([^/]+/[^/]+)/resolve/([^/]+)/(.+)", urlparse(handler.path).path)
        files = self.find("datasets" if match and match.group(1) else "models", match.group(2)) if match else None
        path = unquote(match.group(4)) if match else None
        if files is None or path not in files:
            return self.send(handler, 404, b"", {"X-Error-Code": "EntryNotFound" if files else "RepoNotFound",
                                                 "X-Repo-Commit": COMMIT})
        data = files[path]
        headers = {"X-Repo-Commit": COMMIT, "ETag": f'"{etag(data)}"', "Content-Length": str(len(data))}
        if len(data) > LFS_THRESHOLD:
            headers.update({"X-Linked-Etag": f'"{etag(data)}"', "X-Linked-Size": str(len(data))})
        if not body:
            return self.send(handler, 200, b"", headers)
        if self.fault == "corrupt":
            data = bytes(len(data))  # right length, wrong content
        if self.fault == "truncate":
            self.send_headers(handler, 200, headers)
            handler.wfile.write(data[: len(data) // 2])
            handler.wfile.flush()
            handler.connection.shutdown(socket.SHUT_RDWR)
            handler.close_connection = True
            return None
        return self.send(handler, 200, data, headers)

    def api(self, handler) -> None:
        route = r"/api/(models|datasets)/([^/]+/[^/]+)/(revision|tree|paths-info)/([^/?]+).*"
        match = re.fullmatch(route, handler.path)
        files = self.find(match.group(1), match.group(2)) if match else None
        if files is None:
            return self.send(handler, 404, b"{}", {"X-Error-Code": "RepoNotFound"})
        entries = [self.entry(path, data) for path, data in sorted(files.items())]
        if match.group(3) == "revision":
            payload = {"id": match.group(2), "sha": COMMIT, "siblings": [{"rfilename": path} for path in files]}
        else:
            payload = entries
        return self.send(handler, 200, json.dumps(payload).encode(), {"Content-Type": "application/json"})

    @staticmethod
    def entry(path: str, data: bytes) -> dict:
        entry = {"type": "file", "path": path, "size": len(data), "oid": git_blob_id(data)}
        if len(data) > LFS_THRESHOLD:
            entry["lfs"] = {"oid": hashlib.sha256(data).hexdigest(), "size": len(data), "pointerSize": 130}
        return entry

    @staticmethod
    def send_headers(handler, status: int, headers: dict) -> None:
        handler.send_response(status)
        for key, value in headers.items():
            handler.send_header(key, value)
        handler.end_headers()

    def send(self, handler, status: int, data: bytes, headers: dict) -> None:
        self.send_headers(handler, status, {**headers, "Content-Length": headers.get("Content-Length", str(len(data)))})
        if data:
            handler.wfile.write(data)


def build_hub_cache(cache: Path, repo_id: str, folder: Path, kind: str = "models") -> Path:
    """Copy ``folder``'s files into a Hub-cache layout (``<kind>--org--name/refs/main`` + ``snapshots/<commit>``), as
    ``from_pretrained`` leaves it; returns the snapshot folder."""
    repo = cache / f"{kind}--{repo_id.replace('/', '--')}"
    snapshot = repo / "snapshots" / COMMIT
    for path in Path(folder).rglob("*"):
        if path.is_file():
            target = snapshot / path.relative_to(folder)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(path.read_bytes())
    (repo / "refs").mkdir(parents=True, exist_ok=True)
    (repo / "refs" / "main").write_text(COMMIT)  # no trailing newline: huggingface_hub reads the ref verbatim
    return snapshot
