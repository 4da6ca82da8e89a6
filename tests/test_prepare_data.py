"""Tests of scripts/prepare_data.py (``make data``), with tiny official-format archives served by a
local HTTP server on 127.0.0.1 (as the download tests in test_data.py), or with no server at all."""

import hashlib
import http.server
import io
import os
import pickle
import re
import subprocess
import sys
import tarfile
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from replearn.neural import data

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
import prepare_data as P  # noqa: E402

SHARED = Path(os.environ.get("REPLEARN_DATA", "") or ROOT.parent / "shared" / "data")


def _official(name, n_train=60, n_test=20, seed=0):
    """CHW uint8 arrays and the tar.gz bytes of a tiny archive in the official layout."""
    rng = np.random.default_rng(seed)
    k = 10 if name == "cifar10" else 100
    arr = dict(x_train=rng.integers(0, 256, (n_train, 3, 32, 32), dtype=np.uint8),
               y_train=rng.integers(0, k, n_train), x_test=rng.integers(0, 256, (n_test, 3, 32, 32), dtype=np.uint8),
               y_test=rng.integers(0, k, n_test))

    def batch(x, **labels):
        return pickle.dumps({b"data": x.reshape(len(x), 3072),
                             **{key.encode(): [int(v) for v in y] for key, y in labels.items()}}, protocol=2)

    names = [f"class{i}".encode() for i in range(k)]
    if name == "cifar10":
        d = "cifar-10-batches-py/"
        files = {f"{d}data_batch_{i + 1}": batch(arr["x_train"][c], labels=arr["y_train"][c])
                 for i, c in enumerate(np.array_split(np.arange(n_train), 5))}
        files[d + "test_batch"] = batch(arr["x_test"], labels=arr["y_test"])
        files[d + "batches.meta"] = pickle.dumps({b"label_names": names}, protocol=2)
    else:
        d = "cifar-100-python/"
        files = {d + s: batch(arr[f"x_{s}"], fine_labels=arr[f"y_{s}"], coarse_labels=arr[f"y_{s}"] // 5)
                 for s in ("train", "test")}
        files[d + "meta"] = pickle.dumps({b"fine_label_names": names,
                                          b"coarse_label_names": [b"super%d" % i for i in range(20)]}, protocol=2)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for path, blob in files.items():
            info = tarfile.TarInfo(path)
            info.size = len(blob)
            tar.addfile(info, io.BytesIO(blob))
    return arr, buf.getvalue()


INDEX = {n: dict(train=np.arange(0, 60, 3), test=np.arange(1, 20, 2)) for n in P.NAMES}


@pytest.fixture(scope="module")
def archives():
    return {n: _official(n, seed=i) for i, n in enumerate(P.NAMES)}


class _Server:
    """Serves ``{path: bytes}`` on 127.0.0.1 and counts the requests."""

    def __init__(self, files):
        self.files, self.requests = files, 0
        owner = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                owner.requests += 1
                blob = owner.files.get(self.path)
                if blob is None:
                    self.send_error(404)
                    return
                self.send_response(200)
                self.send_header("Content-Length", str(len(blob)))
                self.end_headers()
                self.wfile.write(blob)

            def log_message(self, *args):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base = f"http://127.0.0.1:{self.httpd.server_address[1]}/mirror/"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server(archives):
    srv = _Server({f"/mirror/{P.SPECS[n]['archive']}": archives[n][1] for n in P.NAMES})
    yield srv
    srv.close()


def _sources(server, archives):
    return {n: (server.base + P.SPECS[n]["archive"], hashlib.md5(archives[n][1]).hexdigest()) for n in P.NAMES}


def _closed_port_base():
    """A local URL nothing listens on (a port that was just free)."""
    srv = http.server.HTTPServer(("127.0.0.1", 0), http.server.BaseHTTPRequestHandler)
    port = srv.server_address[1]
    srv.server_close()
    return f"http://127.0.0.1:{port}/"


def test_missing_subsets_are_downloaded_rebuilt_and_verified(tmp_path, server, archives):
    root, logs = tmp_path / "data", []
    sources = _sources(server, archives)
    P.prepare(root, root / "archives", sources, sums={}, digests={}, index=INDEX, log=logs.append)
    assert server.requests == 2 + 2  # one probe and one download per archive
    # only the subsets (and their checksums) in the data directory: no extracted archive there
    assert sorted(p.name for p in root.iterdir()) == ["SHA256SUMS", "archives", "cifar100_subset.npz",
                                                      "cifar10_subset.npz"]
    assert sorted(p.name for p in (root / "archives").iterdir()) == sorted(P.SPECS[n]["archive"] for n in P.NAMES)
    for name in P.NAMES:
        arr, path = archives[name][0], root / P.SPECS[name]["subset"]
        d = data.load_cifar(name, root=root)
        assert d.source == "subset"
        for split in ("train", "test"):
            ix = INDEX[name][split]
            assert np.array_equal(getattr(d, f"x_{split}").numpy(), arr[f"x_{split}"][ix])
            assert np.array_equal(getattr(d, f"y_{split}").numpy(), arr[f"y_{split}"][ix])
        # the shipped member order, and SHA256SUMS records the bytes written
        import zipfile
        assert [i.filename[:-4] for i in zipfile.ZipFile(path).infolist()] == list(P.MEMBER_ORDER[name])
        assert P.read_sums(root / "SHA256SUMS")[path.name] == P.sha256(path)
    assert any("differs from the recorded one" in line for line in logs)  # sums={}: nothing recorded
    # a second run finds the subsets, verifies them by their recorded SHA-256 and asks no server
    sums, logs = P.read_sums(root / "SHA256SUMS"), []
    P.prepare(root, root / "archives", sources, sums=sums, digests={}, log=logs.append)
    assert server.requests == 4 and all(line.endswith("SHA-256 as recorded") for line in logs)


def test_recorded_checksums_are_enforced(tmp_path, server, archives):
    root = tmp_path / "data"
    sources = _sources(server, archives)
    # a content digest that does not match: refused, and no subset is written
    with pytest.raises(P.DataError, match="content digest"):
        P.prepare(root, root / "archives", sources, sums={}, digests={"cifar10": "0" * 64}, index=INDEX,
                  log=lambda m: None)
    assert not list(root.glob("*.npz")) and not (root / ".staging-subsets").exists()
    assert not (root / "archives" / "cifar-10-batches-py").exists()
    P.prepare(root, root / "archives", sources, sums={}, digests={}, index=INDEX, log=lambda m: None)
    arrays = {n: P.load_arrays(root / P.SPECS[n]["subset"]) for n in P.NAMES}
    digests = {n: data.content_digest(a) for n, a in arrays.items()}
    # recorded SHA-256 differs but the content digest matches (another zlib): accepted
    path = root / "cifar10_subset.npz"
    assert P.verify(path, "cifar10", {}, digests).startswith("content digest as recorded")
    # neither matches: refused, with what to do
    path.write_bytes(path.read_bytes()[:-10])
    with pytest.raises(P.DataError, match="not the subset the book was executed on"):
        P.prepare(root, root / "archives", sources, sums={}, digests=digests, log=lambda m: None)


def test_no_network_and_no_subsets_stops_at_once_naming_both_ways(tmp_path):
    root = tmp_path / "data"
    sources = P.official_sources(_closed_port_base())
    start = time.monotonic()
    with pytest.raises(P.DataError) as err:
        P.prepare(root, root / "archives", sources, sums={}, digests={}, log=lambda m: None)
    assert time.monotonic() - start < 5
    msg = str(err.value)
    assert "cannot be downloaded" in msg and str(root) in msg
    assert "make data" in msg and "REPLEARN_DATA" in msg and "cifar10_subset.npz" in msg
    assert not root.exists() or not list(root.iterdir())
    # the command line, standard library only (before the environment exists): one message, exit 1
    env = dict(os.environ, REPLEARN_DATA=str(root))
    start = time.monotonic()
    out = subprocess.run([sys.executable, "-S", str(ROOT / "scripts" / "prepare_data.py"), "--preflight",
                          "--mirror", sources["cifar10"][0].rsplit("/", 1)[0]],
                         capture_output=True, text=True, env=env, timeout=60)
    assert time.monotonic() - start < 10
    assert out.returncode == 1 and out.stdout == ""
    assert out.stderr.startswith("make data: No CIFAR data for the book") and "REPLEARN_DATA" in out.stderr


def test_preflight_passes_when_the_data_can_be_had(tmp_path, server, archives):
    root = tmp_path / "data"
    assert "will be rebuilt" in P.preflight(root, root / "archives", _sources(server, archives))
    root.mkdir()
    for n in P.NAMES:
        (root / P.SPECS[n]["subset"]).write_bytes(b"x")
    assert P.preflight(root, root / "archives", P.official_sources(_closed_port_base())).startswith("CIFAR subsets found")


def test_extracted_official_archive_in_the_data_directory_is_refused(tmp_path):
    (tmp_path / "cifar-10-batches-py").mkdir()
    with pytest.raises(P.DataError, match="full dataset"):
        P.preflight(tmp_path, tmp_path / "archives", P.official_sources())


def test_a_data_directory_that_is_a_file_is_called_a_file(tmp_path, monkeypatch):
    """REPLEARN_DATA naming a regular file, in the preflight (standard library only, as `make data`
    runs it) and in prepare: "is a file, not a directory", not "not in <file>" nor "rebuilds ... into
    <file>"; the file is left alone."""
    path = tmp_path / "data.txt"
    path.write_text("x")
    sources = P.official_sources(_closed_port_base())
    monkeypatch.setenv("REPLEARN_DATA", str(path))
    quiet = dict(sums={}, digests={}, log=lambda m: None)
    for call in (lambda: P.preflight(path, path / "archives", sources),
                 lambda: P.prepare(path, path / "archives", sources, **quiet)):
        with pytest.raises(P.DataError) as err:
            call()
        msg = str(err.value)
        assert msg.startswith(f"REPLEARN_DATA={path} is a file, not a directory: point REPLEARN_DATA (or "
                              f"--data) at the folder that holds cifar10_subset.npz and cifar100_subset.npz")
        assert f"not in {path}" not in msg and f"into {path}" not in msg
    monkeypatch.delenv("REPLEARN_DATA")
    with pytest.raises(P.DataError, match=r"^the data directory .* is a file, not a directory"):
        P.preflight(path, path / "archives", sources)
    env = dict(os.environ, REPLEARN_DATA=str(path))
    out = subprocess.run([sys.executable, "-S", str(ROOT / "scripts" / "prepare_data.py"), "--preflight",
                          "--mirror", sources["cifar10"][0].rsplit("/", 1)[0]],
                         capture_output=True, text=True, env=env, timeout=60)
    assert out.returncode == 1 and out.stdout == ""
    assert out.stderr.startswith(f"make data: REPLEARN_DATA={path} is a file, not a directory"), out.stderr
    assert path.read_text() == "x"
    # the subset file itself as the data directory: its folder is suggested
    subset = tmp_path / "cifar10_subset.npz"
    subset.write_bytes(b"x")
    own = rf"subset files itself: set REPLEARN_DATA={re.escape(str(tmp_path))} "
    with pytest.raises(P.DataError, match=own):
        P.preflight(subset, subset / "archives", sources)


def test_data_entries_of_the_wrong_kind_are_named(tmp_path):
    """A subset name that is a directory, an archives folder that is a file and an archive name
    that is a directory: each called what it is, not "missing" or "not in"."""
    sources = P.official_sources(_closed_port_base())
    root = tmp_path / "data"
    (root / "cifar100_subset.npz").mkdir(parents=True)
    quiet = dict(sums={}, digests={}, log=lambda m: None)
    for call in (lambda: P.preflight(root, root / "archives", sources),
                 lambda: P.prepare(root, root / "archives", sources, **quiet)):
        with pytest.raises(P.DataError, match=rf"^{re.escape(str(root))}/cifar100_subset.npz is a "
                                              rf"directory, expected the file cifar100_subset.npz "
                                              rf"\(the CIFAR-100 subset\)"):
            call()
    (root / "cifar100_subset.npz").rmdir()
    (tmp_path / "archives").write_text("")
    with pytest.raises(P.DataError, match=rf"^the archives folder {re.escape(str(tmp_path))}/archives is a "
                                          rf"file, not a directory"):
        P.preflight(root, tmp_path / "archives", sources)
    (root / "archives" / "cifar-10-python.tar.gz").mkdir(parents=True)
    with pytest.raises(P.DataError, match=r"cifar-10-python.tar.gz is a directory, expected the file "
                                          r"cifar-10-python.tar.gz \(the official archive\)"):
        P.preflight(root, root / "archives", sources)


def test_recorded_checksums_and_specs_agree_with_the_library():
    assert P.read_sums().keys() == {P.SPECS[n]["subset"] for n in P.NAMES}
    for name in P.NAMES:
        for key in ("subset", "archive", "folder", "md5", "size_mb", "title"):
            assert P.SPECS[name][key] == data.datasets.SPECS[name][key]
        assert P.official_sources()[name][0] == data.datasets.SPECS[name]["url"]


@pytest.mark.skipif(not (SHARED / "cifar10_subset.npz").is_file(), reason="the CIFAR subsets are not here")
def test_rewriting_the_shipped_subset_reproduces_its_bytes(tmp_path):
    """What make data writes from the content of the shipped CIFAR-10 subset is the shipped file."""
    arrays = P.load_arrays(SHARED / "cifar10_subset.npz")
    assert data.content_digest(arrays) == data.SUBSET_DIGESTS["cifar10"]
    P.write_npz(tmp_path / "cifar10_subset.npz", arrays, P.MEMBER_ORDER["cifar10"])
    assert P.sha256(tmp_path / "cifar10_subset.npz") == P.read_sums()["cifar10_subset.npz"]


def test_the_preflight_trusts_an_archive_only_with_its_checksum(tmp_path, archives):
    """An archive already in ARCHIVES spares the download only if its md5 is the official one: a
    0-byte (or truncated) archive offline fails the preflight at once, naming it."""
    root, offline = tmp_path / "data", _closed_port_base()
    sources = {n: (offline + P.SPECS[n]["archive"], hashlib.md5(archives[n][1]).hexdigest()) for n in P.NAMES}
    (root / "archives").mkdir(parents=True)
    for n in P.NAMES:
        (root / "archives" / P.SPECS[n]["archive"]).write_bytes(archives[n][1])
    assert "will be rebuilt" in P.preflight(root, root / "archives", sources)
    empty = root / "archives" / P.SPECS["cifar100"]["archive"]
    empty.write_bytes(b"")
    with pytest.raises(P.DataError, match="cannot be downloaded") as err:
        P.preflight(root, root / "archives", sources)
    assert f"{empty} (0 bytes)" in str(err.value) and "md5" in str(err.value)
    out = subprocess.run([sys.executable, "-S", str(ROOT / "scripts" / "prepare_data.py"), "--preflight",
                          "--data", str(root), "--mirror", offline], capture_output=True, text=True, timeout=60)
    # the command line checks against the official md5s, which the tiny archives do not have
    assert out.returncode == 1 and "not the official c58f30108f718f92721af3b95e74349a" in out.stderr


@pytest.mark.parametrize("value", ["-1", "nan", "0", "inf", "abc"])
def test_a_bad_probe_timeout_is_a_bad_option_not_a_missing_download(tmp_path, capsys, value):
    with pytest.raises(SystemExit) as exit_:
        P.main(["--preflight", "--data", str(tmp_path), f"--probe-timeout={value}"])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and "--probe-timeout" in err and "cannot be downloaded" not in err
