"""LG-FedAvg (Liang et al., 2020), as compared in the FedRep paper: each client keeps its own
lower layers (a local representation) and the server averages the top layers; joint local
updates. Which layers are shared follows the FedRep authors' code (``main_fedrep.py`` of
lgcollins/FedRep, ``--alg lg``: ``w_glob_keys`` are ``fc2`` and ``fc3`` of their CIFAR CNN, the
top two layers). Declares its split and inherits the default client update of
:class:`~replearn.neural.algorithms.base.Algorithm`.
"""

from dataclasses import dataclass

from replearn import neural
from replearn.checks import check_int
from replearn.neural.algorithms.base import Algorithm, Summary, table1_accuracy


@dataclass(frozen=True)
class LGOptions:
    """``shared_layers``: how many of the top layers the server averages (default 2, the
    authors' split; 1 shares only the head)."""

    shared_layers: int = 2

    def __post_init__(self):
        check_int(self.shared_layers, "shared_layers", 1)


class LGFedAvg(Algorithm):
    name, table1_row = "LG-FedAvg", 9
    paper_accuracy = table1_accuracy(84.14, 63.02, 77.48, 72.44, 38.76)
    Options = LGOptions
    summary = Summary(
        shares="the top two layers: the head and the layer below it (the authors' fc2, fc3)",
        personal="the layers below (a local representation)",
        local_objective="nothing: all layers trained jointly",
        cite="liang2020lgfedavg")

    def shared_names(self, model, options):
        return neural.top_layers(model, options.shared_layers)

    def personal_names(self, model, options):
        shared = set(self.shared_names(model, options))
        return tuple(n for n, _ in model.named_parameters() if n not in shared)


ALGORITHM = LGFedAvg()
