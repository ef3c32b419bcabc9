"""Files of a Hugging Face Hub model repository, fetched the way the serving stacks fetch them: through
huggingface_hub, its cache, HF_TOKEN, HF_HUB_OFFLINE, HF_ENDPOINT and revisions (branch, tag or commit).

huggingface_hub is imported inside the functions that go online, so that `import specplug.cli` stays free of it;
a cached file at a pinned commit, or any cached file offline, is read without importing more than its constants.
Every failure is a CatalogError that says what would work instead.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from specplug.errors import CatalogError

_COMMIT = re.compile(r"^[0-9a-f]{40}$")
_REPO_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")
_TRUE = {"1", "ON", "YES", "TRUE"}


@dataclass(frozen=True)
class HubFile:
    path: Path
    commit: str


@dataclass(frozen=True)
class HubSettings:
    """Where and how the Hub is reached, read from the environment at each call as huggingface_hub reads it."""

    endpoint: str
    cache_dir: Path
    offline: bool

    @property
    def where(self) -> str:
        return "the Hugging Face Hub" if self.endpoint.rstrip("/") == "https://huggingface.co" else self.endpoint


def settings() -> HubSettings:
    from huggingface_hub import constants  # a few milliseconds: no HTTP client behind it

    cache = os.environ.get("HF_HUB_CACHE") or (os.path.join(os.environ["HF_HOME"], "hub") if os.environ.get("HF_HOME") else "")
    offline = os.environ.get("HF_HUB_OFFLINE")
    return HubSettings(
        endpoint=(os.environ.get("HF_ENDPOINT") or constants.ENDPOINT).rstrip("/"),
        cache_dir=Path(cache or constants.HF_HUB_CACHE).expanduser(),
        offline=offline.upper() in _TRUE if offline is not None else bool(constants.HF_HUB_OFFLINE),
    )


def split_revision(name: str) -> tuple[str, str | None]:
    """'org/model@rev' -> ('org/model', 'rev'); a name without '@' has no revision."""
    repo, sep, rev = name.partition("@")
    return (repo, rev or None) if sep else (name, None)


def is_repo_id(name: str) -> bool:
    return bool(_REPO_ID.match(name))


def named_revision(name: str) -> str | None:
    """The revision a Hub id names ('org/name@v1' -> 'v1'); None for a plain id, an alias or a local path."""
    repo, at = split_revision(name.strip())
    return at if at and is_repo_id(repo) else None


def cached(s: HubSettings, repo: str, filename: str, revision: str) -> HubFile | None | bool:
    """The cached copy of ``filename`` at ``revision`` (a HubFile), False when the cache records that the repo lacks
    it there, None when the cache cannot tell. The layout is huggingface_hub's: models--org--name/{refs,snapshots}."""
    folder = s.cache_dir / f"models--{repo.replace('/', '--')}"
    commit = revision if _COMMIT.match(revision) else _read(folder / "refs" / revision)
    if not commit:
        return None
    path = folder / "snapshots" / commit / filename
    if path.is_file():
        return HubFile(path, commit)
    return False if (folder / ".no_exist" / commit / filename).exists() else None


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8").strip()
    except OSError:
        return ""


def fetch(repo: str, filename: str, revision: str | None = None, *, optional: bool = False) -> HubFile | None:
    """``filename`` of model repo ``repo`` at ``revision`` (default: main), from the cache or the Hub. An
    ``optional`` file the repo lacks gives None; a missing required file, and every other failure, a CatalogError."""
    s = settings()
    rev = revision or "main"
    hit = cached(s, repo, filename, rev) if (s.offline or _COMMIT.match(rev)) else None
    if isinstance(hit, HubFile):
        return hit
    if hit is False and optional:
        return None
    if s.offline:
        if optional:
            return None
        raise CatalogError(
            f"HF_HUB_OFFLINE is set and {filename} of {repo}{_at(revision)} is not in the Hugging Face cache ({s.cache_dir}).",
            f"Unset HF_HUB_OFFLINE to download it from {s.where}, point HF_HOME / HF_HUB_CACHE at a cache that holds it, "
            "or pass a local model folder or a catalog alias (specplug models search TEXT).",
        )
    return _download(s, repo, filename, rev, optional)


def _download(s: HubSettings, repo: str, filename: str, rev: str, optional: bool) -> HubFile | None:
    from huggingface_hub import get_hf_file_metadata, hf_hub_download, hf_hub_url

    try:
        if not isinstance(cached(s, repo, filename, rev), HubFile):
            # Nothing cached to fall back on: one HEAD without retries first, so that an unreachable Hub fails in
            # milliseconds instead of after hf_hub_download's backoff (which it skips when it has a cached copy).
            get_hf_file_metadata(hf_hub_url(repo, filename, revision=rev, endpoint=s.endpoint), timeout=_timeout())
        path = hf_hub_download(repo, filename, revision=rev, cache_dir=str(s.cache_dir), endpoint=s.endpoint,
                               etag_timeout=_timeout())
    except Exception as exc:  # huggingface_hub and its HTTP client raise many types; each is mapped below
        error = hub_error(exc, s, repo, filename, rev)
        if error is None and optional:
            _remember_absent(s, repo, filename, rev)
            return None
        if isinstance(error, _Unreachable) and optional:
            return None  # optional files only refine the facts config.json gives
        raise error or _missing_file(s, repo, filename, rev) from None
    return HubFile(Path(path), _snapshot_commit(Path(path), rev))


def _snapshot_commit(path: Path, rev: str) -> str:
    """The commit of a cached file: the folder under snapshots/ that holds it."""
    parts = path.parts
    after = parts[parts.index("snapshots") + 1] if "snapshots" in parts[:-1] else ""
    return after if _COMMIT.match(after) else rev


def _remember_absent(s: HubSettings, repo: str, filename: str, rev: str) -> None:
    """Let huggingface_hub note in its cache that the repository lacks ``filename``, so later runs ask no more."""
    from huggingface_hub import hf_hub_download

    try:
        hf_hub_download(repo, filename, revision=rev, cache_dir=str(s.cache_dir), endpoint=s.endpoint, etag_timeout=_timeout())
    except Exception:  # the expected EntryNotFoundError, after the note is written; nothing else matters here
        return


def timeout() -> float:
    """Seconds to wait for the Hub (HF_HUB_ETAG_TIMEOUT, as huggingface_hub reads it; default 10)."""
    return _timeout()


def _timeout() -> float:
    try:
        return float(os.environ.get("HF_HUB_ETAG_TIMEOUT") or 10)
    except ValueError:
        return 10.0


def _at(revision: str | None) -> str:
    return f" at revision '{revision}'" if revision and revision != "main" else ""


class _Unreachable(CatalogError):
    """The Hub could not be reached (no network, a wrong HF_ENDPOINT, a proxy)."""


def _names(exc: BaseException) -> set[str]:
    return {c.__name__ for c in type(exc).__mro__}


def _missing_file(s: HubSettings, repo: str, filename: str, rev: str) -> CatalogError:
    if filename == "config.json":
        return CatalogError(
            f"{repo}{_at(rev)} on {s.where} has no config.json, so it is not a transformers model repository "
            "(a GGUF-only or adapter repository, perhaps).",
            "Pass a local folder or .gguf file of the model, the repository of the full model, or a catalog alias "
            "(specplug models search TEXT).",
        )
    return CatalogError(f"{repo}{_at(rev)} on {s.where} has no {filename}.",
                        "Pass a local folder of the model or a catalog alias (specplug models search TEXT).")


def hub_error(exc: BaseException, s: HubSettings, repo: str, filename: str, rev: str) -> CatalogError | None:
    """The CatalogError for a huggingface_hub failure; None for 'the file does not exist in this repository'."""
    names = _names(exc)
    local = "or pass a local model folder or a catalog alias (specplug models search TEXT)"
    if "GatedRepoError" in names:
        token = "the HF_TOKEN set here has no access to it" if os.environ.get("HF_TOKEN") else "no HF_TOKEN is set"
        return CatalogError(
            f"{repo} is a gated repository on {s.where} and {token}.",
            f"Accept its licence on the model's page, then set HF_TOKEN to a read token of that account; {local}.",
        )
    if "RevisionNotFoundError" in names:
        return CatalogError(
            f"{repo} has no revision '{rev}' on {s.where}.",
            f"Name a branch, tag or commit that exists ({repo}@main), or leave the revision out; {local}.",
        )
    if "RemoteEntryNotFoundError" in names or ("EntryNotFoundError" in names and "LocalEntryNotFoundError" not in names):
        return None
    if "RepositoryNotFoundError" in names:
        return CatalogError(
            f"No model repository '{repo}' on {s.where} (or it is private and HF_TOKEN gives no access).",
            f"Check the id, set HF_TOKEN for a private repository, {local}.",
        )
    if "HFValidationError" in names:
        return CatalogError(f"'{repo}' is not a valid Hugging Face model id.", "Use the form org/name, " + local + ".")
    if names & {"OfflineModeIsEnabled", "LocalEntryNotFoundError", "ConnectError", "ConnectTimeout", "ReadTimeout",
                "TimeoutException", "NetworkError", "ProxyError", "ConnectionError", "RemoteProtocolError"}:
        endpoint = "" if s.where == s.endpoint else f" ({s.endpoint})"
        return _Unreachable(
            f"Cannot reach {s.where}{endpoint} to read {filename} of {repo}, and the Hugging Face cache "
            f"({s.cache_dir}) holds no copy.",
            f"Check the network, proxy or HF_ENDPOINT; or, with a cached copy, set HF_HUB_OFFLINE=1; {local}.",
        )
    status = getattr(getattr(exc, "response", None), "status_code", None)
    if status is not None:
        return CatalogError(f"{s.where} answered HTTP {status} for {filename} of {repo}.",
                            f"Try again later, check HF_ENDPOINT and HF_TOKEN; {local}.")
    return CatalogError(f"Reading {filename} of {repo} from {s.where} failed: {type(exc).__name__}: {exc}.",
                        f"Check the network and HF_ENDPOINT; {local}.")
