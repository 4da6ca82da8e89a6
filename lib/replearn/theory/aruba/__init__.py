"""ARUBA: meta-learning through average regret-upper-bound analysis (Khodak, Balcan and
Talwalkar, NeurIPS 2019): online convex tasks, online gradient descent, regret and its upper
bounds, meta-learned initialisations, per-coordinate ARUBA rates and AdaGrad.

Setting (online, one task after another). On round i = 1..m of task t the learner plays
theta_{t,i} in the ball Theta = {||theta|| <= D} and suffers the convex loss
l_{t,i}(theta) = L(<x_{t,i}, theta>, y_{t,i}). Within-task regret (blog, first display):

    R_t = sum_i l_{t,i}(theta_{t,i}) - min_{theta in Theta} sum_i l_{t,i}(theta).

Online gradient descent (OGD) from phi with rate eta (a scalar, or per coordinate):
theta_{t,1} = phi, theta_{t,i+1} = Proj(theta_{t,i} - eta * grad_{t,i}). Its regret against
any theta* in Theta obeys the regret upper bound (blog, "preconditioned OGD" display)

    U_t(phi, eta) = sum_j (phi_j - theta*_j)^2 / (2 eta_j) + sum_j eta_j sum_i grad_{t,i,j}^2.

Constant convention: the sharp OGD bound has eta/2 in front of the gradient term; like the
blog (and the learning rate formula below, which minimises B/eta + eta G) we keep the looser
constant 1, so U_t >= sharp bound >= R_t. With a gradient bound ||grad|| <= G the scalar form
is ``||phi - theta*||^2 / (2 eta) + eta G^2 m``; with |grad_j| <= G_j the per-coordinate form
is ``sum_j (phi_j - theta*_j)^2 / (2 eta_j) + sum_j eta_j G_j^2 m``.

Meta-learners over the task sequence (:func:`meta_learn`):

- initialisation: fixed, or learned by follow-the-leader on U_t, i.e. OGD on U_t with
  alpha_t = 1/t: ``phi_{t+1} = phi_t + (target_t - phi_t) / t`` = running mean of the targets,
  where the target is theta*_t (the hindsight optimum) or the last iterate theta_hat_t
  (Reptile);
- rate: a fixed scalar (e.g. D/(G sqrt m) for single-task OGD, V/(G sqrt m) when the task
  similarity V is known), ARUBA's per-coordinate rate
  ``eta_{t,j} = sqrt((B_{t,j} + eps_t) / (G_{t,j} + zeta_t))`` with
  B_{t,j} = 1/2 sum_{s<t} (phi_{s,j} - target_{s,j})^2 and G_{t,j} = sum_{s<t} sum_i grad_{s,i,j}^2,
  its scalar analogue, or within-task AdaGrad ``eta0 / sqrt(delta + sum_{i' <= i} grad_{i',j}^2)``.

The blog leaves the o(t) smoothing open; we use eps_t / zeta_t = eta0^2 (so the first task runs
with eta0, by default the single-task rate D/(G sqrt m)) and zeta_t = s G^2 (m / d) t^p per
coordinate (s G^2 m t^p for the scalar rate) with s = ``smoothing`` = 0.1 and p = ``power`` = 0.4,
so both vanish relative to B_t and G_t, which grow linearly in t.

Measurements and bounds used by book 3.1-3.4: :func:`late_mean` (late-half mean regret) and
the fixed-rate grid :func:`fixed_rate_sweep`; :func:`rademacher_regret` and
:func:`expected_abs_walk` (the Omega(D G sqrt m) lower bound); :func:`ftl_meta_regret` and
:func:`average_regret_bound` (the learned-initialisation theorem); :func:`convexity_gaps` (joint
convexity of U_t in (phi, eta)).

Shapes: a batch of independent runs (seeds) is the leading axis; tasks of one run are the
next. Rates carry the coordinate axis last: size 1 for a scalar rate, size d per coordinate.

Modules: :mod:`~replearn.theory.aruba.online` (losses, projections, OGD, regret and U_t),
:mod:`~replearn.theory.aruba.tasks` (the task family and sampled tasks),
:mod:`~replearn.theory.aruba.meta_learning` (the meta-learners) and
:mod:`~replearn.theory.aruba.measurements` (the measurements and bounds of book 3.1-3.3). Their
public names are re-exported here.
"""

from replearn.theory.aruba.measurements import (average_regret_bound, convexity_gaps, expected_abs_walk,
                                                fixed_rate_sweep, ftl_meta_regret, late_mean, rademacher_regret)
from replearn.theory.aruba.meta_learning import (INITS, LEARNED_RATES, TARGETS, MetaRun, aruba_rate, meta_learn,
                                                 single_task_ogd, task_averaged_regret, task_similarity)
from replearn.theory.aruba.online import (LOSSES, OGDRun, least_squares_in_ball, ogd, project_ball, regret,
                                          regret_upper_bound, round_losses)
from replearn.theory.aruba.tasks import OnlineTasks, TaskFamily, sample_tasks

__all__ = ["INITS", "LEARNED_RATES", "LOSSES", "TARGETS", "MetaRun", "OGDRun", "OnlineTasks", "TaskFamily",
           "aruba_rate", "average_regret_bound", "convexity_gaps", "expected_abs_walk", "fixed_rate_sweep",
           "ftl_meta_regret", "late_mean", "least_squares_in_ball", "meta_learn", "ogd", "project_ball",
           "rademacher_regret", "regret", "regret_upper_bound", "round_losses", "sample_tasks",
           "single_task_ogd", "task_averaged_regret", "task_similarity"]
