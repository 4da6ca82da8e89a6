"""scripts/gpu_data.py: the offline subsets packed into parts that fit a device call, and back."""

import importlib.util
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
spec = importlib.util.spec_from_file_location("gpu_data", ROOT / "scripts" / "gpu_data.py")
gd = importlib.util.module_from_spec(spec)
spec.loader.exec_module(gd)


@pytest.fixture
def subsets(tmp_path):
    rng = np.random.default_rng(0)
    src = tmp_path / "src"
    src.mkdir()
    for name, n in zip(gd.SUBSETS, (60, 80)):
        np.savez_compressed(src / name, x_train=rng.integers(0, 256, (n, 32, 32, 3), dtype=np.uint8),
                            y_train=rng.integers(0, 10, n), class_names=np.array(["cat", "dog"]))
    return src


def test_pack_then_unpack_gives_the_same_arrays(subsets, tmp_path):
    folders = gd.pack(subsets, tmp_path / "parts", part_mib=0.1)
    assert len(folders) >= 3 and all((f / "part").stat().st_size <= 0.1 * 2**20 for f in folders)
    assert gd.status(tmp_path / "parts") == (list(range(1, len(folders) + 1)), len(folders))
    for path in gd.unpack(tmp_path / "parts", tmp_path / "out"):
        with np.load(subsets / path.name) as a, np.load(path) as b:
            assert sorted(a.files) == sorted(b.files)
            for k in a.files:
                assert a[k].dtype == b[k].dtype and np.array_equal(a[k], b[k]), k


def test_a_missing_or_altered_part_is_named(subsets, tmp_path):
    folders = gd.pack(subsets, tmp_path / "parts", part_mib=0.1)
    part = folders[1] / "part"
    blob = part.read_bytes()
    part.unlink()
    with pytest.raises(FileNotFoundError, match=r"parts \[2\] of .* missing.*\.gpudata/2"):
        gd.unpack(tmp_path / "parts", tmp_path / "out")
    part.write_bytes(blob[:-1] + bytes([blob[-1] ^ 1]))
    with pytest.raises(ValueError, match="not the packed stream"):
        gd.unpack(tmp_path / "parts", tmp_path / "out")
    with pytest.raises(FileNotFoundError, match="REPLEARN_DATA"):
        gd.pack(tmp_path / "nowhere", tmp_path / "p2", part_mib=1)
    with pytest.raises(FileNotFoundError, match="carry .gpudata/1"):
        gd.status(tmp_path / "empty")
