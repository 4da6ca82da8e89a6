"""LG-FedAvg (Liang et al., 2020), as compared in the FedRep paper: local bodies
(representations) kept by each client, a global head averaged by the server; joint local
updates. Runs on :func:`replearn.neural.run_spec` (``algorithm_spec("lg_fedavg")``).
"""

from .base import SpecAlgorithm


class LGFedAvg(SpecAlgorithm):
    name, row, key = "LG-FedAvg", 9, "lg_fedavg"


ALGORITHM = LGFedAvg()
