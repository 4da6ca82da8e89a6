"""Linear and RBF CKA: replearn.neural.similarity vs the straightforward formula, over a grid of shapes.

The reference is what a reader would write from the definitions (Kornblith et al. 2019, Eq. 5;
Song et al. 2012 for the unbiased HSIC), always in the Gram form and without any input checks:
centre the columns of X (n, d) and Y (n, d), K = Xc Xc^T, L = Yc Yc^T, then

- biased: CKA = sum(K * L) / (||K||_F ||L||_F);
- unbiased: K, L with zeroed diagonals, HSIC_1(A, B) = [sum(A * B) + (1^T A 1)(1^T B 1) / ((n-1)(n-2))
  - 2/(n-2) (A 1).(B 1)] / (n (n-3)), CKA = HSIC_1(K, L) / sqrt(HSIC_1(K, K) HSIC_1(L, L));
- RBF (``--rbf``): squared distances from X X^T and the squared row norms, bandwidth sigma^2 =
  sigma_frac^2 x median of all n^2 squared distances (``torch.quantile``, NumPy's median
  convention), K = exp(-D / (2 sigma^2)), then the biased HSIC with H-centred K and L.

The library validates its inputs on top (finite values, constant features, degenerate kernels),
so at equal arithmetic it has more passes to make; the target is that it is nowhere slower.
Both run in this process on the same seeded float64 inputs (Y = X + 0.5 noise, so CKA is well
inside (0, 1)), on one thread, interleaved (library, reference, library, ...) so that load changes
hit both alike. For every shape the script prints the median time of each, the ratio library /
reference (the median over adjacent pairs of calls; below 1: the library is faster) and the
largest |difference| of the CKA values.

Run: ``python bench/cka.py`` (about a minute and a half on a loaded 2-core machine; ``--quick``
for a few shapes, ``--rbf`` to add RBF CKA, ``--repeat`` for more samples per shape).
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from replearn.neural import similarity

#: (n examples, d features per representation); the library uses the feature-space form when
#: d <= 2n/3 (linear CKA only), the Gram form above.
SHAPES = [(50, 10), (50, 2048), (200, 100), (200, 2048), (500, 500), (500, 4096), (1000, 100),
          (1000, 1000), (1000, 8192), (2000, 1500), (2000, 2048), (200, 32768)]
QUICK = [(50, 10), (500, 500), (1000, 8192)]
RBF_SHAPES = [(50, 10), (200, 2048), (1000, 1000), (1000, 8192), (2000, 2048)]


def reference_linear_cka(X: torch.Tensor, Y: torch.Tensor, unbiased: bool) -> torch.Tensor:
    X, Y = X - X.mean(dim=0), Y - Y.mean(dim=0)
    K, L = X @ X.T, Y @ Y.T
    if not unbiased:
        return (K * L).sum() / (torch.linalg.norm(K) * torch.linalg.norm(L))
    n = K.shape[0]
    K.fill_diagonal_(0.0)
    L.fill_diagonal_(0.0)

    def hsic(A, B):
        return ((A * B).sum() + A.sum() * B.sum() / ((n - 1) * (n - 2))
                - 2.0 / (n - 2) * (A.sum(dim=1) @ B.sum(dim=1))) / (n * (n - 3))

    return hsic(K, L) / torch.sqrt(hsic(K, K) * hsic(L, L))


def reference_rbf_cka(X: torch.Tensor, Y: torch.Tensor, sigma_frac: float = 0.8) -> torch.Tensor:
    def gram(F):
        sq = (F * F).sum(dim=1)
        D = (sq[:, None] + sq[None, :] - 2.0 * F @ F.T).clamp_min(0.0)
        D.fill_diagonal_(0.0)
        sigma_sq = sigma_frac ** 2 * torch.quantile(D.flatten(), 0.5)
        return torch.exp(-D / (2.0 * sigma_sq))

    def centred(K):
        return K - K.mean(dim=0) - K.mean(dim=1, keepdim=True) + K.mean()

    K, L = centred(gram(X)), centred(gram(Y))
    return (K * L).sum() / (torch.linalg.norm(K) * torch.linalg.norm(L))


def inputs(n: int, d: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(n, d, generator=g, dtype=torch.float64)
    return X, X + 0.5 * torch.randn(n, d, generator=g, dtype=torch.float64)


def timed(fn) -> tuple[float, torch.Tensor]:
    start = time.perf_counter()
    value = fn()
    return time.perf_counter() - start, value


def compare(label: str, library, reference, repeat: int) -> tuple[float, float]:
    """Interleaved timing after one warm-up call each; returns (median ratio, max |difference|)."""
    t_lib, v_lib = timed(library)
    t_ref, v_ref = timed(reference)
    # calls of more than ~0.1 s get fewer repeats, so that the whole grid stays within minutes
    reps = max(3, min(repeat, int(1.5 / max(t_lib + t_ref, 1e-9))))
    times_lib, times_ref, diff = [], [], abs(float(v_lib) - float(v_ref))
    for _ in range(reps):
        t, v = timed(library)
        times_lib.append(t)
        diff = max(diff, abs(float(v) - float(v_ref)))
        t, v = timed(reference)
        times_ref.append(t)
    ratio = statistics.median(a / b for a, b in zip(times_lib, times_ref))
    print(f"  {label:<18} library {1e3 * statistics.median(times_lib):9.2f} ms  reference "
          f"{1e3 * statistics.median(times_ref):9.2f} ms  ratio {ratio:5.2f}  |diff| {diff:.1e}  "
          f"({reps} pairs)")
    return ratio, diff


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=15, help="most interleaved timed calls per shape")
    parser.add_argument("--quick", action="store_true", help="only the shapes " + str(QUICK))
    parser.add_argument("--rbf", action="store_true", help="also RBF CKA on " + str(RBF_SHAPES))
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(f"CKA, float64, torch {torch.__version__}, {torch.get_num_threads()} thread(s); "
          f"ratio = library time / reference time (median over interleaved pairs of calls)")
    worst = {}
    for n, d in QUICK if args.quick else SHAPES:
        X, Y = inputs(n, d, seed=n + d)
        form = "feature form" if similarity.cka._feature_form_cheaper(n, d, d) else "Gram form"
        print(f"n = {n}, d = {d} (library: {form})")
        for unbiased in (False, True):
            label = "linear, unbiased" if unbiased else "linear, biased"
            ratio, _ = compare(label, lambda: similarity.linear_cka(X, Y, unbiased=unbiased),
                               lambda: reference_linear_cka(X, Y, unbiased), args.repeat)
            worst[label] = max(worst.get(label, 0.0), ratio)
    if args.rbf:
        for n, d in RBF_SHAPES:
            X, Y = inputs(n, d, seed=n + d)
            print(f"n = {n}, d = {d}")
            ratio, _ = compare("rbf, biased", lambda: similarity.rbf_cka(X, Y),
                               lambda: reference_rbf_cka(X, Y), args.repeat)
            worst["rbf, biased"] = max(worst.get("rbf, biased", 0.0), ratio)
    print("largest ratio: " + ", ".join(f"{k} {v:.2f}" for k, v in worst.items()))


if __name__ == "__main__":
    main()
