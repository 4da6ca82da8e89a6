"""FedAvg (McMahan et al., 2017, Alg. 1; Collins et al., 2022, eqs. 2-3).

Each round the sampled clients run ``local_steps`` (tau) SGD steps or ``local_epochs`` epochs
on the whole model from the server's model, which becomes their n_i-weighted average. Everything
is shared, nothing personal, one joint phase: the defaults of
:class:`~replearn.neural.algorithms.base.Algorithm`. No options.
"""

from replearn.neural.algorithms.base import Algorithm, Summary, table1_accuracy


class FedAvg(Algorithm):
    name, table1_row = "FedAvg", 1
    paper_accuracy = table1_accuracy(42.65, 51.78, 44.31, 23.94, 31.97)
    summary = Summary(
        shares="the whole model (weighted average)",
        personal="nothing",
        local_objective="nothing: local SGD on its loss from the server's model",
        cite="mcmahan2017fedavg")


ALGORITHM = FedAvg()
