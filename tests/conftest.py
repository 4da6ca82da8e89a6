import pytest
import torch
from cifar_fixtures import load_or_skip

from replearn.theory import linalg, linear


@pytest.fixture
def problem():
    """A small population problem: B_* (12 x 3), 8 diverse heads with a non-zero mean."""
    d, k, n = 12, 3, 8
    Bstar = linear.ground_truth_representation(d, k, seed=1)
    W = linear.make_heads(n, k, mean_norm=0.5, cond=3.0, seed=2)
    alpha = 0.2
    B0 = linalg.basis_at_distance(Bstar, 0.6, seed=3) / alpha**0.5
    w0 = 0.1 * torch.ones(k, dtype=torch.float64)
    return dict(d=d, k=k, n=n, Bstar=Bstar, W=W, alpha=alpha, B0=B0, w0=w0,
                tasks=linear.population_tasks(Bstar, W))


@pytest.fixture(scope="session")
def cifar10():
    """The CIFAR-10 subset of ``$REPLEARN_DATA`` (the test is skipped without it)."""
    return load_or_skip("cifar10")


@pytest.fixture(scope="session")
def cifar100():
    """The CIFAR-100 subset of ``$REPLEARN_DATA`` (the test is skipped without it)."""
    return load_or_skip("cifar100")


@pytest.fixture
def one_thread():
    """Run a test on one torch thread (many tiny per-iteration ops: intra-op threading only adds
    overhead), restoring the thread count afterwards. Modules use it with
    ``pytestmark = pytest.mark.usefixtures("one_thread")``."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def glued(monkeypatch):
    """What a test's code glues (myst-nb's ``glue``), as ``{name: value}``, instead of displaying it."""
    import myst_nb

    calls = {}
    monkeypatch.setattr(myst_nb, "glue", lambda name, value, display=True: calls.__setitem__(name, value))
    return calls
