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


@pytest.mark.parametrize("value", ["-1", "0", "nan", "inf", "-inf", "0.5", "1e-6", "abc"])
def test_pack_refuses_a_part_size_that_is_not_a_finite_mib_count(value, tmp_path, capsys):
    """Negative, zero, NaN, infinite, tiny or non-numeric --part-mib: argparse's error (exit 2),
    naming the bound, and nothing written (before: exit 0 with no part, ZeroDivisionError, a
    conversion traceback, or one folder per byte)."""
    with pytest.raises(SystemExit) as exit_:
        gd.main(["pack", f"--part-mib={value}", "--source", str(tmp_path / "src"),
                 "--dest", str(tmp_path / "p")])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "--part-mib" in err and ("finite number of MiB >= 1" in err or "not a number" in err), err
    assert not (tmp_path / "p").exists()


def test_the_help_states_the_part_size_bound(capsys):
    with pytest.raises(SystemExit):
        gd.main(["--help"])
    assert "finite number >= 1" in " ".join(capsys.readouterr().out.split())


def test_pack_function_refuses_bad_sizes_and_too_many_parts(subsets, tmp_path):
    for bad in (0, -1.0, float("nan"), float("inf"), 1e-9, True, "46"):
        with pytest.raises(ValueError, match="part_mib must be a positive finite number"):
            gd.pack(subsets, tmp_path / "p", part_mib=bad)
    with pytest.raises(ValueError, match=rf"more than {gd.MAX_PARTS} \(one device call each\)"):
        gd.pack(subsets, tmp_path / "p", part_mib=1e-4)  # about 100 bytes a part: thousands of parts
    assert not (tmp_path / "p").exists()
    folders = gd.pack(subsets, tmp_path / "big", part_mib=1e300)  # one part: the whole stream
    assert [f.name for f in folders] == ["1"]


def test_pack_from_the_command_line_with_a_valid_size(subsets, tmp_path, capsys):
    assert gd.main(["pack", "--part-mib", "1", "--source", str(subsets), "--dest", str(tmp_path / "p")]) == 0
    assert "carry each folder" in capsys.readouterr().out
    assert gd.status(tmp_path / "p") == ([1], 1)


@pytest.mark.parametrize("text, problem", [
    ('{"arrays": [', "not a readable manifest"),
    ("\xff\xfe", "not a readable manifest"),
    ("[]", "not a complete manifest .*holds a list"),
    ('{"arrays": [], "bytes": 10, "sha256": "00"}', "not a complete manifest .*'parts' is missing"),
    ('{"arrays": [{"subset": "x"}], "parts": 2, "bytes": 10, "sha256": "00"}',
     "not a complete manifest .*array entry 0"),
    ('{"arrays": [], "parts": 0, "bytes": 10, "sha256": "00"}', "must be positive"),
])
def test_a_corrupt_or_incomplete_manifest_is_named(subsets, tmp_path, capsys, text, problem):
    folders = gd.pack(subsets, tmp_path / "parts", part_mib=0.1)
    manifest = folders[0] / gd.MANIFEST
    manifest.write_bytes(text.encode("latin-1"))
    for call in (lambda: gd.status(tmp_path / "parts"),
                 lambda: gd.unpack(tmp_path / "parts", tmp_path / "out")):
        with pytest.raises(ValueError, match=problem) as err:
            call()
        assert str(manifest) in str(err.value)
        assert "re-run `python scripts/gpu_data.py pack`" in str(err.value)
        assert "copy 1/ again" in str(err.value)
    assert gd.main(["status", "--dest", str(tmp_path / "parts")]) == 1  # a message, no traceback
    err = capsys.readouterr().err
    assert str(manifest) in err and "Traceback" not in err


def test_manifests_of_two_different_packs_are_refused(subsets, tmp_path):
    folders = gd.pack(subsets, tmp_path / "parts", part_mib=0.1)
    other = gd.pack(subsets, tmp_path / "other", part_mib=0.15)
    (folders[1] / gd.MANIFEST).write_bytes((other[1] / gd.MANIFEST).read_bytes())
    with pytest.raises(ValueError, match=r"parts/2/manifest.json and .*parts/1/manifest.json come from "
                                         r"different runs of `pack`"):
        gd.status(tmp_path / "parts")
    # a folder numbered beyond the parts of the pack (left over from an earlier pack) is ignored
    (folders[1] / gd.MANIFEST).write_bytes((folders[0] / gd.MANIFEST).read_bytes())
    stale = tmp_path / "parts" / str(len(folders) + 5)
    stale.mkdir()
    (stale / gd.MANIFEST).write_text("{}")
    assert gd.status(tmp_path / "parts") == (list(range(1, len(folders) + 1)), len(folders))
