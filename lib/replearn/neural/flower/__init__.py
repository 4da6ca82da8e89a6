"""The book's federated algorithms on Flower (``flwr``; Beutel et al., 2020).

Every algorithm of the registry :mod:`replearn.neural.algorithms` -- every name of
``algorithms.names()``, and a method a reader adds with ``algorithms.register(obj)`` -- runs
with Flower doing the orchestration: the server's round loop and the message passing are
Flower's (a ``ServerApp`` running a ``Strategy``), the algorithm's client step runs on the node
that holds the data (a ``ClientApp``), and its server step in the strategy. The steps are the
algorithm's own hooks, the ones the in-process engine's round loop calls
(:class:`replearn.neural.ClientRound`, :class:`replearn.neural.ClientUpdate`), so a Flower
run reproduces the in-process one:

- on the **node** (:func:`client_app`): ``client_update`` (its local training: FedAvg's SGD,
  FedProx's proximal steps, SCAFFOLD's corrected ones, Ditto's two models, ...) and
  ``eval_params`` (what the client is tested with); the client's own state (SCAFFOLD's control
  variate, Ditto's personal model, FedRep's head, ...) stays on the node between rounds, in its
  ``Context.state`` (Flower's "Design stateful ClientApps"): only the algorithm's upload
  leaves the node;
- on the **server** (:class:`ReplayStrategy`): the server's half of a round that the
  in-process loop runs too (:mod:`replearn.neural.engine.server`): ``plan_round`` (the sampled
  clients and their minibatches, drawn from one generator seeded with ``cfg.seed``), the
  algorithm's ``draw``, ``init_server``, ``broadcast`` and ``server_update`` (applied to the
  n_i-weighted mean of the uploads, summed in client order).

A round: the strategy plans it, makes the algorithm's draws and broadcast, and sends every
sampled node the server's parameters and state, the broadcast, its draw and its batch
indices (tensors in ``ArrayRecord`` s, the rest in a ``ConfigRecord``; any nested dicts, lists
and tuples of tensors and numbers, :func:`pack`). The node rebuilds the round's
:class:`~replearn.neural.ClientRound` from these and its own data and state, runs
``client_update`` and replies with the upload and its loss; it keeps its new state as
*pending*. The strategy screens the replies (the fault contract below), averages the kept
uploads with weights n_i and calls ``server_update``; a round that keeps no upload raises a
``RuntimeError`` naming the dropped replies (after ``max_empty_rounds`` such rounds, default
0). The next message to the node says which
of its rounds the server kept (``commit-round``), and the node commits its pending state only
if that round's upload was kept, so a dropped update leaves the node's state as if it had not
trained. On evaluated rounds every node with test data evaluates ``eval_params`` with its
state (a node without test data joins, trains and is left out of the test averages, as in
process). After the last round each node sends the parameters it is evaluated with for the
algorithm's ``personal_names`` (``FedResult.local``; ``fetch_personal=False`` keeps them on
the nodes) and, if asked (``fetch_states=True``), its state (``FedResult.extras["clients"]``).
A client's state leaves its node during training only if the algorithm's ``broadcast`` reads
it (Fed-MTL's regulariser needs the round's models): the strategy hands ``broadcast`` a mapping
that fetches the sampled nodes' states on first access; or with ``cfg.first_visit =
"average"``, where the server fetches each round's kept clients' states to average their
personal parts. With ``cfg.first_visit`` other than ``"initial"`` the server sends every node,
with its next message, what a client not yet sampled starts from
(:func:`replearn.neural.engine.server.first_visit_params`), as in process.

Runs return a :class:`replearn.neural.FedResult`, as the in-process engine does:

- :func:`run_inprocess` (``algorithm``, ``model``, ``clients``, ``cfg``, ``options``): the
  two apps in this process through :class:`InProcessGrid`, a ``Grid`` that hands each message
  to the ``ClientApp`` (no Ray, no network); :func:`run_simulation`: the same apps on
  Flower's simulation engine (``flwr.simulation.run_simulation``, Ray backend), one virtual
  SuperNode per client. Both resolve a registered name (or take an algorithm object) and call
  its ``run`` with a Flower *runner* (:func:`inprocess_runner`, :func:`simulation_runner`):
  ``runner(algorithm, model, clients, cfg, options, *, state, callback, workers) ->
  FedResult`` runs one algorithm's rounds on Flower, so a method built from stages (Local
  only's one long round, the +FT methods' base run then fine-tuning) runs every stage on
  Flower.
- :func:`client_app`, :func:`server_app`: the apps themselves, for ``flwr run`` and a
  deployment (the book's appendix page "Running the algorithms on Flower"). They run one
  algorithm's rounds; a method built from stages is run as its stages.

The nodes' ``model_fn`` gives the architecture; the starting parameters (the server's
``model_fn()``'s, or ``state``) are sent by the server with its first message to each node.
Each run of rounds' ``FedResult.extras["flower"]`` is a :class:`FlowerRun`: Flower's
``Result`` (per-round aggregated metrics) and the strategy (participants, dropped replies);
a method built from stages keeps its stages' results as in process. The iterates,
``train_loss``, ``test_accuracy``, ``participants``, ``final``, ``local`` and the server
state are the in-process run's bit for bit when the nodes compute as the engine does (one
intra-op thread on a CPU, which :func:`run_inprocess` sets; ``cfg.vmap_clients = 1``);
otherwise to float rounding.

**Same run on both sides.** The server sends with every message its *fingerprint*: the
algorithm's name and the ``repr`` of its options and of the ``TrainConfig``
(:func:`~replearn.neural.flower.common.fingerprint`). A node refuses a message whose
fingerprint differs from its own, and echoes its own in every reply; the server refuses a
node whose fingerprint differs at discovery (an error naming what differs) and drops any later
reply that does not echo its fingerprint, so nodes built for another algorithm, other options
or other training settings cannot train the server's model silently.

**Fault contract.** One faulty node (crashing, hanging, slow, returning NaN, blown-up,
mis-shaped or duplicated replies) can neither corrupt the server's model nor stop the run. A
*hostile* node is only partly defended against; precisely (see *What is not defended*):

- *Sizes.* The weights of both averages are the sizes each node reported at discovery,
  before training (n_i for the uploads and the training loss, the test-set size for the
  evaluation metrics); the ``num-examples`` a reply claims is ignored (a mismatch is
  logged). Discovery itself is trusted: a node missing or malformed there is an error, and
  so is a size above ``max_size_ratio`` (default :data:`MAX_SIZE_RATIO`) times the median
  of the other nodes' sizes, so one over-report cannot take nearly all the weight.
- *Screening.* A training reply enters the average only if it carries no error, the server's
  fingerprint, exactly one ``ArrayRecord`` (the upload) whose arrays' metadata and decoded
  payloads agree, only finite values, an upload that passes the in-process loop's screening
  (:func:`replearn.neural.engine.guards.check_upload`: named like a model parameter with that
  parameter's dtype and shape, any other floating tensor in the model's dtype), the
  algorithm's upload (its names, dtypes and shapes, the same every round as for
  every registered method: learned from the replies, the one most replies of a round carry,
  fixed for the run once a majority of at least two replies agrees on it; while it is not
  fixed, a round whose replies disagree with no majority keeps none of them, and a server
  step that fails on the kept uploads drops them; once it is fixed, a failing server step is
  an error naming the uploads), a plausible magnitude, a finite ``loss-sum``, an ``n-steps``
  count and a finite ``train_loss`` (NaN after no step, as in process). An evaluation reply enters the
  average only if it carries no error, a finite ``loss >= 0`` and an ``accuracy`` in [0, 1].
  Other metric keys are ignored. A client state a ``broadcast`` reads must be finite and have
  the form (nesting, dtypes, shapes) of the algorithm's ``init_client`` or the one most of the
  round's states have; a node whose state is missing or fails is left out of that round's
  training. The parameters fetched after the last round must be the personal names with the
  global dtypes and shapes, finite (else that client's ``local`` entry is NaN), and fetched
  states obey the rule of the broadcast's.
- *Plausible magnitude.* For an upload tensor named like a parameter, the client's value
  theta_i and the global value theta sent that round must satisfy
  ``||theta_i - theta||_2 <= max_update_ratio * max(||theta||_2, 1)`` (default
  :data:`MAX_UPDATE_RATIO`; ``math.inf`` turns the rule off). For any other upload tensor
  (SCAFFOLD's control variates), with at least three replies, its distance to the replies'
  coordinate-wise median m must be at most ``max_update_ratio * max(||m||_2, median
  distance, 1)``. Local SGD with the book's step sizes moves each tensor by less than its
  norm; a blown-up update (1e30) is far outside. A sanity bound, not a defence against a
  client that crafts plausible updates: see *Robust aggregation*.
- *Replies bound to their messages.* A reply counts for node N only if it answers the
  message the server sent to N (its ``reply_to_message_id``); a reply forged with N's id
  that answers another message is dropped (recorded with client None) and cannot take N's
  slot, so N's genuine reply still counts. At discovery such a reply is an error.
- *Dropping.* Every reply that fails the screening, raises in the ``ClientApp`` (a client
  whose local training gives a non-finite loss, upload or state raises
  ``FloatingPointError`` there, where the in-process engine stops the run), comes from a node
  that was not asked, or does not arrive within ``round_timeout`` is left out and recorded in
  ``strategy.dropped[round]`` as a :class:`Dropped` (client, stage, reason), with a warning
  in the ``flwr`` log. The round's mean upload is the size-weighted mean over the kept
  replies, and ``server_update`` gets the kept clients as the round's ``selected``; a round
  that keeps no training reply leaves the server's parameters and state unchanged and counts
  against ``max_empty_rounds`` (beyond it the run raises). The dropped node's pending state is
  discarded.
- *Robust aggregation.* ``aggregator`` (of :func:`server_app`, :func:`run_inprocess`,
  :func:`run_simulation`) replaces the weighted mean of the screened uploads by one of
  Flower's own robust strategies: ``FedMedian()`` (coordinate-wise median),
  ``FedTrimmedAvg(beta=...)`` (coordinate-wise trimmed mean) or
  ``Krum(num_malicious_nodes=f)`` (the reply closest to its neighbours). With one attacker
  among at least four replies (Krum: n >= 2f + 3), a sign-flipped or crafted update that
  passes the magnitude rule then cannot move any coordinate of the global model outside
  the range of the honest replies (median, trimmed mean with ``beta >= 1/n``), or is never
  chosen (Krum); ``tests/test_flower.py`` checks the three against both attacks. Only for
  algorithms whose server step is the average (the base class's ``server_update``, see
  :func:`averages`): a method with its own server step (SCAFFOLD's) is refused with a
  ``ValueError``. These aggregates ignore the sizes, so they do not reproduce the in-process
  engine's runs.
- *Timeouts.* The server waits at most ``connect_timeout`` seconds (default
  :data:`CONNECT_TIMEOUT`) for the nodes to connect and ``round_timeout`` seconds (default
  :data:`ROUND_TIMEOUT`) for each exchange of messages. Too few nodes, or a node silent at
  discovery, is a ``TimeoutError`` that says what to change; a reply that misses the
  round's deadline is dropped as above. Messages go to the nodes found at discovery
  (evaluation only to those with test data), without Flower's waiting for nodes to be
  connected. On the node side every call of :func:`client_app` is bounded too
  (``call_timeout``; the runners pass ``round_timeout``): a call that hangs is abandoned and
  answered with an error, so it cannot pin a worker (a Ray actor) and the run finishes with
  the other nodes; :class:`InProcessGrid` bounds every call of any ``ClientApp`` the same way.
- *What is not defended.* With the default weighted mean, a hostile node's crafted update
  inside the magnitude rule, or a sign flip, moves the mean upload by up to its weight share
  times ``max_update_ratio`` times the global norm each round: pass an ``aggregator`` (for
  averaging methods). Reply authenticity rests on the transport (Flower's node
  authentication): a node that learns another node's message id can answer in its name.
  Sizes at discovery are trusted within ``max_size_ratio``. Evaluation metrics are screened
  for range only: a node can report any accuracy in [0, 1] for itself. Nodes see the
  server's parameters, state and broadcast (no privacy). The in-process engine's divergence
  check (a loss far above the run's first) is not made: a diverging node's finite updates
  are averaged until they fail the screening.

Client data augmentation (``cfg.augment``) is not supported: in process it draws from the
engine's one generator in the middle of training, which nodes cannot replay. Each node
trains alone, so ``cfg.vmap_clients`` (the engine's batching of clients) does not apply; a
run with ``vmap_clients > 1`` in process agrees with the Flower one to float rounding.
"""

from replearn.neural.flower.client import NO_INITIAL, client_app
from replearn.neural.flower.common import (CALL_TIMEOUT, CONNECT_TIMEOUT, HOOKS, MAX_SIZE_RATIO, MAX_UPDATE_RATIO,
                                           ROUND_TIMEOUT, Fingerprint, averages, fingerprint, has_hooks, resolve)
from replearn.neural.flower.grid import InProcessGrid
from replearn.neural.flower.records import from_record, pack, to_record, unpack
from replearn.neural.flower.runners import (Runner, inprocess_runner, run_inprocess, run_simulation, run_with,
                                            simulation_runner)
from replearn.neural.flower.server import discover, server_app, wait_for_nodes
from replearn.neural.flower.screening import Dropped
from replearn.neural.flower.strategy import FlowerRun, ReplayStrategy

__all__ = ["CALL_TIMEOUT", "CONNECT_TIMEOUT", "HOOKS", "MAX_SIZE_RATIO", "MAX_UPDATE_RATIO", "NO_INITIAL",
           "ROUND_TIMEOUT", "Dropped", "Fingerprint", "FlowerRun", "InProcessGrid", "ReplayStrategy", "Runner",
           "averages", "client_app", "discover", "fingerprint", "from_record", "has_hooks", "inprocess_runner",
           "pack", "resolve", "run_inprocess", "run_simulation", "run_with", "server_app", "simulation_runner",
           "to_record", "unpack", "wait_for_nodes"]
