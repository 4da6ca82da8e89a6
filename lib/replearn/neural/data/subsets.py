"""The offline CIFAR subsets: which official images they hold (:func:`subset_index`, recorded as
bit masks), the digest of their content (:func:`content_digest`, :data:`SUBSET_DIGESTS`), and
:func:`make_subsets`, which rebuilds them byte for byte from the official archives (also
``scripts/make_cifar_subsets.py``)."""

from __future__ import annotations

import base64
import hashlib
import os
import zipfile
import zlib
from pathlib import Path

import numpy as np
import torch

from replearn.neural.data.cifar import load_official
from replearn.neural.data.datasets import dataset_spec
from replearn.neural.data.download import download_archive, extract_archive, file_digest
from replearn.neural.data.location import is_not_a_folder

__all__ = ["SUBSET_DIGESTS", "content_digest", "make_subsets", "subset_index"]

#: Official positions of the images in the offline subsets (``train_index`` / ``test_index`` of
#: the shipped ``cifar*_subset.npz``), as zlib-compressed, base64-encoded bit masks over the
#: official train (50,000) and test (10,000) sets. The rule: the first 2,000 train / 500 test
#: images of each CIFAR-10 class and the first 250 / 50 of each CIFAR-100 fine class, in official
#: order, except that CIFAR-10 skips the images its makers could recover only as JPEG (see the
#: README next to the subsets); the masks record the outcome exactly.
_SUBSET_MASKS = {
    "cifar10": dict(
        train=("eNr7/3+wg/c4Ze5Tz5K//4c5qCfVr/eHlfd/DyK33MfuwHqaplg6JfB/+BIeZQYNVfB+uBYp92leVNz/PwpGwYgB"
               "wDI6H0jlAWuDnb/+70//+eXz+vP/l+77///c9fW77t59V/U//vO8/1+81te9XM0YsryoIslFerLszVfsnAtFv/Jc"
               "0LOUXukSoKjkxMEgoTtjSYDoQTGm1gaPBQwNrAwcDQ4CCxgYOBRcGLgiFBSY+yQYWAQ4GNgkWBkYGhgYmBgYFBiA"
               "QICRQYCBk4GBpYGjA8hj4AFihoYGBgVHhlEwCkbBKBgFo2AUjIJRMApGwSgYBaOAGAAAR4W7FA=="),
        test=("eNr7/38Qg/covP1g8i+6ou80sfo3Rbr34xD/R5tw+osw/i/NfVlPfCjc/3//vfzr/W+AWtT/z82sP9+8P+95XU+I"
              "rTQn14F/CVNVGhhGwSigLQAAGVVtaQ==")),
    "cifar100": dict(
        train=("eNrtz+9LU1EYB/BnY8ptQdx+gBqI9wbVyiCDoDTCsISoGMs/wBczSXqzRokx2e6UBa0X5WBmmFBEP0ir9cq9GHg0"
               "aPqqQVAGi920InDaeTHa7e5u93Suc8kG9rrgfOCee89znu855xLCMAzDMAzDMP8Y3RgwIfJGDcrf82jj3OrWqfWK"
               "VrkpMg6mk0JZKlesJo3402JRlkrrF0tXpp0a6tM7SWqFZGd1SbnvldKklUiKbjTQ39F0D6GTNJHoQcilJuUMJhEk"
               "4R/aCqZ30RV8UPHRFTnhw660qhZGUL9LvycVsgQrkqwoKDaMvX2xRZxVSCbTn0UykUam8i0IL+XlyZ8o2vztSiJh"
               "982ffYkaUtGW72+11uhrnLy6V0/Gtdmot6t38pMr414O26o89bnscfPzUe/Wx2Ohxs7bb9rn1aW7ZOrIyUxBjeQn"
               "Ptx6MdMQSVlHv8R459zXXsg1LndUne+ID9XXHfK8n34XfDTeFZ64+XkOntnbnMHh3UQE0Ro/MNB85+gvddw+VrMQ"
               "2B4N+YIXQlAD4jHYzAcHH4rc5R2natv3Qbd5C2ziQAgLbmvbdceA6UlgD98zKF6qBTdA0yvLjWvnDjvBXyfu2un4"
               "CH7wC0NmEIBGegQ6AxOYbNXcaYD9AAGBg+4z1WCwTYOF9llghuN5gRb8aw8PNAzbeNH4AnAYAy0Iqy8zwAP4gzNa"
               "mgQo4y9tYbCUqiYotp1Ym1eEKq0vm41sWT8PDMMwDMMwDPM/+g0Nayug"),
        test=("eNr7/38UjETw9x+M8f/9/9sgxufzIA4QfH/8vx4s9fz//8d///z/ff8/UGD7/+/////b///9/t319n+/2f7/X3p/"
              "////3+rervn//ur19j97a+v23C9v3lpes/z0QfX7aW8eut2brjF/Y9XupLgNb69b/n4/6cfrOQ9NHxx9+5Bhg6ba"
              "dNdLDuIvxVzL2/+smlmWpMScN4GVYYKClBCDkIbDMTcGzhWMHswCSkxMAgxMLHMYjBgYNRokHFwcDjEIKDAwiDg0"
              "8TA0MDA4MjgwcCgAGSDAwsDAxMAFZjIpgGQXMMCAAgMjEwMRwAGJzcGApH0UDFEAAOWIcYw=")),
}

#: :func:`content_digest` of the shipped subsets; :func:`make_subsets` checks what it builds from
#: the official archives against these.
SUBSET_DIGESTS = {
    "cifar10": "d6785f1d66a67a1a799ddbc0d4bf7f4c997bd7a75b0bc110ded2e5fd42ded43d",
    "cifar100": "9bdbd12f5ab343888d219c947cc5d904a14804ef29b9ce41b280b58240798e36",
}

_OFFICIAL_SIZES = {"train": 50_000, "test": 10_000}


def subset_index(name: str) -> dict[str, np.ndarray]:
    """``{"train": ..., "test": ...}``: the official positions (increasing int64) of the images
    in the offline subset of ``name`` (see :data:`_SUBSET_MASKS`)."""
    dataset_spec(name)
    masks = _SUBSET_MASKS[name]
    out = {}
    for split, n in _OFFICIAL_SIZES.items():
        bits = np.frombuffer(zlib.decompress(base64.b64decode(masks[split])), dtype=np.uint8)
        out[split] = np.flatnonzero(np.unpackbits(bits, count=n)).astype(np.int64)
    return out


def content_digest(arrays) -> str:
    """SHA-256 over the arrays of a subset file, in sorted key order: each key, dtype and shape,
    then the raw bytes (string arrays as their UTF-8, newline-joined entries). Unlike a checksum
    of the npz file, it does not depend on how the zip was compressed."""
    h = hashlib.sha256()
    for key in sorted(arrays):
        a = np.ascontiguousarray(arrays[key])
        if a.dtype.kind == "U":
            h.update(f"{key} str {a.shape}\n".encode())
            h.update("\n".join(a.tolist()).encode())
        else:
            h.update(f"{key} {a.dtype.str} {a.shape}\n".encode())
            h.update(a.tobytes())
    return h.hexdigest()


def _write_npz(path: Path, arrays: dict) -> None:
    """A deflate-compressed ``.npz`` (as ``np.savez_compressed``, read by ``np.load``) with fixed
    zip timestamps and member order, so the same arrays give the same bytes (for a given zlib)."""
    tmp = path.with_name(f".{path.name}.part")
    try:
        with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED) as zf:
            for key in sorted(arrays):
                info = zipfile.ZipInfo(f"{key}.npy", date_time=(1980, 1, 1, 0, 0, 0))
                info.compress_type = zipfile.ZIP_DEFLATED
                with zf.open(info, "w", force_zip64=True) as f:
                    np.lib.format.write_array(f, np.asanyarray(arrays[key]), allow_pickle=False)
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


def make_subsets(source: str | os.PathLike, out: str | os.PathLike, *, names=("cifar10", "cifar100"),
                 download: bool = False, index: dict | None = None, digests: dict | None = None,
                 archive_md5: dict | None = None) -> dict[str, Path]:
    """Build the offline subset files ``out / cifar*_subset.npz`` from the official archives.

    ``source`` holds the official archives (``cifar-10-python.tar.gz`` ...) or their extracted
    folders; an archive is md5-checked (against ``archive_md5[name]`` if given, else the official
    md5; ``ValueError`` on a mismatch) and extracted there, and with ``download=True`` a missing
    archive is first downloaded into it. For each of ``names`` the images at the official
    positions ``index[name]`` (default :func:`subset_index`: the subsets the book was executed
    with) are written in the shipped layout (HWC uint8 images, int64 labels, class names,
    ``train_index`` / ``test_index``, for CIFAR-100 the coarse labels and names), after their
    :func:`content_digest` was compared with ``digests[name]`` (default :data:`SUBSET_DIGESTS`
    when ``index`` is the default; ``ValueError`` on a mismatch, and no file is written). With
    the default ``index``, an archive (or extracted folder) whose train or test set is not the
    official size is refused first (``ValueError`` naming it): its contents are not the official
    archive's, whatever ``archive_md5`` vouched for. Returns the paths written;
    ``out / "SHA256SUMS"`` records their SHA-256 checksums.
    """
    source, out = Path(source), Path(out)
    recorded = index is None  # the recorded selection, made from the official archives
    if index is None:
        index, digests = {n: subset_index(n) for n in names}, (SUBSET_DIGESTS if digests is None else digests)
    digests = digests or {}
    written = {}
    for name in names:
        spec = dataset_spec(name)
        origin = source / spec["folder"]  # what the images come from, for messages
        if not (source / spec["folder"]).is_dir():
            archive, want = source / spec["archive"], (archive_md5 or {}).get(name, spec["md5"])
            if is_not_a_folder(source):
                raise NotADirectoryError(f"{source} is a file, not a directory: pass the folder that holds "
                                         f"{spec['archive']} or {spec['folder']}/")
            if archive.is_dir():
                raise IsADirectoryError(f"{archive} is a directory, expected the file {spec['archive']} "
                                        f"(the official archive): remove that folder or put the archive there")
            if archive.is_file():
                if (got := file_digest(archive, "md5")) != want:
                    raise ValueError(f"{archive} has md5 {got}, expected {want}: not the official archive "
                                     f"or a damaged copy; delete it and download it again")
            elif download:
                download_archive(spec["url"], archive, want)
            else:
                raise FileNotFoundError(
                    f"neither {spec['archive']} nor {spec['folder']}/ is in {source}; download the archive "
                    f"from {spec['url']} into that folder, or pass download=True (--download)")
            extract_archive(archive, source, spec["folder"])
            origin = archive
        full = load_official(name, source)
        if recorded:  # positions of the official sets: a set of another size is not the official archive
            for split, n in _OFFICIAL_SIZES.items():
                if (got := len(getattr(full, f"y_{split}"))) != n:
                    vouched = (" (its md5 was accepted because archive_md5 names it)"
                               if (archive_md5 or {}).get(name) not in (None, spec["md5"]) else "")
                    raise ValueError(
                        f"{origin} does not hold the official {spec['title']} archive's contents: {got:,} "
                        f"{split} images where the official one has {n:,}{vouched}, so the recorded subset "
                        f"selection cannot be taken from it. Use the official {spec['archive']} "
                        f"({spec['url']}), or pass index= with positions into this archive; {spec['subset']} "
                        f"was not written")
        arrays = {"class_names": np.array(full.class_names)}
        for split in ("train", "test"):
            ix = np.asarray(index[name][split], dtype=np.int64)
            x, y = getattr(full, f"x_{split}"), getattr(full, f"y_{split}")
            if ix.ndim != 1 or not len(ix) or np.any(np.diff(ix) <= 0) or ix[0] < 0 or ix[-1] >= len(y):
                raise ValueError(f"index[{name!r}][{split!r}] must be increasing positions in "
                                 f"0..{len(y) - 1}, got {len(ix)} entries")
            take = torch.from_numpy(ix)
            arrays[f"x_{split}"] = x[take].permute(0, 2, 3, 1).contiguous().numpy()  # CHW -> HWC
            arrays[f"y_{split}"] = y[take].numpy()
            arrays[f"{split}_index"] = ix
            if name == "cifar100":
                arrays[f"y_{split}_coarse"] = getattr(full, f"y_{split}_coarse")[take].numpy()
        if name == "cifar100":
            arrays["coarse_class_names"] = np.array(full.coarse_class_names)
        got = content_digest(arrays)
        if name in digests and got != digests[name]:
            raise ValueError(f"the {spec['title']} subset built from {origin} has content digest {got}, "
                             f"expected {digests[name]}: the archive is not the official one (or was "
                             f"extracted from a damaged copy); no file was written")
        out.mkdir(parents=True, exist_ok=True)
        written[name] = out / spec["subset"]
        _write_npz(written[name], arrays)
    sums_file = out / "SHA256SUMS"
    sums = dict(line.split()[::-1] for line in sums_file.read_text().splitlines()
                if len(line.split()) == 2) if sums_file.is_file() else {}
    sums.update({p.name: file_digest(p) for p in written.values()})
    sums_file.write_text("".join(f"{h}  {n}\n" for n, h in sorted(sums.items())))
    return written
