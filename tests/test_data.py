"""Tests of replearn.neural.data: loading (official archive, npz subset, download), partitions, augmentation."""

import hashlib
import math
import http.server
import io
import os
import pickle
import re
import tarfile
import threading
from math import gcd

import numpy as np
import pytest
import torch
from hypothesis import given, settings, strategies as st

from replearn.neural import data

SUBSET_ROOT = data.data_root()
HAVE_SUBSETS = all((SUBSET_ROOT / f).is_file() for f in ("cifar10_subset.npz", "cifar100_subset.npz"))
needs_subsets = pytest.mark.skipif(
    not HAVE_SUBSETS, reason=f"CIFAR subsets not found in {SUBSET_ROOT}; set REPLEARN_DATA to their folder")


# --------------------------------------------------------------------------- augment, normalise


def _reference_augment(x, generator, pad, flip):
    """Per-image crop and flip, consuming the generator in the documented order."""
    b, _, h, w = x.shape
    offsets = torch.randint(0, 2 * pad + 1, (b, 2), generator=generator)
    flips = torch.rand(b, generator=generator) < 0.5 if flip else torch.zeros(b, dtype=torch.bool)
    out = []
    for img, (i, j), f in zip(x, offsets.tolist(), flips.tolist()):
        padded = torch.nn.functional.pad(img, (pad, pad, pad, pad))
        crop = padded[:, i:i + h, j:j + w]
        out.append(torch.flip(crop, dims=[2]) if f else crop)
    return torch.stack(out)


@pytest.mark.parametrize("pad,flip", [(4, True), (2, False), (0, True), (3, True)])
def test_augment_matches_per_image_reference(pad, flip):
    x = torch.randn(9, 3, 8, 6, generator=torch.Generator().manual_seed(1))
    got = data.augment(x, torch.Generator().manual_seed(5), pad=pad, flip=flip)
    want = _reference_augment(x, torch.Generator().manual_seed(5), pad, flip)
    assert got.shape == x.shape and got.dtype == x.dtype
    assert torch.equal(got, want)


def test_augment_semantics_and_determinism():
    x = torch.arange(2 * 3 * 4 * 5, dtype=torch.float32).reshape(2, 3, 4, 5) + 1
    # pad 0: each image is either itself or its mirror image, and both occur for some seed
    seen = set()
    for seed in range(20):
        out = data.augment(x, torch.Generator().manual_seed(seed), pad=0)
        for img, o in zip(x, out):
            assert torch.equal(o, img) or torch.equal(o, img.flip(2))
            seen.add(torch.equal(o, img))
    assert seen == {True, False}
    # no flip: the crop is a shifted copy with zeros where it leaves the image
    out = data.augment(x, torch.Generator().manual_seed(3), pad=1, flip=False)
    assert (out == 0).any() or torch.equal(out, x)
    assert set(out.unique().tolist()) <= set(x.unique().tolist()) | {0.0}
    a = data.augment(x, torch.Generator().manual_seed(7))
    b = data.augment(x, torch.Generator().manual_seed(7))
    assert torch.equal(a, b)
    with pytest.raises(ValueError, match="B, C, H, W"):
        data.augment(x[0], torch.Generator())


def test_normalise_against_direct_formula():
    x = torch.randint(0, 256, (4, 3, 5, 5), dtype=torch.uint8, generator=torch.Generator().manual_seed(0))
    for name in ("cifar10", "cifar100"):
        mean, std = data.CHANNEL_STATS[name]
        out = data.normalise(x, name)
        assert out.dtype == torch.float32
        for c in range(3):
            direct = (x[:, c].double() / 255 - mean[c]) / std[c]
            assert torch.allclose(out[:, c].double(), direct, atol=1e-6)
    with pytest.raises(ValueError, match="uint8"):
        data.normalise(x.float(), "cifar10")
    with pytest.raises(ValueError, match="unknown dataset"):
        data.normalise(x, "mnist")


# --------------------------------------------------------------------------- official-format archives


def _sample_arrays(name, n_train=300, n_test=100):
    """CHW uint8 images and labels: the first images of the real subset, else synthetic ones."""
    if HAVE_SUBSETS:
        d = data.load_cifar(name)
        out = dict(x_train=d.x_train[:n_train].numpy(), y_train=d.y_train[:n_train].numpy(),
                   x_test=d.x_test[:n_test].numpy(), y_test=d.y_test[:n_test].numpy(),
                   class_names=d.class_names)
        if name == "cifar100":
            out.update(y_train_coarse=d.y_train_coarse[:n_train].numpy(),
                       y_test_coarse=d.y_test_coarse[:n_test].numpy(),
                       coarse_class_names=d.coarse_class_names)
        return out
    rng = np.random.default_rng(0)
    k = 10 if name == "cifar10" else 100
    out = dict(x_train=rng.integers(0, 256, (n_train, 3, 32, 32), dtype=np.uint8),
               y_train=rng.integers(0, k, n_train),
               x_test=rng.integers(0, 256, (n_test, 3, 32, 32), dtype=np.uint8),
               y_test=rng.integers(0, k, n_test), class_names=tuple(f"class{i}" for i in range(k)))
    if name == "cifar100":
        out.update(y_train_coarse=out["y_train"] // 5, y_test_coarse=out["y_test"] // 5,
                   coarse_class_names=tuple(f"super{i}" for i in range(20)))
    return out


def _batch(x, labels):
    """One batch dict as in the official files: byte-string keys, rows of R, G, B planes."""
    return {b"batch_label": b"testing batch", b"data": x.reshape(len(x), 3072),
            b"filenames": [b"img_%d.png" % i for i in range(len(x))],
            **{k: [int(v) for v in y] for k, y in labels.items()}}


def _official_files(name, arr):
    """``{relative path: bytes}`` of the official layout (pickle protocol 2 like the originals)."""
    def dump(obj):
        return pickle.dumps(obj, protocol=2)

    def encoded(names):
        return [n.encode() for n in names]

    if name == "cifar10":
        folder = "cifar-10-batches-py/"
        files = {}
        for i, c in enumerate(np.array_split(np.arange(len(arr["y_train"])), 5)):
            batch = _batch(arr["x_train"][c], {b"labels": arr["y_train"][c]})
            files[f"{folder}data_batch_{i + 1}"] = dump(batch)
        files[folder + "test_batch"] = dump(_batch(arr["x_test"], {b"labels": arr["y_test"]}))
        files[folder + "batches.meta"] = dump({b"label_names": encoded(arr["class_names"])})
        return files
    folder = "cifar-100-python/"
    files = {folder + split: dump(_batch(arr[f"x_{split}"], {b"fine_labels": arr[f"y_{split}"],
                                                            b"coarse_labels": arr[f"y_{split}_coarse"]}))
             for split in ("train", "test")}
    files[folder + "meta"] = dump({b"fine_label_names": encoded(arr["class_names"]),
                                   b"coarse_label_names": encoded(arr["coarse_class_names"])})
    return files


def _tar_gz(files):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for path, blob in files.items():
            info = tarfile.TarInfo(path)
            info.size = len(blob)
            tar.addfile(info, io.BytesIO(blob))
    return buf.getvalue()


@pytest.fixture(scope="module")
def archives():
    out = {}
    for name in ("cifar10", "cifar100"):
        arr = _sample_arrays(name)
        blob = _tar_gz(_official_files(name, arr))
        out[name] = dict(arrays=arr, blob=blob, md5=hashlib.md5(blob).hexdigest())
    return out


class _Server:
    """A local HTTP server on 127.0.0.1 serving one payload; ``truncate`` requests send half of it
    with the full Content-Length and then close the connection."""

    def __init__(self, payload):
        self.payload, self.truncate, self.requests = payload, 0, 0
        owner = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                owner.requests += 1
                if self.path != "/archive.tar.gz":
                    self.send_error(404)
                    return
                self.send_response(200)
                self.send_header("Content-Length", str(len(owner.payload)))
                self.end_headers()
                if owner.truncate > 0:
                    owner.truncate -= 1
                    self.wfile.write(owner.payload[: len(owner.payload) // 2])
                    self.close_connection = True
                else:
                    self.wfile.write(owner.payload)

            def log_message(self, *args):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/archive.tar.gz"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server(archives):
    srv = _Server(archives["cifar10"]["blob"])
    yield srv
    srv.close()


def _check_same(d, arr):
    assert torch.equal(d.x_train, torch.from_numpy(arr["x_train"]))
    assert torch.equal(d.x_test, torch.from_numpy(arr["x_test"]))
    assert torch.equal(d.y_train, torch.as_tensor(arr["y_train"], dtype=torch.int64))
    assert torch.equal(d.y_test, torch.as_tensor(arr["y_test"], dtype=torch.int64))
    assert d.class_names == tuple(arr["class_names"])


@pytest.mark.parametrize("name", ["cifar10", "cifar100"])
def test_download_checksum_match_loads_official_layout(tmp_path, archives, name):
    a = archives[name]
    srv = _Server(a["blob"])
    try:
        d = data.load_cifar(name, root=tmp_path, download=True, url=srv.url, md5=a["md5"], retry_delay=0)
    finally:
        srv.close()
    assert d.source == "full" and d.root == tmp_path
    _check_same(d, a["arrays"])
    if name == "cifar100":
        want = torch.as_tensor(a["arrays"]["y_train_coarse"], dtype=torch.int64)
        assert torch.equal(d.y_train_coarse, want)
        assert d.coarse_class_names == tuple(a["arrays"]["coarse_class_names"])
    spec = data.datasets.SPECS[name]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([spec["archive"], spec["folder"]])
    # a second call finds the extracted folder and needs no server
    again = data.load_cifar(name, root=tmp_path)
    _check_same(again, a["arrays"])
    assert f"{len(a['arrays']['y_train']):,} train" in again.describe()
    assert "full official dataset" in again.describe() and str(tmp_path) not in again.describe()


def test_download_checksum_mismatch_leaves_nothing(tmp_path, server):
    root = tmp_path / "data"
    with pytest.raises(ValueError, match="md5"):
        data.load_cifar("cifar10", root=root, download=True, url=server.url, md5="0" * 32, retry_delay=0)
    assert list(root.iterdir()) == []
    assert server.requests == 1


def test_interrupted_download_is_retried(tmp_path, server, archives):
    server.truncate = 2
    d = data.load_cifar("cifar10", root=tmp_path, download=True, url=server.url,
                        md5=archives["cifar10"]["md5"], retries=3, retry_delay=0)
    assert server.requests == 3
    _check_same(d, archives["cifar10"]["arrays"])
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_interrupted_download_gives_up_cleanly(tmp_path, server, archives):
    server.truncate = 10
    with pytest.raises(ConnectionError, match="failed 2 times"):
        data.download_archive(server.url, tmp_path / "a.tar.gz", archives["cifar10"]["md5"],
                              retries=2, retry_delay=0)
    assert server.requests == 2
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(ConnectionError):  # HTTP 404
        data.download_archive(server.url + "x", tmp_path / "a.tar.gz", "0" * 32, retries=1, retry_delay=0)
    assert list(tmp_path.iterdir()) == []


def test_download_reuses_verified_archive(tmp_path, server, archives):
    dest = tmp_path / "a.tar.gz"
    dest.write_bytes(archives["cifar10"]["blob"])
    assert data.download_archive(server.url, dest, archives["cifar10"]["md5"]) == dest
    assert server.requests == 0


def test_unsafe_archive_member_refused(tmp_path):
    evil = _tar_gz({"cifar-10-batches-py/../../escape": b"x", "cifar-10-batches-py/test_batch": b"y"})
    path = tmp_path / "root" / "evil.tar.gz"
    path.parent.mkdir()
    path.write_bytes(evil)
    with pytest.raises(ValueError, match="unsafe member"):
        data.extract_archive(path, path.parent, "cifar-10-batches-py")
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["evil.tar.gz", "root"]
    path.write_bytes(b"not a tar file")
    with pytest.raises(ValueError, match="not a readable tar.gz"):
        data.extract_archive(path, path.parent, "cifar-10-batches-py")


def test_extraction_is_idempotent_and_repairs(tmp_path, archives):
    archive = tmp_path / "cifar-10-python.tar.gz"
    archive.write_bytes(archives["cifar10"]["blob"])
    folder = data.extract_archive(archive, tmp_path, "cifar-10-batches-py")

    def snapshot():
        return {p.relative_to(tmp_path): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}

    first = snapshot()
    assert data.extract_archive(archive, tmp_path, "cifar-10-batches-py") == folder  # no OSError
    assert snapshot() == first
    (folder / "data_batch_2").write_bytes(b"damaged")
    (folder / "stray").write_bytes(b"left over")
    data.extract_archive(archive, tmp_path, "cifar-10-batches-py")
    assert snapshot() == first
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cifar-10-batches-py", "cifar-10-python.tar.gz"]
    _check_same(data.load_cifar("cifar10", root=tmp_path), archives["cifar10"]["arrays"])


def test_extraction_drops_special_bits_and_foreign_owners(tmp_path):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, mode in (("cifar-10-batches-py/run", 0o6777), ("cifar-10-batches-py/test_batch", 0o644)):
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.uid, info.gid = 1, mode, 54321, 54321
            info.uname = info.gname = "stranger"
            tar.addfile(info, io.BytesIO(b"x"))
    (tmp_path / "a.tar.gz").write_bytes(buf.getvalue())
    folder = data.extract_archive(tmp_path / "a.tar.gz", tmp_path, "cifar-10-batches-py")
    for path in folder.iterdir():
        st = path.stat()
        assert st.st_mode & 0o7000 == 0, oct(st.st_mode)  # no setuid, setgid or sticky bit
        assert st.st_mode & 0o022 == 0, oct(st.st_mode)   # no group/other write
        assert (st.st_uid, st.st_gid) == (os.getuid(), os.getgid())


def test_corrupt_or_foreign_pickles_rejected(tmp_path, archives):
    root = tmp_path
    for rel, blob in _official_files("cifar10", archives["cifar10"]["arrays"]).items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(blob)
    batch = root / "cifar-10-batches-py" / "data_batch_3"
    batch.write_bytes(b"\x80\x02garbage")
    with pytest.raises(ValueError, match="data_batch_3 is not a readable CIFAR pickle"):
        data.load_cifar("cifar10", root=root)
    batch.write_bytes(pickle.dumps({b"data": os.getcwd}, protocol=2))  # a global outside the format
    with pytest.raises(ValueError, match="refusing to load"):
        data.load_cifar("cifar10", root=root)
    batch.write_bytes(pickle.dumps({b"data": np.zeros((2, 100), np.uint8), b"labels": [0, 1]}, protocol=2))
    with pytest.raises(ValueError, match=r"\(N, 3072\)"):
        data.load_cifar("cifar10", root=root)
    batch.write_bytes(pickle.dumps({b"data": np.zeros((2, 3072), np.uint8)}, protocol=2))
    with pytest.raises(ValueError, match="lacks the key b'labels'"):
        data.load_cifar("cifar10", root=root)
    batch.unlink()
    with pytest.raises(FileNotFoundError, match="data_batch_3 is missing"):
        data.load_cifar("cifar10", root=root)


# --------------------------------------------------------------------------- resolution, subsets


def _write_subset(path, n=20, k=10, **override):
    rng = np.random.default_rng(0)
    arrays = dict(x_train=rng.integers(0, 256, (n, 32, 32, 3), dtype=np.uint8), y_train=np.arange(n) % k,
                  x_test=rng.integers(0, 256, (n // 2, 32, 32, 3), dtype=np.uint8),
                  y_test=np.arange(n // 2) % k,
                  class_names=np.array([f"c{i}" for i in range(k)]))
    arrays.update(override)
    np.savez(path, **arrays)
    return arrays


def test_missing_data_error_names_directory_files_and_fixes(tmp_path, monkeypatch):
    monkeypatch.setenv("REPLEARN_DATA", str(tmp_path))
    monkeypatch.delenv("REPLEARN_DOWNLOAD", raising=False)
    with pytest.raises(data.DataMissingError) as info:
        data.load_cifar("cifar100")
    assert isinstance(info.value, FileNotFoundError)
    msg = str(info.value)
    for part in (str(tmp_path), "cifar-100-python", "cifar100_subset.npz", "REPLEARN_DATA",
                 "REPLEARN_DOWNLOAD=1", "%env REPLEARN_DOWNLOAD=1", "scripts/make_cifar_subsets.py",
                 "161 MB"):
        assert part in msg
    assert list(tmp_path.iterdir()) == []
    again = pickle.loads(pickle.dumps(info.value))
    assert type(again) is data.DataMissingError and str(again) == msg


def test_a_data_directory_that_is_a_file_is_called_a_file(tmp_path, monkeypatch, server, archives):
    """REPLEARN_DATA (or root) naming a regular file: the error says it is a file and points at a
    folder, with no "not in <file>" nor "download into <file>", and nothing is downloaded."""
    monkeypatch.delenv("REPLEARN_DOWNLOAD", raising=False)
    path = tmp_path / "notes.txt"
    path.write_text("not a folder")
    monkeypatch.setenv("REPLEARN_DATA", str(path))
    with pytest.raises(data.DataMissingError) as info:
        data.load_cifar("cifar10")
    msg = str(info.value)
    assert msg.startswith(f"REPLEARN_DATA={path} is a file, not a directory: point it at the folder that "
                          f"holds cifar10_subset.npz")
    assert f"in {path}" not in msg and "into that folder" not in msg and "one of the data files" not in msg
    assert str(pickle.loads(pickle.dumps(info.value))) == msg
    monkeypatch.setenv("REPLEARN_DOWNLOAD", "1")  # downloading into a file cannot work: not tried
    with pytest.raises(data.DataMissingError, match=rf"^root={re.escape(str(path))} is a file, not a dir"):
        data.load_cifar("cifar10", root=path, url=server.url, md5=archives["cifar10"]["md5"], retry_delay=0)
    assert server.requests == 0 and path.read_text() == "not a folder"
    # the subset file itself as the data directory: its folder is suggested
    subset = tmp_path / "cifar10_subset.npz"
    _write_subset(subset)
    monkeypatch.setenv("REPLEARN_DATA", str(subset))
    own = (r"cifar10_subset.npz is one of the data files itself: "
           rf"set REPLEARN_DATA={re.escape(str(tmp_path))} ")
    with pytest.raises(data.DataMissingError, match=rf"is a file, not a directory.*{own}"):
        data.load_cifar("cifar10")
    assert data.load_cifar("cifar10", root=tmp_path).source == "subset"


def test_data_entries_of_the_wrong_kind_are_named(tmp_path, monkeypatch, archives):
    """A subset name that is a directory and an official-folder name that is a file: each is
    called what it is, not "not there"; a batch file that is a directory likewise."""
    monkeypatch.delenv("REPLEARN_DOWNLOAD", raising=False)
    (tmp_path / "cifar10_subset.npz").mkdir()
    (tmp_path / "cifar-10-batches-py").write_text("")
    with pytest.raises(data.DataMissingError) as info:
        data.load_cifar("cifar10", root=tmp_path)
    msg = str(info.value)
    assert (f"{tmp_path / 'cifar10_subset.npz'} is a directory, expected the file cifar10_subset.npz" in msg)
    assert f"{tmp_path / 'cifar-10-batches-py'} is a file, expected the folder cifar-10-batches-py/" in msg
    assert "neither" not in msg and "REPLEARN_DATA" in msg
    root = tmp_path / "full"
    for rel, blob in _official_files("cifar10", archives["cifar10"]["arrays"]).items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(blob)
    batch = root / "cifar-10-batches-py" / "data_batch_2"
    batch.unlink()
    batch.mkdir()
    with pytest.raises(IsADirectoryError, match=r"data_batch_2 is a directory, expected the file "):
        data.load_cifar("cifar10", root=root)


def test_download_switch_from_environment(tmp_path, monkeypatch, server, archives):
    a = archives["cifar10"]
    monkeypatch.setenv("REPLEARN_DOWNLOAD", "0")
    with pytest.raises(data.DataMissingError):
        data.load_cifar("cifar10", root=tmp_path, url=server.url, md5=a["md5"], retry_delay=0)
    monkeypatch.setenv("REPLEARN_DOWNLOAD", "maybe")
    with pytest.raises(ValueError, match="REPLEARN_DOWNLOAD='maybe' is not understood"):
        data.load_cifar("cifar10", root=tmp_path, url=server.url, md5=a["md5"], retry_delay=0)
    monkeypatch.setenv("REPLEARN_DOWNLOAD", " Yes")
    with pytest.raises(data.DataMissingError):  # an explicit download=False wins over the variable
        data.load_cifar("cifar10", root=tmp_path, download=False, url=server.url, md5=a["md5"])
    assert server.requests == 0 and list(tmp_path.iterdir()) == []
    d = data.load_cifar("cifar10", root=tmp_path, url=server.url, md5=a["md5"], retry_delay=0)
    assert server.requests == 1 and d.source == "full"
    _check_same(d, a["arrays"])


def test_missing_data_in_ipython_shows_one_message_and_skips_later_cells(tmp_path, monkeypatch, capsys):
    from IPython.core.interactiveshell import InteractiveShell

    monkeypatch.setenv("REPLEARN_DATA", str(tmp_path))
    monkeypatch.delenv("REPLEARN_DOWNLOAD", raising=False)
    from traitlets.config import Config

    config = Config()
    config.HistoryManager.enabled = False  # no history database, no saving thread
    shell = InteractiveShell.instance(config=config)
    try:
        result = shell.run_cell("from replearn.neural import data\ncifar = data.load_cifar('cifar10')")
        assert isinstance(result.error_in_exec, data.DataMissingError)
        shown = capsys.readouterr().out
        assert shown.startswith("DataMissingError: no CIFAR-10 data in") and "Traceback" not in shown
        assert "The rest of this notebook is skipped" in shown
        for _ in range(2):  # later cells (which would raise NameError) run nothing and print nothing
            result = shell.run_cell("res = cifar.describe()\nprint(res)")
            assert result.success and "res" not in shell.user_ns
        assert capsys.readouterr() == ("", "")
        # a cell setting the variables of the fixes runs; once the data are there, every cell runs
        shell.run_cell("import os\nos.environ['REPLEARN_DATA_NOTE'] = 'seen'")
        assert os.environ.pop("REPLEARN_DATA_NOTE") == "seen"
        monkeypatch.setenv("REPLEARN_DOWNLOAD", "sometimes")  # a bad value: cells run, and say so
        assert not shell.run_cell("cifar = data.load_cifar('cifar10')").success
        assert "REPLEARN_DOWNLOAD='sometimes' is not understood" in capsys.readouterr().out
        monkeypatch.delenv("REPLEARN_DOWNLOAD")
        assert shell.run_cell("skipped = 1").success and "skipped" not in shell.user_ns
        _write_subset(tmp_path / "cifar10_subset.npz")
        result = shell.run_cell("cifar = data.load_cifar('cifar10')\nprint(cifar.describe())")
        assert result.success and capsys.readouterr().out.startswith("CIFAR-10, offline subset")
        assert not [t for t in shell.input_transformers_post
                    if isinstance(t, data.location._SkipCellsWithoutData)]
        # a caught DataMissingError is the caller's business: nothing is skipped afterwards
        shell.run_cell("try:\n    data.load_cifar('cifar100')\nexcept FileNotFoundError:\n    caught = 1")
        shell.run_cell("after = 2")
        assert shell.user_ns["caught"] == 1 and shell.user_ns["after"] == 2
    finally:
        shell.input_transformers_post[:] = [t for t in shell.input_transformers_post
                                            if not isinstance(t, data.location._SkipCellsWithoutData)]
        InteractiveShell.clear_instance()


def test_resolution_order(tmp_path, monkeypatch, archives):
    monkeypatch.delenv("REPLEARN_DATA", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert data.data_root() == tmp_path / "home" / ".cache" / "replearn"
    monkeypatch.setenv("REPLEARN_DATA", str(tmp_path))
    assert data.data_root() == tmp_path and data.data_root(tmp_path / "x") == tmp_path / "x"
    arrays = _write_subset(tmp_path / "cifar10_subset.npz")
    d = data.load_cifar("cifar10")
    assert d.source == "subset" and d.root == tmp_path
    assert torch.equal(d.x_train, torch.from_numpy(arrays["x_train"]).permute(0, 3, 1, 2))
    assert d.describe() == ("CIFAR-10, offline subset of the official images: 20 train / 10 test images, "
                            "2 / 1 per class")
    for rel, blob in _official_files("cifar10", archives["cifar10"]["arrays"]).items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_bytes(blob)
    assert data.load_cifar("cifar10").source == "full"  # the official folder wins


def test_corrupt_subset_rejected(tmp_path):
    path = tmp_path / "cifar10_subset.npz"
    path.write_bytes(b"PK\x03\x04 truncated zip")
    with pytest.raises(ValueError, match="not a valid CIFAR-10 subset"):
        data.load_cifar("cifar10", root=tmp_path)
    np.savez(path, x_train=np.zeros((2, 32, 32, 3), np.uint8))
    with pytest.raises(ValueError, match="missing keys"):
        data.load_cifar("cifar10", root=tmp_path)
    _write_subset(path, x_train=np.zeros((20, 3, 32, 32), np.uint8))
    with pytest.raises(ValueError, match="expected uint8"):
        data.load_cifar("cifar10", root=tmp_path)
    _write_subset(path, y_train=np.arange(20))
    with pytest.raises(ValueError, match="labels outside 0..9"):
        data.load_cifar("cifar10", root=tmp_path)
    _write_subset(path, y_train=np.arange(20) % 10 + 0.9)  # would be truncated to valid labels
    with pytest.raises(ValueError, match="y_train: labels must be integers, got dtype float64"):
        data.load_cifar("cifar10", root=tmp_path)
    _write_subset(path, y_test=(np.arange(10) % 2).astype(bool))
    with pytest.raises(ValueError, match="y_test: labels must be integers, got dtype bool"):
        data.load_cifar("cifar10", root=tmp_path)
    _write_subset(path, x_train=np.zeros((0, 32, 32, 3), np.uint8), y_train=np.zeros(0, np.int64))
    with pytest.raises(ValueError, match="y_train: no images"):
        data.load_cifar("cifar10", root=tmp_path)
    _write_subset(path, x_test=np.zeros((0, 32, 32, 3), np.uint8), y_test=np.zeros(0, np.int64))
    with pytest.raises(ValueError, match="y_test: no images"):
        data.load_cifar("cifar10", root=tmp_path)
    _write_subset(path, y_train=np.arange(20, dtype=np.uint8) % 10)  # any integer dtype is fine
    assert data.load_cifar("cifar10", root=tmp_path).y_train.dtype == torch.int64


def test_non_integer_or_empty_official_batches_rejected(tmp_path, archives):
    files = _official_files("cifar10", archives["cifar10"]["arrays"])
    for rel, blob in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_bytes(blob)
    batch = tmp_path / "cifar-10-batches-py" / "test_batch"
    batch.write_bytes(pickle.dumps({b"data": np.zeros((2, 3072), np.uint8), b"labels": [6.9, 1.0]}, 2))
    with pytest.raises(ValueError, match=r"test_batch: b'labels': labels must be integers, got dtype float6"):
        data.load_cifar("cifar10", root=tmp_path)
    batch.write_bytes(pickle.dumps({b"data": np.zeros((0, 3072), np.uint8),
                                    b"labels": np.zeros(0, np.int64)}, 4))
    with pytest.raises(ValueError, match="test: no images"):
        data.load_cifar("cifar10", root=tmp_path)


@needs_subsets
def test_real_subsets():
    d10, d100 = data.load_cifar("cifar10"), data.load_cifar("cifar100")
    assert d10.source == d100.source == "subset"
    assert d10.x_train.shape == (20000, 3, 32, 32) and d10.x_train.dtype == torch.uint8
    assert d10.describe().endswith("20,000 train / 5,000 test images, 2,000 / 500 per class")
    assert d10.class_names[0] == "airplane" and d10.y_train_coarse is None
    assert d100.describe().endswith("25,000 train / 5,000 test images, 250 / 50 per class")
    # every fine class lies in exactly one coarse class, five fine classes per coarse class
    pairs = torch.unique(torch.stack([d100.y_train, d100.y_train_coarse]), dim=1)
    assert pairs.shape[1] == 100 and torch.equal(torch.bincount(pairs[1]), torch.full((20,), 5))
    assert d100.coarse_class_names[0] == "aquatic_mammals"


# --------------------------------------------------------------------------- partitions


def _check_disjoint(parts, n):
    flat = torch.cat(parts)
    assert flat.dtype == torch.int64
    assert len(flat.unique()) == len(flat) and (len(flat) == 0 or (flat.min() >= 0 and flat.max() < n))
    return flat


@st.composite
def _shard_case(draw):
    k = draw(st.integers(2, 10))
    c = draw(st.integers(1, k))
    n_clients = k // gcd(k, c) * draw(st.integers(1, 4))
    per_class = n_clients * c // k
    m = draw(st.integers(per_class, per_class + 7))
    return k, c, n_clients, m, draw(st.integers(0, 2**31))


@settings(max_examples=40, deadline=None)
@given(_shard_case())
def test_shard_partition_properties(case):
    k, c, n_clients, m, seed = case
    order = torch.randperm(k * m, generator=torch.Generator().manual_seed(seed))
    y = torch.arange(k).repeat_interleave(m)[order]
    per_class = n_clients * c // k
    sizes = {m // per_class, -(-m // per_class)}  # a shard's possible sizes
    for split in (data.shard_partition, data.disjoint_shard_partition):
        parts = split(y, n_clients, c, seed=seed)
        assert len(parts) == n_clients
        assert len(_check_disjoint(parts, len(y))) == len(y)  # every sample used exactly once
        for p in parts:
            counts = torch.bincount(y[p], minlength=k)
            if split is data.disjoint_shard_partition:
                assert int((counts > 0).sum()) == c  # exactly C distinct classes
                assert set(counts[counts > 0].tolist()) <= sizes
            else:  # C shards, possibly two of one class (the authors' split)
                assert 1 <= int((counts > 0).sum()) <= c and len(p) in {c * s for s in sizes} | set(range(
                    c * min(sizes), c * max(sizes) + 1))
        again = split(y, n_clients, c, seed=seed)
        assert all(torch.equal(a, b) for a, b in zip(parts, again))


def test_shard_partition_seeds_differ_and_errors():
    y = torch.arange(10).repeat_interleave(100)
    a = data.shard_partition(y, 50, 2, seed=0)
    b = data.shard_partition(y, 50, 2, seed=1)
    assert any(not torch.equal(p, q) for p, q in zip(a, b))
    assert {len(p) for p in a} == {20}
    with pytest.raises(ValueError, match="multiple of the number of classes"):
        data.shard_partition(y, 7, 2, seed=0)
    with pytest.raises(ValueError, match="classes_per_client"):
        data.shard_partition(y, 10, 11, seed=0)
    with pytest.raises(ValueError, match="seed"):
        data.shard_partition(y, 10, 2, seed=None)


@settings(max_examples=30, deadline=None)
@given(st.integers(3, 8), st.integers(2, 10), st.floats(0.5, 5.0), st.integers(0, 2**31), st.booleans())
def test_dirichlet_partition_properties(k, n_clients, alpha, seed, equal):
    y = torch.arange(k).repeat_interleave(40)
    kw = dict(seed=seed, min_size=1, equal_sizes=equal, max_attempts=1000)
    parts = data.dirichlet_partition(y, n_clients, alpha, **kw)
    flat = _check_disjoint(parts, len(y))
    if equal:
        assert {len(p) for p in parts} == {len(y) // n_clients}
    else:
        assert len(flat) == len(y) and min(len(p) for p in parts) >= 1
    again = data.dirichlet_partition(y, n_clients, alpha, **kw)
    assert all(torch.equal(a, b) for a, b in zip(parts, again))


def test_dirichlet_skew_depends_on_alpha_and_errors():
    y = torch.arange(10).repeat_interleave(500)

    def mean_classes(alpha):
        parts = data.dirichlet_partition(y, 20, alpha, seed=0, equal_sizes=False)
        return np.mean([len(y[p].unique()) for p in parts])
    assert mean_classes(0.05) < mean_classes(0.6) < mean_classes(100.0) == 10
    a = data.dirichlet_partition(y, 20, 0.6, seed=0)
    b = data.dirichlet_partition(y, 20, 0.6, seed=1)
    assert any(not torch.equal(p, q) for p, q in zip(a, b))
    with pytest.raises(ValueError, match="min_size=300"):
        data.dirichlet_partition(y, 20, 0.6, seed=0, min_size=300, max_attempts=5)
    with pytest.raises(ValueError, match="alpha > 0"):
        data.dirichlet_partition(y, 20, 0.0, seed=0)


def test_client_test_split_matches_training_labels():
    y_train = torch.arange(10).repeat_interleave(200)
    y_test = torch.arange(10).repeat_interleave(50)
    parts = data.dirichlet_partition(y_train, 20, 0.6, seed=3)
    tests = data.client_test_split(parts, y_train, y_test, seed=4)
    assert len(_check_disjoint(tests, len(y_test))) == len(y_test)  # the whole test set is spread
    for p, t in zip(parts, tests):
        train_counts = torch.bincount(y_train[p], minlength=10).double()
        test_counts = torch.bincount(y_test[t], minlength=10).double()
        assert torch.equal(train_counts > 0, test_counts > 0)  # same label set
        # proportional up to rounding and the at-least-one rule
        assert (test_counts - train_counts / 4).abs().max() <= 3
    fixed = data.client_test_split(parts, y_train, y_test, seed=4, n_per_client=30)
    _check_disjoint(fixed, len(y_test))
    for p, t in zip(parts, fixed):
        assert torch.equal(y_train[p].unique(), y_test[t].unique())
        assert abs(len(t) - 30) <= 10
    again = data.client_test_split(parts, y_train, y_test, seed=4)
    assert all(torch.equal(a, b) for a, b in zip(tests, again))


def test_client_test_split_when_test_set_runs_out():
    y_train = torch.arange(2).repeat_interleave(100)
    y_test = torch.tensor([0] * 10 + [1] * 3)
    # class 1 is held by two clients
    parts = [torch.arange(0, 50), torch.arange(50, 150), torch.arange(150, 200)]
    tests = data.client_test_split(parts, y_train, y_test, seed=0, n_per_client=40)
    _check_disjoint(tests, len(y_test))
    counts = torch.stack([torch.bincount(y_test[t], minlength=2) for t in tests])
    assert counts[:, 0].sum() <= 10 and counts[:, 1].sum() <= 3
    assert torch.equal(counts > 0, torch.tensor([[True, False], [True, True], [False, True]]))
    with pytest.raises(ValueError, match="class 1 has 1 test images but 2 clients"):
        data.client_test_split(parts, y_train, torch.tensor([0] * 10 + [1]), seed=0)


def test_class_split_and_restrict_classes():
    train, new = data.class_split(100, 20, seed=0)
    assert len(train) == 80 and len(new) == 20
    assert torch.equal(torch.sort(torch.cat([train, new])).values, torch.arange(100))
    assert torch.equal(data.class_split(100, 20, seed=0)[1], new)
    assert not torch.equal(data.class_split(100, 20, seed=1)[1], new)
    with pytest.raises(ValueError, match="n_new"):
        data.class_split(10, 10, seed=0)
    y = torch.tensor([5, 2, 7, 2, 9, 5, 0])
    index, relabelled = data.restrict_classes(y, [7, 2, 5])
    assert index.tolist() == [0, 1, 2, 3, 5]
    assert relabelled.tolist() == [2, 1, 0, 1, 2]
    with pytest.raises(ValueError, match="distinct"):
        data.restrict_classes(y, [2, 2])


# --------------------------------------------------------------------------- building the subsets


def _tiny_index(arr):
    """Positions to keep: every third train image and every second test image."""
    return dict(train=np.arange(0, len(arr["y_train"]), 3), test=np.arange(1, len(arr["y_test"]), 2))


@pytest.mark.parametrize("name", ["cifar10", "cifar100"])
def test_make_subsets_from_tiny_official_archive(tmp_path, archives, name):
    a, spec = archives[name], data.datasets.SPECS[name]
    src = tmp_path / "src"
    src.mkdir()
    (src / spec["archive"]).write_bytes(a["blob"])
    index = {name: _tiny_index(a["arrays"])}
    with pytest.raises(ValueError, match="has md5"):  # the tiny archive is not the official one
        data.make_subsets(src, tmp_path / "out", names=(name,), index=index)
    built = data.make_subsets(src, tmp_path / "out", names=(name,), index=index,
                              archive_md5={name: a["md5"]})
    path = built[name]
    assert path == tmp_path / "out" / spec["subset"]
    d = data.load_cifar(name, root=path.parent)
    assert d.source == "subset"
    for split in ("train", "test"):
        ix = index[name][split]
        assert torch.equal(getattr(d, f"x_{split}"), torch.from_numpy(a["arrays"][f"x_{split}"][ix]))
        assert torch.equal(getattr(d, f"y_{split}"), torch.as_tensor(a["arrays"][f"y_{split}"][ix]))
        if name == "cifar100":
            want = torch.as_tensor(a["arrays"][f"y_{split}_coarse"][ix])
            assert torch.equal(getattr(d, f"y_{split}_coarse"), want)
    with np.load(path) as npz:  # the shipped layout, official positions included
        arrays = {k: npz[k] for k in npz.files}
    want_keys = {"x_train", "y_train", "x_test", "y_test", "class_names", "train_index", "test_index"}
    if name == "cifar100":
        want_keys |= {"y_train_coarse", "y_test_coarse", "coarse_class_names"}
    assert set(arrays) == want_keys
    assert arrays["x_train"].shape[1:] == (32, 32, 3) and arrays["y_train"].dtype == np.int64
    assert np.array_equal(arrays["train_index"], index[name]["train"])
    sums = (tmp_path / "out" / "SHA256SUMS").read_text()
    assert sums == f"{hashlib.sha256(path.read_bytes()).hexdigest()}  {spec['subset']}\n"
    # reproducible: building again (now from the extracted folder) gives the same bytes
    first = path.read_bytes()
    data.make_subsets(src, tmp_path / "out", names=(name,), index=index)
    assert path.read_bytes() == first
    # a recorded content digest that does not match refuses, and writes nothing
    digest = data.content_digest(arrays)
    assert data.make_subsets(src, tmp_path / "again", names=(name,), index=index, digests={name: digest})
    with pytest.raises(ValueError, match="content digest"):
        data.make_subsets(src, tmp_path / "bad", names=(name,), index=index, digests={name: "0" * 64})
    assert not (tmp_path / "bad").exists()


def test_make_subsets_errors(tmp_path, archives):
    a = archives["cifar10"]
    with pytest.raises(FileNotFoundError, match="neither cifar-10-python.tar.gz nor cifar-10-batches-py/"):
        data.make_subsets(tmp_path, tmp_path / "out", names=("cifar10",))
    for rel, blob in _official_files("cifar10", a["arrays"]).items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_bytes(blob)
    n = len(a["arrays"]["y_train"])
    for bad in (np.array([3, 1]), np.array([0, n]), np.array([], np.int64)):
        with pytest.raises(ValueError, match="must be increasing positions"):
            data.make_subsets(tmp_path, tmp_path / "out", names=("cifar10",),
                              index={"cifar10": dict(train=bad, test=np.arange(3))})
    # the recorded selection of the shipped subsets does not fit a tiny archive: the archive is
    # blamed, not the index argument the caller never passed
    with pytest.raises(ValueError, match=r"cifar-10-batches-py does not hold the official CIFAR-10 "
                                         r"archive's contents: 300 train images where the official one "
                                         r"has 50,000") as err:
        data.make_subsets(tmp_path, tmp_path / "out", names=("cifar10",))
    assert "index[" not in str(err.value) and not (tmp_path / "out").exists()


def test_a_wrong_archive_vouched_for_by_archive_md5_is_named(tmp_path, archives):
    """archive_md5 accepts a (tiny) archive that is not the official one; with the recorded
    selection the error names that archive and says its contents do not match (before: "index
    must be increasing positions", an argument the caller never passed)."""
    a, spec = archives["cifar100"], data.datasets.SPECS["cifar100"]
    archive = tmp_path / spec["archive"]
    archive.write_bytes(a["blob"])
    with pytest.raises(ValueError) as err:
        data.make_subsets(tmp_path, tmp_path / "out", names=("cifar100",),
                          archive_md5={"cifar100": a["md5"]})
    msg = str(err.value)
    assert msg.startswith(f"{archive} does not hold the official CIFAR-100 archive's contents: 300 train "
                          f"images where the official one has 50,000 (its md5 was accepted because "
                          f"archive_md5 names it)")
    assert "index[" not in msg and "cifar100_subset.npz was not written" in msg
    assert not (tmp_path / "out").exists()
    # wrong kinds: the source a file, the archive a directory
    with pytest.raises(NotADirectoryError, match=r"is a file, not a directory: pass the folder that holds"):
        data.make_subsets(archive, tmp_path / "out", names=("cifar10",))
    (tmp_path / "cifar-10-python.tar.gz").mkdir()
    with pytest.raises(IsADirectoryError, match=r"cifar-10-python.tar.gz is a directory, expected the file"):
        data.make_subsets(tmp_path, tmp_path / "out", names=("cifar10",))


def test_recorded_subset_selection():
    for name, sizes in (("cifar10", (20_000, 5_000)), ("cifar100", (25_000, 5_000))):
        ix = data.subset_index(name)
        assert (len(ix["train"]), len(ix["test"])) == sizes
        assert np.all(np.diff(ix["train"]) > 0) and ix["train"][-1] < 50_000 and ix["test"][-1] < 10_000
    arrays = dict(b=np.arange(3), a=np.array(["x", "y"]))
    assert data.content_digest(arrays) == data.content_digest(dict(reversed(arrays.items())))
    assert data.content_digest(arrays) != data.content_digest(dict(arrays, b=np.arange(3, dtype=np.int32)))


@needs_subsets
def test_recorded_selection_and_digests_match_the_shipped_subsets():
    for name in ("cifar10", "cifar100"):
        with np.load(SUBSET_ROOT / data.datasets.SPECS[name]["subset"]) as npz:
            arrays = {k: npz[k] for k in npz.files}
        ix = data.subset_index(name)
        assert np.array_equal(ix["train"], arrays["train_index"])
        assert np.array_equal(ix["test"], arrays["test_index"])
        assert data.content_digest(arrays) == data.SUBSET_DIGESTS[name]


# --------------------------------------------------------------------------- issue 27: bad data and arguments

def _write_official(root, arr):
    for rel, blob in _official_files("cifar100", arr).items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(blob)


@pytest.mark.parametrize("change, match", [
    (lambda a: a["y_train_coarse"].__setitem__(0, 25), r"y_train_coarse: labels outside 0..19"),
    (lambda a: a["y_test_coarse"].__setitem__(3, -1), r"y_test_coarse: labels outside 0..19"),
    (lambda a: a.update(coarse_class_names=a["coarse_class_names"][:19]), "19 coarse class names, expected 20"),
    (lambda a: a["y_train_coarse"].__setitem__(np.flatnonzero(a["y_train"] == a["y_train"][0])[0],
                                               (a["y_train_coarse"][0] + 1) % 20), "two different coarse labels"),
])
def test_corrupt_coarse_labels_are_refused(tmp_path, change, match):
    arr = _sample_arrays("cifar100")
    arr = {k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in arr.items()}
    change(arr)
    _write_official(tmp_path, arr)
    with pytest.raises(ValueError, match=match):
        data.load_cifar("cifar100", root=tmp_path)


def test_a_coarse_label_array_one_entry_short_is_refused(tmp_path):
    arr = _sample_arrays("cifar100")
    fake = data.CifarData("cifar100", torch.zeros(3, 3, 32, 32, dtype=torch.uint8), torch.tensor([0, 1, 2]),
                          torch.zeros(1, 3, 32, 32, dtype=torch.uint8), torch.tensor([0]), arr["class_names"],
                          "subset", tmp_path)
    coarse = dict(y_train_coarse=torch.tensor([0, 0]), y_test_coarse=torch.tensor([0]),
                  coarse_class_names=arr["coarse_class_names"])
    with pytest.raises(ValueError, match=r"y_train_coarse has shape \(2,\) but y_train has \(3,\)"):
        data.cifar._check_coarse(coarse, fake.y_train, fake.y_test, "here")


@pytest.mark.parametrize("call, match", [
    (lambda y: data.dirichlet_partition(y, 4.0, 0.5, seed=0), r"n_clients must be an integer"),
    (lambda y: data.shard_partition(y, 2.5, 2, seed=0), r"n_clients must be an integer"),
    (lambda y: data.dirichlet_partition(y, 10**12, 0.5, seed=0), r"n_clients = 1000000000000 .*MAX_COUNT"),
    (lambda y: data.dirichlet_partition(y, 41, 0.5, seed=0, min_size=0), r"n_clients = 41 exceeds the 40"),
    (lambda y: data.shard_partition(y, 4, 2.0, seed=0), r"classes_per_client must be an integer"),
    (lambda y: data.dirichlet_partition(y, 4, math.inf, seed=0), r"alpha must be a finite"),
    (lambda y: data.dirichlet_partition(y, 4, 0.5, seed=0, min_size=1.5), r"min_size"),
    (lambda y: data.dirichlet_partition(y[:0], 4, 0.5, seed=0), r"labels is empty"),
    (lambda y: data.shard_partition(y[:0], 4, 2, seed=0), r"labels is empty"),
    (lambda y: data.client_test_split([torch.arange(4)], y, y[:0], seed=0), r"test_labels is empty"),
    (lambda y: data.client_test_split([torch.tensor([0, 40])], y, y, seed=0),
     r"partition\[0\] holds indices in \[0, 40\] but train_labels has 40"),
    (lambda y: data.client_test_split([torch.arange(3), torch.tensor([-1])], y, y, seed=0), r"partition\[1\]"),
    (lambda y: data.client_test_split([torch.tensor([0.5])], y, y, seed=0), r"partition\[0\] must be a 1-D integer"),
    (lambda y: data.client_test_split(torch.arange(4), y, y, seed=0), r"partition must be a non-empty list"),
    (lambda y: data.client_test_split([torch.arange(4)], y, y, seed=0, n_per_client=2.0), r"n_per_client"),
    (lambda y: data.class_split(10.0, 2, seed=0), r"n_classes must be an integer"),
    (lambda y: data.load_cifar("cifar10", root="/nonexistent", timeout=0), r"timeout must be > 0"),
    (lambda y: data.load_cifar("cifar10", root="/nonexistent", retry_delay=-1.0), r"retry_delay must be >= 0"),
    (lambda y: data.download_archive("http://127.0.0.1:9/x", "/tmp/x.tgz", "0", timeout=-5), r"timeout must"),
    (lambda y: data.download_archive("http://127.0.0.1:9/x", "/tmp/x.tgz", "0", timeout=math.nan), r"timeout"),
    (lambda y: data.download_archive("http://127.0.0.1:9/x", "/tmp/x.tgz", "0", timeout=1e9), r"MAX_TIMEOUT"),
    (lambda y: data.download_archive("http://127.0.0.1:9/x", "/tmp/x.tgz", "0", retries=2.0), r"retries"),
])
def test_bad_partition_and_download_arguments_name_the_argument(call, match):
    y = torch.arange(40) % 4
    with pytest.raises(ValueError, match=match):
        call(y)
