"""replearn: the library behind *Adaptivity & Shared Representations*.

Modules (one idea each; generated from their docstrings by ``scripts/inventory.py``):

<!-- inventory:modules-rst -->
- :mod:`replearn.theory`: The linear-model theory of chapters 1-5 (and the small meta-learning networks of 2.6 and 3.5): the multi-task linear representation model and its subspace geometry, average-risk minimisation, MAML/ANIL, ARUBA, FedAvg and FedRep on linear models, their lower bounds and rates. NumPy-sized tensors, exact gradients, no federated engine.
- :mod:`replearn.theory.aruba`: ARUBA: meta-learning through average regret-upper-bound analysis (Khodak, Balcan and Talwalkar, NeurIPS 2019): online convex tasks, online gradient descent, regret and its upper bounds, meta-learned initialisations, per-coordinate ARUBA rates and AdaGrad.
- :mod:`replearn.theory.fedavg_problems`: The population problems of FedAvg's convergence analysis (Collins et al. 2022, Sec. 3 and 5.1; shared by book 4.3 and 4.4).
- :mod:`replearn.theory.few_shot`: A new task learned from few samples: Monte-Carlo errors of its estimators (book 1.1, 1.4).
- :mod:`replearn.theory.linalg`: Subspace geometry: orthonormal bases, the principal-angle distance, condition numbers.
- :mod:`replearn.theory.linear`: The multi-task linear representation model (Collins et al. 2022; Tripuraneni et al. 2021): the ground truth B_*, heads of chosen mean and diversity, population and sampled tasks, losses and gradients, head solves, least squares and fine-tuning.
- :mod:`replearn.theory.linear_federated`: FedAvg and distributed GD for the linear representation model, vectorised over clients.
- :mod:`replearn.theory.linear_fedrep`: FedRep for the multi-task linear representation model (Collins, Hassani, Mokhtari, Shakkottai 2021): Algorithm 2 with its method-of-moments start, GD-GD and K-step heads, the baselines (local-only, FedAvg, one model) and new-client heads.
- :mod:`replearn.theory.lower_bound`: Ground truths that ARM / distributed GD cannot find (Collins et al. 2022, Prop. 1).
- :mod:`replearn.theory.maml`: MAML, FO-MAML, ANIL and FO-ANIL for the linear representation model (Collins et al. 2022): exact meta-gradients (torch.func), adapted heads, the FO-ANIL decomposition, the inductive hypotheses and the initialisations.
- :mod:`replearn.theory.maml_instances`: The linear instances of the MAML / ANIL chapter: the population instance with a structured start shared by book 2.1-2.3 (settings and construction) and the settings checks shared by 2.4-2.5.
- :mod:`replearn.theory.meta`: Average-risk minimisation (ARM) on the linear representation model: the iterates, their prior/signal decomposition and the subspace floor ARM cannot leave (Collins et al. 2022).
- :mod:`replearn.theory.rates`: Rates and slopes of measured curves: one least-squares line through log-values.
- :mod:`replearn.theory.sinusoid`: Sinusoid regression tasks and small MLP meta-learners (book 2.6 and 3.5).
- :mod:`replearn.theory.trajectory`: The iterates of a run: representations and heads stacked over rounds.
- :mod:`replearn.neural`: The neural federated engine: CIFAR data and client partitions (:mod:`~replearn.neural.data`, :mod:`~replearn.neural.specs`), the convolutional networks (:mod:`~replearn.neural.models`), the federated algorithms, one file each (:mod:`~replearn.neural.algorithms`), the round loop that runs them all (:mod:`~replearn.neural.engine`), Flower (:mod:`~replearn.neural.flower`), resumable runs (:mod:`~replearn.neural.checkpoints`) and representation similarity (:mod:`~replearn.neural.similarity`). It imports nothing from the book (:mod:`replearn.book`) or its sections (:mod:`replearn.experiments`, where the CIFAR studies built on it live).
- :mod:`replearn.neural.algorithms`: Federated algorithms as open units: every method of Table 1 of Collins et al. (2021), D-SGD and fine-tuning, each in its own module, registered by discovery.
- :mod:`replearn.neural.checkpoints`: Resumable long runs: inside :func:`resumable`, every finished federated run of the engine's round loop (:func:`replearn.neural.run`) is stored on disk under a digest of everything it depends on, and an identical later call loads it instead of training.
- :mod:`replearn.neural.data`: CIFAR-10/100: loading, client partitions, normalisation and batched augmentation.
- :mod:`replearn.neural.engine`: The federated engine: fast simulation of federated training of neural networks, one round loop for every algorithm of :mod:`replearn.neural.algorithms`.
- :mod:`replearn.neural.flower`: The book's federated algorithms on Flower (``flwr``; Beutel et al., 2020).
- :mod:`replearn.neural.models`: The convolutional networks of the CIFAR experiments, each split into a body and a head.
- :mod:`replearn.neural.similarity`: Representation similarity: HSIC, linear and RBF CKA, minibatch CKA, class cosine similarity.
- :mod:`replearn.neural.specs`: One description of the federation and one of the network a CIFAR section trains, each with one builder: :class:`FederationSpec` (dataset, classes, S classes per client or Dirichlet alpha, clients, samples per client, test split; :meth:`FederationSpec.build`) and :class:`NetworkSpec` (family, resolved widths, dtype; :meth:`NetworkSpec.build`).
- :mod:`replearn.book`: The book's tooling: what the notebooks use to state and check claims and show results, not to learn anything. Claims and glue (:mod:`~replearn.book.claims`), seeds and the one statistical rule (:mod:`~replearn.book.seeds`), committed results files (:mod:`~replearn.book.results`) and which paper claims they reproduce (:mod:`~replearn.book.outcomes`), figures (:mod:`~replearn.book.plotting`), explorer widgets (:mod:`~replearn.book.widgets`) and what larger profiles need and cost (:mod:`~replearn.book.scales`). The settings and their profiles (:mod:`replearn.settings`) and the tables (:mod:`replearn.table`) sit below, in the library, which imports nothing from here. Import the module you need (nothing is imported here).
- :mod:`replearn.book.claims`: Claims a notebook states and checks: print the values a claim rests on, then assert it.
- :mod:`replearn.book.outcomes`: Which paper claims the book reproduces, read from the stored notebooks (Appendix B).
- :mod:`replearn.book.plotting`: The book's figure style and small plotting helpers (matplotlib, PNG output).
- :mod:`replearn.book.results`: Committed results of the long CPU and paper-scale GPU runs, read back for the book.
- :mod:`replearn.book.scales`: What the CIFAR sections' larger profiles need and cost: the data a profile requires (:func:`require_data`), the number of operator launches a run makes (:func:`launch_estimate`) and the settings table of Appendix B (:func:`settings_table`).
- :mod:`replearn.book.seeds`: Experiments repeated over seeds: run once per seed, report mean ± standard deviation, and decide when a difference exceeds the spread.
- :mod:`replearn.book.widgets`: Interactive explorer panels: sliders and menus that redraw a figure (ipywidgets).
- :mod:`replearn.book.wording`: Settings in words: what the CIFAR sections of chapter 4 (4.7-4.9 and their reproduction pages) say about the network, the training and the seeds of a run, read from a settings object or from the settings dict of a committed results file alike, and a settings table of such rows, so that no page prints a dataclass, a tuple or a library name such as ``fedrep_cnn``.
- :mod:`replearn.backend`: Device, dtype, seeding and machine helpers shared by every module of :mod:`replearn`.
- :mod:`replearn.checks`: Argument checks shared by every public function and settings class of :mod:`replearn`.
- :mod:`replearn.settings`: Experiment settings and their scales: a CPU-sized ``default`` and the papers' ``paper`` settings (the library's base layer: the theory, the engine and the book's sections all configure with it).
- :mod:`replearn.table`: A small result table for notebooks: one HTML table on the page, aligned text where HTML is not shown (:class:`Table`). The base of every table the book displays (settings, results, the methods' summaries), so it sits below everything that makes one.
- :mod:`replearn.experiments`: One driver per book section: ``book/NN_chapter/MM_section.ipynb`` is driven by ``replearn.experiments.chNN_chapter.sMM_section`` (its settings with a CPU default and the paper profile, validated when constructed, and the functions from settings to arrays). A chapter folder also holds the set-ups its drivers share: the CIFAR studies that several sections run (``ch04_fedavg.cifar_transfer``: FedAvg against D-SGD pre-trained on CIFAR-100, for 4.7-4.9; ``ch05_fedrep.cifar_federation``: the personalised CIFAR federation of 5.7-5.9). A driver imports the library and its chapter's set-ups, never another driver.
<!-- /inventory:modules-rst -->
"""

from replearn.backend import DTYPE, default_device, make_generator

__version__ = "0.1.0"
__all__ = ["DTYPE", "default_device", "make_generator", "__version__"]
