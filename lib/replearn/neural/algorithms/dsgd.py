"""D-SGD, distributed SGD (Collins, Hassani, Mokhtari, Shakkottai, 2022, Sec. 5.2): FedAvg with
one local step per round (tau = 1), so the server averages after every minibatch step, the
baseline against which the paper shows that FedAvg's local updates learn a representation.

:func:`matched_config` gives D-SGD as many local updates as FedAvg with tau steps and T rounds.
"""

from dataclasses import replace

from replearn import neural
from replearn.neural.algorithms.base import Summary, joint_names
from replearn.neural.algorithms.fedavg import FedAvg


class DSGD(FedAvg):
    name, table1_row, paper_accuracy = "D-SGD", None, {}
    summary = Summary(
        shares="the whole model (weighted average), after every local step",
        personal="nothing",
        local_objective="nothing: one SGD step on its loss per round",
        cite="collins2022fedavg")

    def phases(self, model, cfg, options):
        return (neural.Phase(joint_names(model), 1, cfg.local_epochs),)


def matched_config(cfg: neural.TrainConfig) -> neural.TrainConfig:
    """D-SGD settings making as many local updates as FedAvg with ``cfg`` (tau steps, T rounds):
    T * tau rounds of one step, evaluated every tau rounds, accuracy averaged over the same
    stretch of training (Collins et al., 2022, Sec. 5.2)."""
    if cfg.local_steps is None:
        raise ValueError("matched_config needs cfg.local_steps (tau); epochs differ per client")
    tau = cfg.local_steps
    return replace(cfg, rounds=cfg.rounds * tau, local_steps=1, eval_every=cfg.eval_every * tau,
                   last_rounds=cfg.last_rounds * tau)


ALGORITHM = DSGD()
