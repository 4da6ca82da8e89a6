"""FedRep (Collins, Hassani, Mokhtari, Shakkottai, 2021, Alg. 1): a shared body (representation)
and a personal head per client; each round a sampled client first trains its head with the
body frozen (``head_epochs``/``head_steps``, 10 epochs in the paper), then the body with the
head frozen (``local_epochs``/``local_steps``); the server averages the bodies. Runs on
:func:`replearn.neural.run_spec` (``algorithm_spec("fedrep")``).
"""

from replearn.neural.algorithms.base import SpecAlgorithm, Summary, table1_accuracy


class FedRep(SpecAlgorithm):
    name, table1_row, key = "FedRep", 14, "fedrep"
    paper_accuracy = table1_accuracy(87.70, 75.68, 83.27, 79.15, 56.10)
    summary = Summary(
        shares="the body (all layers below the head)",
        personal="the head (last layer)",
        local_objective="nothing to the loss; the head is trained first (body frozen, 10 epochs), "
                        "then the body (head frozen)",
        cite="collins2021fedrep")


ALGORITHM = FedRep()
