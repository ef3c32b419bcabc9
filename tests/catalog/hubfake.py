"""A fake Hugging Face Hub on 127.0.0.1: the `/{repo}/resolve/{revision}/{file}` endpoint hf_hub_download uses,
with the headers huggingface_hub checks (X-Repo-Commit, ETag, Content-Length) and the X-Error-Code answers it
maps to RepositoryNotFoundError, GatedRepoError, RevisionNotFoundError and EntryNotFoundError."""

from __future__ import annotations

import hashlib
import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote

CONFIGS = Path(__file__).parent / "hub_configs"
DRAFTERS = Path(__file__).parent / "hub_drafters"
TOKEN = "hf_fake_token_for_tests"


@dataclass
class Repo:
    files: dict[str, bytes]
    commit: str
    refs: dict[str, str] = field(default_factory=dict)  # branch or tag -> commit (main is always there)
    gated: bool = False


def fixture_repos(root: Path = CONFIGS) -> dict[str, Repo]:
    """Every config copy under hub_configs/ (or ``root``), served as repository org/name from folder org--name."""
    repos = {}
    for folder in sorted(p for p in root.iterdir() if p.is_dir()):
        repo_id = folder.name.replace("--", "/", 1)
        files = {f.name: f.read_bytes() for f in folder.iterdir() if f.is_file()}
        repos[repo_id] = Repo(files, hashlib.sha1(repo_id.encode()).hexdigest())
    return repos


def drafter_repos() -> dict[str, Repo]:
    """The drafter config copies under hub_drafters/ (hub_drafters/SOURCES.md)."""
    return fixture_repos(DRAFTERS)


def _base_models(repo: Repo) -> list[str]:
    """The base_model entries of a repository's model card front matter (what the Hub turns into tags)."""
    card = repo.files.get("README.md", b"").decode("utf-8", "replace").split("---")
    if len(card) < 3:
        return []
    out, key = [], ""
    for line in card[1].splitlines():
        if line.startswith("- ") and key == "base_model":
            out.append(line[2:].strip())
        elif ":" in line:
            key, _, value = line.partition(":")
            key = key.strip()
            if key == "base_model" and value.strip():
                out.append(value.strip())
    return out


class FakeHub:
    def __init__(self, repos: dict[str, Repo]) -> None:
        self.repos = repos
        self.requests: list[tuple[str, str]] = []
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def do_HEAD(self) -> None:  # noqa: N802 - the stdlib's handler naming
                hub.answer(self, body=False)

            def do_GET(self) -> None:  # noqa: N802
                hub.answer(self, body=True)

            def log_message(self, *args) -> None:  # keep test output quiet
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    def __enter__(self) -> FakeHub:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()

    def answer(self, h: BaseHTTPRequestHandler, body: bool) -> None:
        self.requests.append((h.command, h.path))
        if h.path.startswith("/api/models?") or h.path == "/api/models":
            return self._list(h, body)
        parts = h.path.split("?")[0].split("/")
        # /{org}/{name}/resolve/{revision}/{filename}
        if len(parts) < 6 or parts[3] != "resolve":
            return self._error(h, 404, "RepoNotFound", "Repository not found")
        repo_id, revision, filename = f"{parts[1]}/{parts[2]}", unquote(parts[4]), unquote("/".join(parts[5:]))
        repo = self.repos.get(repo_id)
        if repo is None:
            return self._error(h, 401, "RepoNotFound", "Repository not found")
        if repo.gated and h.headers.get("authorization") != f"Bearer {TOKEN}":
            return self._error(h, 403, "GatedRepo", "Access to model is restricted.")
        commit = repo.refs.get(revision) or (repo.commit if revision in ("main", repo.commit) else None)
        if commit is None:
            return self._error(h, 404, "RevisionNotFound", "Invalid rev id")
        data = repo.files.get(filename)
        if data is None:
            return self._error(h, 404, "EntryNotFound", "Entry not found", commit)
        h.send_response(200)
        h.send_header("X-Repo-Commit", commit)
        h.send_header("ETag", f'"{hashlib.sha1(data).hexdigest()}"')
        h.send_header("Content-Length", str(len(data)))
        h.send_header("Content-Type", "application/json")
        h.end_headers()
        if body:
            h.wfile.write(data)

    def _list(self, h: BaseHTTPRequestHandler, body: bool) -> None:
        """GET /api/models with `search` (substring of the id) and `filter` (tags; base_model:ID from model cards),
        as HfApi.list_models asks it; one page, no Link header."""
        from urllib.parse import parse_qs, urlsplit

        query = parse_qs(urlsplit(h.path).query)
        search = (query.get("search") or [""])[0].lower()
        filters = query.get("filter") or []
        hits = []
        for repo_id, repo in sorted(self.repos.items()):
            tags = [f"base_model:{b}" for b in _base_models(repo)]
            if search and search not in repo_id.lower():
                continue
            if any(f not in tags for f in filters):
                continue
            hits.append({"_id": repo.commit[:24], "id": repo_id, "modelId": repo_id, "tags": tags})
        data = json.dumps(hits).encode()
        h.send_response(200)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(data)))
        h.end_headers()
        if body:
            h.wfile.write(data)

    @staticmethod
    def _error(h: BaseHTTPRequestHandler, status: int, code: str, message: str, commit: str | None = None) -> None:
        h.send_response(status)
        h.send_header("X-Error-Code", code)
        h.send_header("X-Error-Message", message)
        if commit:
            h.send_header("X-Repo-Commit", commit)
        h.send_header("Content-Length", "0")
        h.end_headers()
