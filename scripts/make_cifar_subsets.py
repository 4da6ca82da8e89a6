"""Build the book's offline CIFAR subsets from the official CIFAR-10/100 archives.

Usage: python scripts/make_cifar_subsets.py [--download] [--only cifar10|cifar100] SOURCE_DIR OUT_DIR

SOURCE_DIR holds the official python-pickle archives ``cifar-10-python.tar.gz`` and
``cifar-100-python.tar.gz`` from <https://www.cs.toronto.edu/~kriz/cifar.html> (or their extracted
folders); ``--download`` fetches missing archives into it. Each archive is md5-checked and
extracted. OUT_DIR receives ``cifar10_subset.npz`` and ``cifar100_subset.npz`` with the same
images, labels and layout as the subsets the book was executed with (their content digests are
checked against ``replearn.neural.data.SUBSET_DIGESTS``), written byte for byte as the shipped files (their
SHA-256 is compared with ``scripts/cifar_subsets.sha256``), and a ``SHA256SUMS`` file. Then
``export REPLEARN_DATA=OUT_DIR``. ``make data`` (scripts/prepare_data.py) does all of this by itself
for the data directory. See ``replearn.neural.data.make_subsets`` and the README, "Data".
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from replearn.neural import data

sys.path.insert(0, str(Path(__file__).resolve().parent))
import prepare_data  # noqa: E402


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("source", help="folder with the official archives (or their extracted folders)")
    parser.add_argument("out", help="folder to write cifar10_subset.npz / cifar100_subset.npz into")
    parser.add_argument("--download", action="store_true", help="download missing archives into SOURCE")
    parser.add_argument("--only", choices=("cifar10", "cifar100"), help="build one of the two subsets")
    args = parser.parse_args(argv)
    names = (args.only,) if args.only else ("cifar10", "cifar100")
    written = data.make_subsets(args.source, args.out, names=names, download=args.download)
    recorded = prepare_data.read_sums()
    for name, path in written.items():
        prepare_data.write_npz(path, prepare_data.load_arrays(path), prepare_data.MEMBER_ORDER[name])
        d = data.load_cifar(name, root=path.parent)
        digest = data.file_digest(path)
        same = "as recorded" if recorded.get(path.name) == digest else "not the recorded one (another zlib)"
        print(f"{path}: {d.describe()}; sha256 {digest}, {same}")
    sums = prepare_data.read_sums(Path(args.out) / "SHA256SUMS")
    sums.update({p.name: data.file_digest(p) for p in written.values()})
    (Path(args.out) / "SHA256SUMS").write_text("".join(f"{h}  {n}\n" for n, h in sorted(sums.items())))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
