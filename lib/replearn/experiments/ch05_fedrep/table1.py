"""Table 1 of Collins, Hassani, Mokhtari, Shakkottai (2021) as data, for book 5.7 and Appendix B.5.7:
its CIFAR columns and accuracies, the methods the CPU default runs, and every option and training
setting the FedRep authors' code (lgcollins/FedRep) sets, with where it sets it."""

from __future__ import annotations

from replearn.neural import algorithms


#: Methods of Table 1 that the CPU default runs, in the paper's order (the paper and gpu
#: profiles run every method of Table 1, :func:`replearn.neural.algorithms.table1`).
TABLE_METHODS = ("Local only", "FedAvg", "FedAvg+FT", "FedPer", "LG-FedAvg", "FedRep")

#: The clients and methods of the data-per-client comparison (:meth:`TableSettings.per_client_images`):
#: the three methods whose near-paper accuracies sit furthest from the paper's.
DATA_CLIENTS = 40
DATA_METHODS = ("Local only", "FedAvg", "FedRep")
#: The rows of Table 1 whose near-paper gaps the data-per-client runs at the methods' defaults left
#: unmeasured: each runs with the authors' values on those clients (sections ``5.7-m200-authors``, ``5.7-m500-authors``).
GAP_ROWS = ("FedAvg+FT", "FedProx", "FedProx+FT", "SCAFFOLD", "SCAFFOLD+FT", "Fed-MTL", "Per-FedAvg", "LG-FedAvg",
            "L2GD", "APFL", "Ditto", "FedPer")
#: The rows of Table 1 whose first-column gap neither the data per client (with the authors' values,
#: ``5.7-m500-authors``) nor the methods' own defaults (``5.7-defaults``) accounted for, run at
#: their own defaults on the same 40 clients of 500 images (section ``5.7-m500-defaults``: both
#: changes at once); the authors'-loop rows of those methods run there with the authors' values
#: (``5.7-m500-variants``, :data:`LOOP_ROWS_500`).
OPEN_ROWS = ("FedProx", "SCAFFOLD+FT", "L2GD", "Per-FedAvg")
#: The authors' own loops (:data:`AUTHORS_VARIANTS`) run on those 40 clients of 500 images with the
#: authors' values (section ``5.7-m500-variants``): Per-FedAvg's. L2GD's loop diverges there at the
#: step ``main_l2gd.py`` gives for the first column's 100 clients (0.1 with momentum 0.5, fifty steps
#: a round; its run stopped with a FloatingPointError in round 24), so it has no 500-image row.
LOOP_ROWS_500 = ("Per-FedAvg (authors' code)",)

#: Table 1 of Collins et al. (2021): average test accuracy (%) of its methods for (dataset, n
#: clients, S classes per client), r = 0.1, read from each method's file
#: (``paper_accuracy``; the paper's "LG-Fed" is LG-FedAvg, "PerFedAvg" Per-FedAvg).
PAPER_TABLE1 = algorithms.paper_table1()


#: Rows beside Table 1's that run a method as the authors' code runs it, where that is another
#: algorithm than the method's paper (row label -> the registered method it runs).
AUTHORS_VARIANTS = {"Per-FedAvg (authors' code)": "Per-FedAvg", "L2GD (authors' code)": "L2GD"}

#: Every method option the near-paper and paper profiles set as the FedRep authors' code does:
#: (row, option, value, where it is stated). A method's own default is its paper's algorithm
#: (the option's docstring says where its value comes from); :func:`authors_options` builds the
#: profiles' options from this table, so each value is stated once.
AUTHORS_OPTIONS = (
    ("Local only", "epochs", 100, "scripts/*.sh (--epochs 100, which main_local.py reads as each client's epochs)"),
    ("FedProx", "mu", 0.1, "utils/options.py (--mu 0.1)"),
    ("SCAFFOLD", "global_lr", 0.1, "utils/options.py (--lr_g 0.1)"),
    ("SCAFFOLD", "max_grad_norm", 10.0, "models/Update.py (LocalUpdateScaffold: clip_grad_norm_(max_norm=10) "
                                        "after backward())"),
    ("Ditto", "lam", 1.0, "utils/options.py (--lam_ditto 1)"),
    ("APFL", "alpha", 0.75, "utils/options.py (--alpha_apfl 0.75)"),
    ("APFL", "adapt_alpha", False, "main_apfl.py (alpha is never updated)"),
    ("L2GD", "p", 0.9, "main_l2gd.py (p = 0.9)"),
    ("L2GD", "lam", 4.5, "main_l2gd.py (--lambda_l2gd 0.5 in the pull lr·λ with lr = α/(n(1−p)); Alg. 1's pull "
                         "ηλ/(np) with the same local step needs λ = 0.5 · 0.9 / 0.1 = 4.5)"),
    ("L2GD (authors' code)", "p", 0.9, "main_l2gd.py (p = 0.9)"),
    ("L2GD (authors' code)", "lam", 4.5, "main_l2gd.py (as for L2GD)"),
    ("L2GD (authors' code)", "coin", "round", "main_l2gd.py (one coin per iteration, for every client at once)"),
    ("Per-FedAvg (authors' code)", "variant", "authors", "main_fedrep.py (--alg maml trains with the plain "
                                                          "LocalUpdate; LocalUpdateMAML is never called)"))

#: Training settings the authors' code sets for one method or one column: (row or "*", column
#: ``dataset/n/S`` or "*", ``TrainConfig`` field, value, where), applied in order
#: (:meth:`TableSettings.config_for`).
AUTHORS_TRAIN = (
    ("Local only", "*", "weight_decay", 0.0, "main_local.py (SGD with momentum 0.5 and no weight decay)"),
    ("L2GD (authors' code)", "*", "participation", 1.0, "main_l2gd.py (every client in every iteration)"),
    ("*", "cifar10/1000/2", "local_epochs", 5, "scripts/FedAvg_cifar10_2shards_1000users.sh (--local_ep 5)"),
    ("L2GD", "cifar10/1000/2", "lr", 0.001, "main_l2gd.py (lr = alpha/(num_users·(1−p)) with --alpha_l2gd 1: a local "
                                            "step of 0.01 at 1000 clients, 0.1 at 100; ours is lr/(1−p))"),
    ("L2GD (authors' code)", "cifar10/1000/2", "lr", 0.001, "main_l2gd.py (as for L2GD)"),
    ("FedRep", "cifar10/100/5", "local_epochs", 5, "scripts/FedRep_cifar10_5shards.sh (--local_rep_ep 5)"),
    ("FedRep", "cifar10/1000/2", "local_epochs", 5, "scripts/FedRep_cifar10_2shards_1000users.sh (--local_rep_ep 5)"),
    ("FedRep", "cifar100/100/5", "local_epochs", 5, "scripts/FedRep_cifar100_5shards.sh (--local_rep_ep 5)"),
    ("FedRep", "cifar100/100/20", "local_epochs", 5, "scripts/FedRep_cifar100_20shards.sh (--local_rep_ep 5)"))


def column_key(partition) -> str:
    """A column (dataset, n, S) as settings and results files name it: ``"cifar10/100/2"``."""
    return "/".join(map(str, partition))


def column_slug(partition) -> str:
    """A column in section names: ``("cifar100", 100, 20)`` -> ``"c100-100-20"``."""
    name, n, S = partition
    return f"c{name.removeprefix('cifar')}-{n}-{S}"


def authors_options(rows) -> dict:
    """``{row: options}`` for the rows ``rows`` of a table, with the values of
    :data:`AUTHORS_OPTIONS` (a row without any keeps its method's defaults and is left out)."""
    out = {}
    for row, option, value, _ in AUTHORS_OPTIONS:
        if row in rows:
            out.setdefault(row, {})[option] = value
    return {row: algorithms.get(AUTHORS_VARIANTS.get(row, row)).Options(**kw) for row, kw in out.items()}


def authors_train(rows, partitions) -> tuple:
    """The rows of :data:`AUTHORS_TRAIN` that concern ``rows`` and ``partitions``, without their sources."""
    columns = {column_key(p) for p in partitions}
    return tuple((row, col, name, value) for row, col, name, value, _ in AUTHORS_TRAIN
                 if row in ("*", *rows) and col in ("*", *columns))


#: Every row the near-paper columns run: Table 1's methods, then :data:`AUTHORS_VARIANTS`.
AUTHORS_ROWS = (*algorithms.table1(), *AUTHORS_VARIANTS)


def authors_rows(rows, partitions) -> dict:
    """The settings that run ``rows`` on ``partitions`` as the authors' code does: the rows, their
    options (:func:`authors_options`), the rows of :data:`AUTHORS_VARIANTS` among them, and the
    training settings of :data:`AUTHORS_TRAIN` that concern them."""
    rows = tuple(rows)
    return {"partitions": tuple(partitions), "methods": rows, "options": authors_options(rows),
            "variants": {r: m for r, m in AUTHORS_VARIANTS.items() if r in rows},
            "train_overrides": authors_train(rows, partitions)}


def column_label(partition: tuple[str, int, int]) -> str:
    """A partition (dataset, n, S) in words, for captions: ``"CIFAR-10, n = 100, S = 2"``."""
    name, n, S = partition
    return f"{name.upper().replace('CIFAR', 'CIFAR-')}, n = {n}, S = {S}"


def paper_reference(partition: tuple[str, int, int]) -> tuple[tuple[str, int, int], dict]:
    """The Table 1 column to show beside ``partition``: the same (dataset, n, S) if the paper
    has it, else the paper's column with the same dataset and S and n = 100."""
    name, n, S = partition
    key = partition if partition in PAPER_TABLE1 else (name, 100, S)
    if key not in PAPER_TABLE1:
        raise ValueError(f"Table 1 has no column for {name} with S = {S}")
    return key, PAPER_TABLE1[key]
