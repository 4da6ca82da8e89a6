"""scripts/authors_side_by_side.py without the FedRep authors' code: the weight mapping between our
FedRepCNN and their CNNCifar, their args namespace, their transforms, our partition as index
lists, the parsing of their output, and the harness that runs their main_fedrep.py (on a small
fake repository shaped like theirs, with the same tab-in-spaces indentation as their
models/test.py)."""

import importlib.util
import json
import os
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from cifar_fixtures import fake_cifar
from torch import nn
from torch.nn import functional as F

from replearn.experiments.ch05_fedrep import cifar_federation as personalisation
from replearn.neural.models import make_model
from replearn.neural.specs import FEDREP_WIDTHS

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("authors_side_by_side", ROOT / "scripts" / "authors_side_by_side.py")
sbs = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(sbs)

pytestmark = pytest.mark.usefixtures("one_thread")

AUTHORS_NAMES = {f"{layer}.{kind}" for layer in ("conv1", "conv2", "fc1", "fc2", "fc3") for kind in ("weight", "bias")}

# A copy of the architecture of their CNNCifar (models/Nets.py of lgcollins/FedRep), for the tests.
CNN_CIFAR = '''
class CNNCifar(nn.Module):
    def __init__(self, args):
        super(CNNCifar, self).__init__()
        self.conv1 = nn.Conv2d(3, 64, 5)
        self.pool = nn.MaxPool2d(2, 2)
        self.conv2 = nn.Conv2d(64, 64, 5)
        self.fc1 = nn.Linear(64 * 5 * 5, 120)
        self.fc2 = nn.Linear(120, 64)
        self.fc3 = nn.Linear(64, args.num_classes)
        self.weight_keys = [['fc1.weight', 'fc1.bias'], ['fc2.weight', 'fc2.bias'], ['fc3.weight', 'fc3.bias'],
                            ['conv2.weight', 'conv2.bias'], ['conv1.weight', 'conv1.bias']]

    def forward(self, x):
        x = self.pool(F.relu(self.conv1(x)))
        x = self.pool(F.relu(self.conv2(x)))
        x = x.view(-1, 64 * 5 * 5)
        x = F.relu(self.fc1(x))
        x = F.relu(self.fc2(x))
        x = self.fc3(x)
        return F.log_softmax(x, dim=1)
'''
_ns = {"nn": nn, "F": F}
exec(CNN_CIFAR, _ns)
CNNCifar = _ns["CNNCifar"]


def test_weight_mapping_round_trips():
    model = make_model("fedrep_cnn", 10, 3, device="cpu", widths=FEDREP_WIDTHS["cifar10"])
    ours = model.state_dict()
    theirs = sbs.to_authors(ours)
    assert set(theirs) == AUTHORS_NAMES
    back = sbs.from_authors(theirs)
    assert set(back) == set(ours) and all(torch.equal(back[n], ours[n]) for n in ours)
    assert all(theirs[n].data_ptr() != p.data_ptr() for n, p in zip(theirs, ours.values()))  # copies
    # our FedRep's shared body is their w_glob_keys for CIFAR; our head their fc3
    body = [n for n in ours if n.startswith("body.")]
    assert {sbs.OURS_TO_AUTHORS[n.rpartition(".")[0]] + "." + n.rpartition(".")[2] for n in body} == sbs.AUTHORS_BODY


def test_mapped_weights_compute_the_same_function():
    model = make_model("fedrep_cnn", 10, 5, device="cpu", widths=FEDREP_WIDTHS["cifar10"])
    net = CNNCifar(sbs.authors_args("fedrep", clients=10, classes=2, rounds=1, participation=0.5))
    net.load_state_dict(sbs.to_authors(model.state_dict()))  # strict: every name and shape
    x = torch.randn(4, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        torch.testing.assert_close(net(x), torch.log_softmax(model(x), 1))
    # and back: their state into our model
    other = make_model("fedrep_cnn", 10, 6, device="cpu", widths=FEDREP_WIDTHS["cifar10"])
    other.load_state_dict(sbs.from_authors(net.state_dict()))
    with torch.no_grad():
        torch.testing.assert_close(other(x), model(x))


def test_mapping_refuses_unknown_or_missing_names():
    state = make_model("fedrep_cnn", 10, 0, device="cpu", widths=FEDREP_WIDTHS["cifar10"]).state_dict()
    with pytest.raises(ValueError, match="body.conv3.weight"):
        sbs.to_authors({**state, "body.conv3.weight": torch.zeros(1)})
    with pytest.raises(ValueError, match="head.bias"):
        sbs.to_authors({n: p for n, p in state.items() if n != "head.bias"})
    with pytest.raises(ValueError, match="fc4.weight"):
        sbs.from_authors({"fc4.weight": torch.zeros(1)})


@pytest.mark.parametrize("alg, local_ep", [("fedrep", 11), ("fedavg", 1)])
def test_args_namespace_has_every_attribute_their_code_reads(alg, local_ep):
    args = sbs.authors_args(alg, clients=20, classes=2, rounds=7, participation=0.5, m_tr=120, seed=4)
    for name in set(sbs.AUTHORS_READS) | set(sbs.AUTHORS_DEFAULTS):
        assert hasattr(args, name), name
    assert set(sbs.AUTHORS_READS) <= set(sbs.AUTHORS_DEFAULTS)
    assert (args.alg, args.dataset, args.model, args.num_classes) == (alg, "cifar10", "cnn", 10)
    assert (args.num_users, args.shard_per_user, args.frac, args.epochs) == (20, 2, 0.5, 7)
    assert (args.local_ep, args.local_rep_ep, args.local_bs, args.lr) == (local_ep, 1, 10, 0.01)
    assert (args.local_updates, args.m_tr, args.m_ft, args.gpu) == (1000000, 500, 500, -1)
    assert args.load_fed == "n" and args.test_freq == 1 and args.save_every > args.epochs
    assert sbs.authors_args(alg, clients=2, classes=1, rounds=1, participation=1.0, m_tr=800).m_tr == 800
    with pytest.raises(ValueError, match="alg"):
        sbs.authors_args("prox", clients=2, classes=1, rounds=1, participation=1.0)


def test_attributes_read_scans_their_files(tmp_path):
    repo = _fake_repo(tmp_path)
    (repo / "models" / "Update.py").write_text("def f(args):\n    return args.local_rep_ep + args.new_option\n")
    found = sbs.attributes_read(repo)
    assert {"local_rep_ep", "new_option", "epochs"} <= found and "device" not in found


def test_their_transforms():
    gen = torch.Generator().manual_seed(0)
    x = torch.randint(0, 256, (3, 3, 32, 32), generator=gen, dtype=torch.uint8)
    y = torch.tensor([1, 2, 3])
    mean, std = (torch.tensor(v).view(3, 1, 1) for v in sbs.IMAGENET_STATS)
    test = sbs.AuthorsCifar(x, y, train=False)
    img, label = test[1]
    assert label == 2 and test.targets == [1, 2, 3] and len(test) == 3
    torch.testing.assert_close(img, (x[1].float() / 255 - mean) / std)
    train = sbs.AuthorsCifar(x, y, train=True)
    torch.manual_seed(7)
    img, _ = train[0]
    torch.manual_seed(7)  # torchvision's draws: crop row, crop column, then the flip
    i, j = (int(torch.randint(0, 9, size=(1,)).item()) for _ in range(2))
    flip = bool(torch.rand(1) < 0.5)
    want = F.pad(x[0], (4, 4, 4, 4))[:, i:i + 32, j:j + 32]
    want = want.flip(-1) if flip else want
    torch.testing.assert_close(img, (want.float() / 255 - mean) / std)
    # black padding: a crop at the corner shows -mean/std in its border
    torch.manual_seed(0)
    seen = set()
    for _ in range(200):
        out, _ = train[2]
        seen.add(bool(torch.isclose(out, (-mean / std).expand_as(out)).all(0).any()))
    assert True in seen
    with pytest.raises(ValueError, match="uint8"):
        sbs.AuthorsCifar(x.float(), y, train=True)


def test_partition_is_make_federations():
    cifar = fake_cifar(train=40, test=20)
    for seed in (0, 3):
        train_parts, test_parts = sbs.partition(cifar, 10, 2, 20, seed)
        fed = personalisation.make_federation(cifar, 10, 2, train_per_client=20, test_per_client=None, seed=seed)
        from replearn import neural
        ours = neural.ClientData.from_partition(cifar.x_train, cifar.y_train, train_parts, cifar.x_test, cifar.y_test,
                                                test_parts, dataset="cifar10", device="cpu")
        for a, b in ((ours.x_train, fed.clients.x_train), (ours.y_train, fed.clients.y_train),
                     (ours.x_test, fed.clients.x_test), (ours.y_test, fed.clients.y_test)):
            assert all(torch.equal(u, v.cpu()) for u, v in zip(a, b))
        assert sorted(torch.cat(train_parts).tolist()) == sorted(set(torch.cat(train_parts).tolist()))
    with pytest.raises(ValueError, match="multiple of the 10 classes"):
        sbs.partition(cifar, 5, 2, 13, 0)
    with pytest.raises(ValueError, match="class 0 has 40 training images"):
        sbs.partition(cifar, 10, 2, 50, 0)


OUTPUT = """fedavg
Round   0, Train loss: 1.100, Test loss: 2.000, Test accuracy: 20.50
Round   0, Global train loss: 1.100, Global test loss: 2.000, Global test accuracy: 10.25
Round   1, Train loss: 1.000, Test loss: 1.900, Test accuracy: 30.50
Round   1, Global train loss: 1.000, Global test loss: 1.900, Global test accuracy: 12.75
Final Round, Train loss: 0.500, Test loss: 1.000, Test accuracy: 60.00
Final Round, Global train loss: 0.500, Global test loss: 1.000, Global test accuracy: 12.75
Average accuracy final 10 rounds: 5.1
Average global accuracy final 10 rounds: 2.3
12.0
"""


def test_parse_their_output():
    out = sbs.parse_authors_output(OUTPUT, 2)
    assert out["local"] == [20.5, 30.5] and out["global"] == [10.25, 12.75]
    assert out["mean_last"] == 25.5 and out["mean_last_global"] == 11.5
    assert (out["final_local"], out["final_global"]) == (60.0, 12.75)
    assert (out["printed_final10"], out["printed_final10_global"]) == (5.1, 2.3)
    fedrep = sbs.parse_authors_output("\n".join(line for line in OUTPUT.splitlines() if "Global" not in line), 2)
    assert "global" not in fedrep and "mean_last_global" not in fedrep
    with pytest.raises(ValueError, match=r"rounds \[2\]"):
        sbs.parse_authors_output(OUTPUT, 3)


# ------------------------------------------------------------------ a fake repository shaped like theirs

FAKE_MAIN = '''
import numpy as np
import pandas as pd
import torch
from utils.options import args_parser
from utils.train_utils import get_data, get_model, read_data
from models.Update import LocalUpdate
from models.test import test_img_local_all

if __name__ == '__main__':
    args = args_parser()
    args.device = torch.device('cpu')
    dataset_train, dataset_test, dict_users_train, dict_users_test = get_data(args)
    for idx in dict_users_train.keys():
        np.random.shuffle(dict_users_train[idx])
    net_glob = get_model(args)
    image, label = dataset_train[int(dict_users_train[0][0])]
    assert image.shape == (3, 32, 32) and isinstance(label, int)
    accs = []
    for iter in range(args.epochs + 1):
        acc = test_img_local_all(iter)
        accs.append(acc)
        if iter != args.epochs:
            print('Round {:3d}, Train loss: {:.3f}, Test loss: {:.3f}, Test accuracy: {:.2f}'.format(iter, 1.0, 1.0, acc))
        else:
            print('Final Round, Train loss: {:.3f}, Test loss: {:.3f}, Test accuracy: {:.2f}'.format(1.0, 1.0, acc))
    print('Average accuracy final 10 rounds: {}'.format(sum(accs[:-1]) / 10))
    pd.DataFrame(np.array(accs), columns=['accs']).to_csv('./save/accs.csv', index=False)
'''

# the indentation of their models/test.py: a tab among 8-space lines (a TabError in Python 3)
FAKE_TEST = "import copy\n\ndef test_img_local_all(iter):\n    total = 0.0\n    for k in range(2):\n" \
            "\ttotal += 5.0 * (iter + 1)\n        total += 0.0\n    return total\n"


def _fake_repo(tmp_path: Path) -> Path:
    repo = tmp_path / "FedRep"
    (repo / "models").mkdir(parents=True)
    (repo / "utils").mkdir()
    (repo / "save").mkdir()
    (repo / "main_fedrep.py").write_text(FAKE_MAIN)
    (repo / "models" / "__init__.py").write_text("")
    (repo / "utils" / "__init__.py").write_text("")
    (repo / "models" / "test.py").write_text(FAKE_TEST)
    (repo / "models" / "Update.py").write_text("import FedProx\nfrom models.test import test_img_local_all\n"
                                               "class LocalUpdate:\n    pass\n")
    (repo / "FedProx.py").write_text("X = 1\n")
    (repo / "models" / "Nets.py").write_text("import torch\nfrom torch import nn\nimport torch.nn.functional as F\n"
                                             "from torchvision import models\n" + textwrap.dedent(CNN_CIFAR))
    (repo / "utils" / "options.py").write_text("raise RuntimeError('their options must not be imported')\n")
    return repo


MANAGED = {"models", "utils", "FedProx", "comm_helpers", "torchvision", "pandas"}


def _snapshot():
    """What the harness must restore: their modules and the stand-ins absent (unless they were
    there before), the import path and finders, the working directory, bytecode writing."""
    theirs = {n: id(m) for n, m in sys.modules.items() if n.partition(".")[0] in MANAGED}
    return (theirs, list(sys.path), list(sys.meta_path), os.getcwd(), sys.dont_write_bytecode)


def test_harness_runs_their_main_and_cleans_up(tmp_path):
    repo = _fake_repo(tmp_path)
    with pytest.raises(TabError):
        compile(FAKE_TEST, "test.py", "exec")
    cifar = fake_cifar(train=40, test=20)
    train_parts, test_parts = sbs.partition(cifar, 10, 2, 20, 0)
    model = make_model("fedrep_cnn", 10, 0, device="cpu", widths=FEDREP_WIDTHS["cifar10"])
    args = sbs.authors_args("fedrep", clients=10, classes=2, rounds=3, participation=0.5)
    x = sbs.AuthorsCifar(cifar.x_test[:4], cifar.y_test[:4], train=False).xn
    with torch.no_grad():
        probe = (x, torch.log_softmax(model(x), 1))
    before = _snapshot()
    out = sbs.run_authors(repo, args, cifar, train_parts, test_parts, model.state_dict(), 0, probe=probe)
    assert _snapshot() == before  # their modules, the stand-ins, the finder, the path and the cwd are gone
    assert out["local"] == [10.0, 20.0, 30.0] and out["mean_last"] == 20.0 and out["final_local"] == 40.0
    assert out["printed_final10"] == 6.0
    assert out["tab_fixed"] == [str(Path("models") / "test.py")]
    assert "utils" in out["stubs"] and "CNNCifar(" in out["output"]
    assert not list(repo.rglob("__pycache__"))  # no bytecode written into their repository
    assert not list((repo / "save").iterdir())  # they wrote into a temporary folder
    # a mapping that computes another function is caught before their training
    wrong = (x, probe[1] + 1.0)
    with pytest.raises(RuntimeError, match="another function"):
        sbs.run_authors(repo, args, cifar, train_parts, test_parts, model.state_dict(), 0, probe=wrong)
    assert _snapshot() == before


def test_cli_runs_both_sides_and_writes_records(tmp_path, monkeypatch, capsys):
    repo = _fake_repo(tmp_path)
    monkeypatch.setattr(sbs.D, "load_cifar", lambda name, **kw: fake_cifar(train=40, test=20))
    for out in (tmp_path / "record.json", tmp_path / "record.md"):
        record = sbs.main(["--fedrep-repo", str(repo), "--alg", "fedrep", "--clients", "10", "--classes", "2",
                           "--train-per-client", "20", "--rounds", "1", "--participation", "0.5", "--seeds", "0",
                           "--out", str(out), "--note", "A small check."])
        r = record["results"]["fedrep"]["0"]
        assert r["authors"]["local"] == [10.0] and len(r["ours"]["per_round"]) == 1
        assert 0 <= r["ours"]["accuracy"] <= 100 and r["equal_train_sizes"]
        assert record["provenance"]["tab_fixed"] == [str(Path("models") / "test.py")]
    saved = json.loads((tmp_path / "record.json").read_text())
    assert saved["settings"]["clients_per_round"] == 5 and "output" not in saved["results"]["fedrep"]["0"]["authors"]
    md = (tmp_path / "record.md").read_text()
    assert md.startswith("# The FedRep authors' code") and "A small check." in md and "Never-sampled clients" in md
    printed = capsys.readouterr().out
    assert "authors (last k mean)" in printed and "fedrep seed 0 ours:" in printed


@pytest.mark.parametrize("extra, message", [
    (["--participation", "0.35"], "samples 3 clients per round in their code"),
    (["--participation", "0"], "--participation must be in"),
    (["--clients", "5", "--classes", "3"], "multiple of 10"),
    (["--classes", "11"], "at most 10"),
    (["--rounds", "0"], "--rounds must be at least 1"),
    (["--seeds", "1", "1"], "distinct"),
    (["--seeds", "-1"], "non-negative"),
    (["--out", "record.txt"], ".json or .md"),
])
def test_cli_refuses_bad_settings(tmp_path, capsys, extra, message):
    repo = _fake_repo(tmp_path)
    with pytest.raises(SystemExit) as e:
        sbs.main(["--fedrep-repo", str(repo), "--clients", "10"] + extra)
    assert e.value.code == 2 and message in capsys.readouterr().err


def test_cli_names_a_repository_without_main_fedrep(tmp_path, capsys):
    with pytest.raises(SystemExit):
        sbs.main(["--fedrep-repo", str(tmp_path)])
    assert str(tmp_path / "main_fedrep.py") in capsys.readouterr().err
    with pytest.raises(SystemExit):
        sbs.main(["--fedrep-repo", str(tmp_path / "nowhere")])
    assert "no such directory" in capsys.readouterr().err
