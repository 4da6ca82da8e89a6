"""Representation similarity: HSIC, linear and RBF CKA, minibatch CKA, class cosine similarity.

The FedAvg-FT paper (Collins et al. 2022, Fig. 2) measures how much each layer of a
pre-trained CNN changes during fine-tuning by the CKA similarity (Kornblith et al. 2019) of
that layer's features before and after fine-tuning, and (Fig. 4) the average cosine
similarity between the features of images of two classes.

Centred kernel alignment of two feature matrices ``X`` (n, p1) and ``Y`` (n, p2) for the
same n examples, with Gram matrices ``K = k(X, X)`` and ``L = l(Y, Y)``, is

    CKA(K, L) = HSIC(K, L) / sqrt(HSIC(K, K) HSIC(L, L)),

for HSIC the Hilbert-Schmidt independence criterion (:func:`hsic`, biased or unbiased).
Every computation is done in float64 on the inputs' device; features of more than two
dimensions, e.g. conv maps (n, C, H, W), are flattened to (n, C*H*W).

Degenerate inputs raise ``ValueError`` rather than returning NaN: CKA is undefined when a
representation has no variation across the examples (every feature constant, so
HSIC(K, K) = 0), and the unbiased estimator of HSIC(K, K) can be zero or negative for tiny
samples; both cases are reported with the name of the input at fault.

Modules: :mod:`~replearn.neural.similarity.features` (checking, centring and rescaling the
inputs), :mod:`~replearn.neural.similarity.kernels` (linear and RBF Gram matrices),
:mod:`~replearn.neural.similarity.cka` (HSIC, CKA of kernels and of features, minibatch CKA),
:mod:`~replearn.neural.similarity.cosine` (class cosine similarity) and
:mod:`~replearn.neural.similarity.activations` (capturing a network's layer outputs). Their
public names are re-exported here.
"""

from replearn.neural.similarity.activations import capture_activations
from replearn.neural.similarity.cka import (CKAAccumulator, CKAResult, hsic, kernel_cka, linear_cka, minibatch_cka,
                                            rbf_cka)
from replearn.neural.similarity.cosine import class_cosine_similarity, intra_inter_gap
from replearn.neural.similarity.kernels import linear_kernel, rbf_kernel

__all__ = ["CKAAccumulator", "CKAResult", "capture_activations", "class_cosine_similarity", "hsic",
           "intra_inter_gap", "kernel_cka", "linear_cka", "linear_kernel", "minibatch_cka", "rbf_cka",
           "rbf_kernel"]
