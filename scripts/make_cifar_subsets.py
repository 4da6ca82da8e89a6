"""Build the book's offline CIFAR subsets from the official CIFAR-10/100 archives.

Usage: python scripts/make_cifar_subsets.py [--download] [--only cifar10|cifar100] SOURCE_DIR OUT_DIR

SOURCE_DIR holds the official python-pickle archives ``cifar-10-python.tar.gz`` and
``cifar-100-python.tar.gz`` from <https://www.cs.toronto.edu/~kriz/cifar.html> (or their extracted
folders); ``--download`` fetches missing archives into it. Each archive is md5-checked and
extracted. OUT_DIR receives ``cifar10_subset.npz`` and ``cifar100_subset.npz`` with the same
images, labels and layout as the subsets the book was executed with (their content digests are
checked against ``replearn.data.SUBSET_DIGESTS``) and a ``SHA256SUMS`` file. Then
``export REPLEARN_DATA=OUT_DIR``. See ``replearn.data.make_subsets`` and the README, "Data".
"""

from __future__ import annotations

import argparse
import sys

from replearn import data


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("source", help="folder with the official archives (or their extracted folders)")
    parser.add_argument("out", help="folder to write cifar10_subset.npz / cifar100_subset.npz into")
    parser.add_argument("--download", action="store_true", help="download missing archives into SOURCE")
    parser.add_argument("--only", choices=("cifar10", "cifar100"), help="build one of the two subsets")
    args = parser.parse_args(argv)
    names = (args.only,) if args.only else ("cifar10", "cifar100")
    written = data.make_subsets(args.source, args.out, names=names, download=args.download)
    for name, path in written.items():
        d = data.load_cifar(name, root=path.parent)
        print(f"{path}: {d.describe()}; sha256 {data.file_digest(path)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
