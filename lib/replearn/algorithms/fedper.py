"""FedPer (Arivazhagan et al., 2019): a shared body averaged by the server, a personal head per
client; body and head are updated jointly in the local steps (the same number of updates for
both, unlike FedRep). Runs on :func:`replearn.neural.run_spec` (``algorithm_spec("fedper")``).
"""

from .base import SpecAlgorithm


class FedPer(SpecAlgorithm):
    name, row, key = "FedPer", 13, "fedper"


ALGORITHM = FedPer()
