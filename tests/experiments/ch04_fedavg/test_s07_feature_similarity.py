"""Book 4.7 driver (replearn.experiments.ch04_fedavg.s07_feature_similarity) on tiny settings and the
real CIFAR-10 subset (skipped without it)."""

from dataclasses import replace

import numpy as np
import pytest
import torch

from replearn.book import wording as words
from replearn.experiments.ch04_fedavg import s07_feature_similarity as s07

TINY_TRAIN = replace(s07.SimilaritySettings().train, batch_size=5, participation=0.1)


def test_paper_profile_follows_the_paper():
    d, p = s07.SimilaritySettings(), s07.SimilaritySettings.profile("paper")
    assert (p.clients, p.alpha, p.taus, p.model) == (100, 0.6, (1, 5, 10, 50), "fedavg_cnn")
    assert (p.train.lr, p.train.momentum, p.train.batch_size, p.train.participation, p.dtype) == \
        (0.01, 0.5, 10, 0.1, "float32")
    assert all(p.total_steps % tau == 0 for tau in p.taus)
    assert d.dtype == "float64" and len(d.seeds) >= 3
    long = s07.SimilaritySettings.profile("long")
    # near-paper: the paper's network, clients and optimiser; fewer local updates, subset data, 2 seeds
    assert long.total_steps > d.total_steps and len(long.seeds) >= 2 and not long.full_data
    assert long.total_steps < p.total_steps
    assert (long.model, long.channels, long.hidden, long.clients, long.train, long.dtype) == \
        (p.model, p.channels, p.hidden, p.clients, p.train, p.dtype)


def test_bad_settings_raise_at_construction():
    with pytest.raises(ValueError, match="multiple of every tau"):
        s07.SimilaritySettings(total_steps=10, taus=(1, 3))
    with pytest.raises(ValueError, match="participation"):
        s07.SimilaritySettings(train=replace(s07.SimilaritySettings().train, participation=0.0))
    with pytest.raises(ValueError, match="taus must be distinct"):
        s07.SimilaritySettings(taus=(1, 1))
    with pytest.raises(ValueError, match="taus"):
        s07.SimilaritySettings(taus=())
    with pytest.raises(ValueError, match="alpha"):
        s07.SimilaritySettings(alpha=0.0)
    with pytest.raises(ValueError, match="dtype"):
        s07.SimilaritySettings(dtype="half")
    with pytest.raises(ValueError, match="seeds"):
        s07.SimilaritySettings(seeds=(1, 1))
    with pytest.raises(ValueError, match="probe_per_class"):
        s07.SimilaritySettings(probe_per_class=1)


def test_similarity_tiny(cifar10):
    s = s07.SimilaritySettings(total_steps=4, train=TINY_TRAIN, taus=(1, 2), probe_per_class=5,
                               test_per_client=5)
    r = s07.run_similarity(s, cifar=cifar10)
    assert r.taus == (1, 2) and "CIFAR-10" in r.data
    for tau in r.taus:
        M = r.matrices[tau]
        assert M.shape == (10, 10) and torch.allclose(M, M.T)
        assert -1 <= float(M.min()) and float(M.max()) <= 1 + 1e-9
        assert r.gap[tau] == pytest.approx(r.intra(tau) - r.inter(tau))
        assert 0 <= r.probe_accuracy[tau] <= 1
        assert 0 <= r.client_accuracy[tau] <= 1
    assert int(r.client_sizes.sum()) == len(cifar10.y_train)
    again = s07.run_similarity(s, cifar=cifar10)
    assert all(torch.equal(r.matrices[t], again.matrices[t]) for t in r.taus)
    assert again.probe_accuracy == r.probe_accuracy and again.client_accuracy == r.client_accuracy


def _similarity_matrices():
    g = np.random.default_rng(0)
    out = {}
    for tau in (1, 5):
        A = g.uniform(0.2, 0.6, size=(4, 4))
        out[tau] = (A + A.T) / 2 + np.eye(4) * 0.3
    return out


def test_draw_explorer_shows_the_matrix_and_the_row_against_dsgd():
    from matplotlib.figure import Figure

    mats = _similarity_matrices()
    fig = Figure()
    left, right = fig.subplots(1, 2)
    s07.draw_explorer((left, right), mats, list("abcd"), 5, 2)
    assert np.array_equal(left.images[0].get_array(), mats[5])
    heights = [p.get_height() for p in right.patches]
    assert np.allclose(heights, np.concatenate([mats[5][2], mats[1][2]]))   # FedAvg's row, then D-SGD's
    assert left.get_title() == "FedAvg, τ = 5" and right.get_title() == "row of class c"
    with pytest.raises(ValueError, match="no matrix for tau"):
        s07.draw_explorer((left, right), mats, list("abcd"), 7, 0)
    with pytest.raises(ValueError, match="class index"):
        s07.draw_explorer((left, right), mats, list("abcd"), 5, 4)
    with pytest.raises(ValueError, match="K class names"):
        s07.draw_explorer((left, right), mats, list("abc"), 5, 0)


def test_explorer_redraws_for_model_and_class():
    panel = s07.explorer(_similarity_matrices(), list("abcd"))
    out = panel.children[-1]
    model, cls = panel.children[0].children
    assert model.value == 5 and len(out.outputs) == 1
    first = out.outputs[0]["data"]["image/png"]
    cls.value = 3
    second = out.outputs[0]["data"]["image/png"]
    model.value = 1
    assert len({first, second, out.outputs[0]["data"]["image/png"]}) == 3
    with pytest.raises(ValueError, match="no matrix"):
        s07.explorer(_similarity_matrices(), list("abcd"), tau=3)


# --------------------------------------------------------------------------- what the page shows


from cifar_fixtures import RESULTS
from replearn.book import results



def _runs(n=3):
    out = []
    for seed in range(n):
        g = torch.Generator().manual_seed(seed)
        mats = {}
        for tau, diag in ((1, 0.5), (5, 0.7), (20, 0.9)):
            M = torch.full((10, 10), 0.4, dtype=torch.float64) + 0.01 * torch.rand(10, 10, generator=g,
                                                                                  dtype=torch.float64)
            mats[tau] = (M + M.T) / 2 + torch.eye(10, dtype=torch.float64) * (diag - 0.4)
        out.append(s07.SimilarityResult((1, 5, 20), mats, {t: float(torch.diagonal(m).mean() - 0.4) for t, m in mats.items()},
                                        {1: 0.2 + 0.01 * seed, 5: 0.25, 20: 0.3 - 0.01 * seed},
                                        {1: 0.5, 5: 0.5, 20: 0.5}, tuple("abcdefghij"), "CIFAR-10", torch.ones(4)))
    return out


def test_statistics_glue_tables_and_checks(glued):
    runs = _runs()
    vals = s07.statistics(runs)
    assert list(vals) == ["intra", "inter", "gap", "probe acc"] and list(vals["gap"]) == [1, 5, 20]
    assert vals["intra"][5] == [r.intra(5) for r in runs]
    shown = s07.glue_statistics(vals, "sim")
    assert glued["sim-probe-acc-20"] == shown["probe acc"][20].text and "sim-gap-5-mean" in glued
    assert shown["probe acc"][5].mean.startswith("25.0")   # the probe accuracy in percent
    long_names = s07.glue_statistics(vals, "sim-long", labels={"probe acc": "acc"})
    assert "sim-long-acc-1-sd" in glued and long_names["gap"][1].text == shown["gap"][1].text
    diffs = s07.glue_gap_diffs(vals["gap"], "sim")
    assert list(diffs) == [(1, 5), (5, 20)] and glued["sim-gapdiff-1-5"] == diffs[(1, 5)].text
    table = s07.statistics_table(shown, "caption")   # one unit: cosine similarity, no accuracy
    assert table.header == ["method", "intra-class", "inter-class", "gap (intra − inter)"]
    assert table.rows[0] == ["D-SGD", shown["intra"][1].text, shown["inter"][1].text, shown["gap"][1].text]
    checks = s07.gap_checks(vals["gap"])
    assert [c[0] for c in checks] == ["sim-v-5", "sim-v-20", "sim-v-grow"]
    assert bool(checks[0][2]) and checks[0][3]["paper"] == s07.PAPER_GAP and "scale" not in checks[0][3]
    assert checks[0][3]["holds"] == "holds" and checks[0][3]["fails"] == "not separated (n = 3)"
    assert checks[0][3]["opposite"] == "opposite"
    long = s07.gap_checks(vals["gap"], scale="long")
    assert long[0][0] == "sim-long-v-5" and long[0][1].startswith("near-paper run: ") and long[-1][3]["scale"] == "long"


def test_settings_in_words():
    text = repr(words.settings_table(s07.settings_rows(s07.SimilaritySettings())))
    assert "the FedRep CNN" in text and "narrowed to 16 and 32 channels" in text and "3 of 10 clients" in text
    assert "D-SGD (τ = 1) and FedAvg with τ = 5, 20" in text and "3 (0, 1 and 2)" in text
    for python in ("fedrep_cnn", "(16, 32", "[", "None", "True", "TrainConfig"):
        assert python not in text, python
    long = repr(words.settings_table(s07.settings_rows(s07.SimilaritySettings.profile("long"))))
    assert "the paper's CNN, three blocks of two convolutions (32, 64 and 128 channels)" in long
    with pytest.raises(ValueError, match="no field 'nope'"):
        words.get(s07.SimilaritySettings(), "nope")
    with pytest.raises(ValueError, match="same settings in the same order"):
        words.side_by_side([("a", "1")], [("b", "2")])
    with pytest.raises(ValueError, match="rows of 3 non-empty strings"):
        words.settings_table([("a", "1")], columns=("x", "y"))


def test_round_written_out_is_the_engines(cifar10):
    """The page's cell that writes out one FedAvg round with the engine's parts gives the engine's
    round: the same sampled clients, batches, SGD steps and weighted average."""
    from replearn import neural
    from replearn.backend import make_generator
    from replearn.neural import algorithms

    s = s07.SimilaritySettings(total_steps=4, train=TINY_TRAIN, taus=(1, 2))
    clients = s07.federation(s, cifar10)
    assert clients.n_clients == s.clients and int(clients.train_sizes.sum()) == len(cifar10.y_train)
    model = s.make(10, seed=0, device=clients.device)
    worker, names = neural.LocalSGD(model), [n for n, _ in model.named_parameters()]
    sizes = clients.train_sizes.tolist()
    w = {n: p.detach().clone() for n, p in model.named_parameters()}
    plan = neural.plan_round(sizes, [neural.Phase(tuple(names), 2, 1)], s.train, make_generator(s.seed))
    total = sum(sizes[i] for i in plan.clients)
    new = {n: torch.zeros_like(p) for n, p in w.items()}
    for i in plan.clients:
        w_i, _ = worker.train(w, names, clients.x_train[i], clients.y_train[i], plan.batches[i][0], s.train)
        for n in names:
            new[n] += sizes[i] / total * w_i[n]
    engine = algorithms.run("FedAvg", model, clients, replace(s.config(2), rounds=1, eval_every=1)).state
    assert all(torch.allclose(new[n], engine[n], rtol=0, atol=1e-12) for n in names)


def test_long_run_helpers_read_the_committed_file(glued):
    long = results.load("4.7", "long", root=RESULTS)
    lvals = s07.long_statistics(long)
    assert list(lvals["gap"]) == [int(t) for t in long.settings["taus"]]
    assert lvals["probe acc"][1] == long.values("probe_accuracy", "1")
    rows = words.side_by_side(s07.settings_rows(long.settings), s07.settings_rows(s07.SimilaritySettings()))
    assert rows[0][0] == "clients" and rows[0][1].startswith("100, ") and rows[0][2].startswith("10, ")
    table = s07.paper_table(lvals, s07.glue_statistics(lvals, "sim-long"))
    assert len(table.rows) == 4 and table.header[2] == f"near-paper run ({len(long.seeds)} seeds)"
    assert table.rows[-1][2].endswith("points") and table.rows[-1][2].split(":")[0] in (
        "holds", "opposite", f"not separated (n = {len(long.seeds)})")


def test_figures():
    import matplotlib.pyplot as plt

    runs = _runs()
    fig = s07.plot_matrices(runs[0], seed=0)
    assert len(fig.axes) == 4 and fig.axes[0].get_title().startswith("D-SGD")   # three maps and a colour bar
    plt.close(fig)
