"""FedRep (Collins, Hassani, Mokhtari, Shakkottai, 2021, Alg. 1): a shared body (representation)
and a personal head per client; each round a sampled client first trains its head with the
body frozen (``head_epochs``/``head_steps``, 10 epochs in the paper), then the body with the
head frozen (``local_epochs``/``local_steps``); the server averages the bodies. Declares its
split and its two phases and inherits the default client update of
:class:`~replearn.neural.algorithms.base.Algorithm`.
"""

from replearn import neural
from replearn.neural.algorithms.base import Algorithm, Summary, table1_accuracy


class FedRep(Algorithm):
    name, table1_row = "FedRep", 14
    paper_accuracy = table1_accuracy(87.70, 75.68, 83.27, 79.15, 56.10)
    summary = Summary(
        shares="the body (all layers below the head)",
        personal="the head (last layer)",
        local_objective="nothing to the loss; the head is trained first (body frozen, 10 epochs), "
                        "then the body (head frozen)",
        cite="collins2021fedrep")

    def personal_names(self, model, options):
        return neural.split_body_head(model)[1]

    def phases(self, model, cfg, options):
        body, head = neural.split_body_head(model)
        return (neural.Phase(head, cfg.head_steps, cfg.head_epochs), neural.Phase(body, cfg.local_steps, cfg.local_epochs))

    def cost(self, cfg, options):
        """The head's epochs, then the body's, every round."""
        run_cfg, body_epochs, batched = super().cost(cfg, options)
        return run_cfg, body_epochs + cfg.head_epochs * self.models, batched

    def check(self, model, cfg, options):
        if cfg.head_steps is None and cfg.head_epochs < 1:
            raise ValueError("FedRep needs head_epochs >= 1 or head_steps")


ALGORITHM = FedRep()
