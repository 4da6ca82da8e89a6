"""FedPer (Arivazhagan et al., 2019): a shared body averaged by the server, a personal head per
client; body and head are updated jointly in the local steps (the same number of updates for
both, unlike FedRep). Declares its split (personal: the head) and inherits the default client
update of :class:`~replearn.neural.algorithms.base.Algorithm`.
"""

from replearn import neural
from replearn.neural.algorithms.base import Algorithm, Summary, table1_accuracy


class FedPer(Algorithm):
    name, table1_row = "FedPer", 13
    paper_accuracy = table1_accuracy(87.13, 73.84, 81.73, 76.00, 55.68)
    summary = Summary(
        shares="the body (all layers below the head)",
        personal="the head (last layer)",
        local_objective="nothing: body and head trained jointly, the same steps for both",
        cite="arivazhagan2019fedper")

    def personal_names(self, model, options):
        return neural.split_body_head(model)[1]


ALGORITHM = FedPer()
