"""Short calls of the engine for the tests: registry runs by the engine's old function keys, and
fine-tuning with the keyword arguments the tests use (each a plain call of the public API)."""

from replearn import neural
from replearn.neural import algorithms

#: The registry name of each key the parametrised tests use.
NAMES = {"fedavg": "FedAvg", "dsgd": "D-SGD", "fedrep": "FedRep", "fedper": "FedPer", "lg_fedavg": "LG-FedAvg",
         "local_only": "Local only"}


def run_key(key, model, clients, cfg, **kwargs) -> neural.FedResult:
    """The registry's algorithm for ``key`` (Local only in the federated rounds, ``epochs=None``)."""
    alg = algorithms.get(NAMES[key])
    options = alg.Options(epochs=None) if key == "local_only" else None
    return alg.run(model, clients, cfg, options, **kwargs)


def finetune(model, clients, *, state=None, epochs=10, part="head", lr=0.01, momentum=0.5, weight_decay=0.0,
             batch_size=10, augment=False, seed=0, vmap_clients=1, **kwargs) -> neural.FedResult:
    """The registry's "Fine-tuning" of ``part`` for ``epochs`` epochs with this SGD."""
    tuning = algorithms.get("Fine-tuning")
    cfg = neural.TrainConfig(lr=lr, momentum=momentum, weight_decay=weight_decay, batch_size=batch_size,
                             augment=augment, seed=seed, vmap_clients=vmap_clients)
    return tuning.run(model, clients, cfg, tuning.Options(part=part, epochs=epochs), state=state, **kwargs)
