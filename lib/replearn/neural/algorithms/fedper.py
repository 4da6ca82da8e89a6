"""FedPer (Arivazhagan et al., 2019): a shared body averaged by the server, a personal head per
client; body and head are updated jointly in the local steps (the same number of updates for
both, unlike FedRep). Runs on :func:`replearn.neural.run_spec` (``algorithm_spec("fedper")``).
"""

from replearn.neural.algorithms.base import SpecAlgorithm, Summary, table1_accuracy


class FedPer(SpecAlgorithm):
    name, table1_row, key = "FedPer", 13, "fedper"
    paper_accuracy = table1_accuracy(87.13, 73.84, 81.73, 76.00, 55.68)
    summary = Summary(
        shares="the body (all layers below the head)",
        personal="the head (last layer)",
        local_objective="nothing: body and head trained jointly, the same steps for both",
        cite="arivazhagan2019fedper")


ALGORITHM = FedPer()
