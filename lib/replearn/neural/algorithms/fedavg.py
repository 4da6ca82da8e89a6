"""FedAvg (McMahan et al., 2017, Alg. 1; Collins et al., 2022, eqs. 2-3).

Each round the sampled clients run ``local_steps`` (tau) SGD steps or ``local_epochs`` epochs
on the whole model from the server's model, which becomes their n_i-weighted average. Everything
is shared, one joint phase: the defaults of :class:`~replearn.neural.algorithms.base.Algorithm`.
The one option says which model a client is tested with (:class:`FedAvgOptions`): the server's
(default: nothing personal), or the client's own locally updated copy, which the FedRep authors'
``main_fedrep.py`` prints as FedAvg's average accuracy; the training is the same either way.
"""

from dataclasses import dataclass
from typing import ClassVar

from replearn.neural.algorithms.base import Algorithm, Params, Summary, table1_accuracy

EVALUATE = ("global", "local")


@dataclass(frozen=True)
class FedAvgOptions:
    """``evaluate``: the model each client is tested with. ``"global"``: the server's model (the
    book's FedAvg row). ``"local"``: its locally updated copy, the model it held after its last
    local update, and the current server model before its first (``main_fedrep.py`` of
    lgcollins/FedRep: each client's copy of the global model trains in place and, until the
    client is first sampled, shares its memory with the global model; the log's
    ``Average accuracy`` line is these copies', the global model's is printed separately)."""

    evaluate: str = "global"
    step_scales: ClassVar[tuple[str, ...]] = ()

    def __post_init__(self):
        if self.evaluate not in EVALUATE:
            raise ValueError(f"evaluate must be one of {EVALUATE}, got {self.evaluate!r}")


class FedAvg(Algorithm):
    name, table1_row = "FedAvg", 1
    paper_accuracy = table1_accuracy(42.65, 51.78, 44.31, 23.94, 31.97)
    Options = FedAvgOptions
    summary = Summary(
        shares="the whole model (weighted average)",
        personal="nothing",
        local_objective="nothing: local SGD on its loss from the server's model",
        cite="mcmahan2017fedavg")

    def personal_names(self, model, options):
        """Nothing, or with ``evaluate="local"`` the whole model: the locally updated copy."""
        return tuple(n for n, _ in model.named_parameters()) if options.evaluate == "local" else ()

    def shared_names(self, model, options):
        return tuple(n for n, _ in model.named_parameters())

    def start_params(self, ctx) -> Params:
        """The server's model, whatever the client keeps."""
        return dict(ctx.global_params)

    def eval_params(self, ctx) -> Params:
        """The server's model, or the client's locally updated copy once it has one."""
        if ctx.personal and all(n in ctx.state for n in ctx.personal):
            return {**ctx.global_params, **{n: ctx.state[n] for n in ctx.personal}}
        return dict(ctx.global_params)


ALGORITHM = FedAvg()
