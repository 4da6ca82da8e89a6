"""FedPer (Arivazhagan et al., 2019): a shared body averaged by the server, a personal head per
client; body and head are updated jointly in the local steps (the same number of updates for
both, unlike FedRep). Runs on :func:`replearn.neural.run_spec` (``algorithm_spec("fedper")``).
"""

from replearn.neural.algorithms.base import SpecAlgorithm, Summary


class FedPer(SpecAlgorithm):
    name, row, key = "FedPer", 13, "fedper"
    summary = Summary(
        shares="the body (all layers below the head)",
        personal="the head (last layer)",
        local_objective="nothing: body and head trained jointly, the same steps for both",
        cite="arivazhagan2019fedper")


ALGORITHM = FedPer()
