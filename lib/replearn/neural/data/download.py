"""Fetching and unpacking the official CIFAR archives: a file's digest (:func:`file_digest`),
a download that is md5-checked, retried and written atomically (:func:`download_archive`), and
an extraction that refuses unsafe members and replaces the folder only once complete
(:func:`extract_archive`)."""

from __future__ import annotations

import hashlib
import http.client
import os
import tarfile
import tempfile
import time
import urllib.request
from pathlib import Path

from replearn.checks import check_int, check_nonnegative, check_positive

__all__ = ["MAX_TIMEOUT", "check_download_args", "download_archive", "extract_archive", "file_digest"]


def file_digest(path: Path, algorithm: str = "sha256") -> str:
    """Hex digest of a file (``hashlib`` algorithm name: ``"sha256"``, ``"md5"``), read in 1 MiB chunks."""
    digest = hashlib.new(algorithm)
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _fetch_once(url: str, tmp, timeout: float) -> str:
    """Stream ``url`` into the open file ``tmp``; return the md5; raise on a short body."""
    digest, received = hashlib.md5(), 0
    with urllib.request.urlopen(url, timeout=timeout) as response:
        expected = response.headers.get("Content-Length")
        for chunk in iter(lambda: response.read(1 << 16), b""):
            tmp.write(chunk)
            digest.update(chunk)
            received += len(chunk)
    if expected is not None and received != int(expected):
        raise http.client.IncompleteRead(b"", int(expected) - received)
    return digest.hexdigest()


MAX_TIMEOUT = 3600.0
"""Largest ``timeout`` (seconds without data from the server before a try fails) and
``retry_delay`` of a download: a stalled connection must fail within an hour, not hang."""


def check_download_args(retries, retry_delay, timeout) -> None:
    """``ValueError`` unless ``retries`` is in 1..100, ``retry_delay >= 0`` and ``timeout > 0``,
    both at most :data:`MAX_TIMEOUT`."""
    check_int(retries, "retries", 1, 100)
    check_nonnegative(retry_delay, "retry_delay")
    check_positive(timeout, "timeout")
    for name, value in (("retry_delay", retry_delay), ("timeout", timeout)):
        if value > MAX_TIMEOUT:
            raise ValueError(f"{name} must be at most MAX_TIMEOUT = {MAX_TIMEOUT:g} s (a stalled download must "
                             f"fail, not hang), got {value!r}")


def download_archive(url: str, dest: str | os.PathLike, md5: str, *, retries: int = 3,
                     retry_delay: float = 1.0, timeout: float = 60.0) -> Path:
    """Download ``url`` to ``dest`` and check its md5; return ``dest``.

    An existing ``dest`` with the right md5 is reused. The body is streamed into a temporary
    file next to ``dest`` and renamed into place (atomically) only once complete and verified.
    A dropped or short connection, or ``timeout`` seconds without data, is retried up to
    ``retries`` times in all (1..100; waiting ``retry_delay * attempt`` seconds between tries;
    ``timeout > 0`` and ``retry_delay >= 0``, both at most :data:`MAX_TIMEOUT`), then
    ``ConnectionError`` is raised; an md5
    mismatch raises ``ValueError``. In every failure case no partial file is left behind.
    """
    dest = Path(dest)
    check_download_args(retries, retry_delay, timeout)
    if dest.is_file() and file_digest(dest, "md5") == md5:
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    last = None
    for attempt in range(1, retries + 1):
        fd, tmp_name = tempfile.mkstemp(dir=dest.parent, prefix=f".{dest.name}.", suffix=".part")
        try:
            with os.fdopen(fd, "wb") as tmp:
                got = _fetch_once(url, tmp, timeout)
            if got != md5:
                raise ValueError(f"md5 of {url} is {got}, expected {md5}: the download is corrupt or "
                                 f"not the official archive; nothing was kept, try again later")
            os.replace(tmp_name, dest)
            return dest
        except (OSError, http.client.HTTPException) as exc:
            last = exc
        finally:
            if os.path.exists(tmp_name):
                os.unlink(tmp_name)
        if attempt < retries:
            time.sleep(retry_delay * attempt)
    raise ConnectionError(f"downloading {url} failed {retries} times (last error: {last!r}); check the "
                          f"connection or set REPLEARN_DATA to a folder holding the CIFAR subsets") from last


def extract_archive(archive: str | os.PathLike, root: str | os.PathLike, folder: str) -> Path:
    """Extract the tar.gz ``archive`` into ``root`` and return ``root / folder``.

    Refuses (``ValueError``) members that are links, devices or would land outside ``root``, and
    archives without ``folder``. Members are extracted with tarfile's ``"data"`` filter: no
    setuid/setgid/sticky bits, no group/other write permission, and files owned by the caller,
    whatever uids the archive records. Extraction goes to a temporary directory first, so an
    interrupted or refused extraction leaves nothing in ``root``; an existing ``root / folder``
    is replaced by the fresh copy only once that is complete, so extracting twice gives the same
    result as once (and repairs a damaged folder).
    """
    root = Path(root).resolve()
    with tempfile.TemporaryDirectory(dir=root, prefix=".extract-") as tmp:
        try:
            with tarfile.open(archive, "r:gz") as tar:
                members = tar.getmembers()
                for m in members:
                    target = (Path(tmp) / m.name).resolve()
                    if not (m.isfile() or m.isdir()) or not target.is_relative_to(Path(tmp).resolve()):
                        raise ValueError(f"{archive}: unsafe member {m.name!r} (link, device or path "
                                         f"outside the target folder); refusing to extract")
                tar.extractall(tmp, members=members, filter="data")
        except (tarfile.TarError, EOFError, OSError) as exc:
            raise ValueError(f"{archive} is not a readable tar.gz archive ({exc}); delete it and "
                             f"download again") from exc
        fresh, dest = Path(tmp) / folder, root / folder
        if not fresh.is_dir():
            raise ValueError(f"{archive} does not contain the folder {folder}/; is it the right archive?")
        if dest.exists() or dest.is_symlink():
            os.replace(dest, Path(tmp) / ".previous")  # removed with the temporary directory
        os.replace(fresh, dest)
    return root / folder
