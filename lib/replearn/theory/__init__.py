"""The linear-model theory of chapters 1-5 (and the small meta-learning networks of 2.6 and 3.5):
the multi-task linear representation model and its subspace geometry, average-risk
minimisation, MAML/ANIL, ARUBA, FedAvg and FedRep on linear models, their lower bounds and
rates. NumPy-sized tensors, exact gradients, no federated engine.

Modules: :mod:`~replearn.theory.linear` (the model), :mod:`~replearn.theory.linalg`
(principal angles), :mod:`~replearn.theory.meta` (ARM), :mod:`~replearn.theory.maml`,
:mod:`~replearn.theory.maml_instances`, :mod:`~replearn.theory.aruba`,
:mod:`~replearn.theory.linear_federated` (FedAvg / D-GD on the linear model),
:mod:`~replearn.theory.fedavg_problems`, :mod:`~replearn.theory.linear_fedrep` (FedRep on the
linear model), :mod:`~replearn.theory.few_shot`, :mod:`~replearn.theory.lower_bound`,
:mod:`~replearn.theory.rates`, :mod:`~replearn.theory.sinusoid`,
:mod:`~replearn.theory.trajectory`. Import the module you need (nothing is imported here).
"""
