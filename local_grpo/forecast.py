"""A calibrated success forecast: p_ref pooled across prompts, the step size fitted to a run's first steps,
and the rule that decides whether it may be shown.

Two estimates turn the dynamics recurrence (local_grpo.dynamics) into a forecast for a real run:

1. `pool_p_ref`: the starting model's success, pooled across prompts (hierarchical beta-binomial).
   Prompt i showed k_i successes in n_i samples; prompts' true success q is Beta(μκ, (1−μ)κ) across
   prompts, with a uniform prior on the mean μ and a log-uniform one on the concentration κ
   (KAPPA_RANGE), both integrated on a grid. A prompt at 0/4 gets the posterior mean
   E[q | 0 of 4, the other prompts] > 0, never a certain 0; the population (`nodes`, `weights`) is the
   posterior predictive of q for a prompt not yet seen. The hyperparameters are integrated, not
   point-estimated: their maximum-likelihood value degenerates to μ = 0 when every sample failed.
2. `fit_step_size`: with no KL (`kl: none`) the recurrence's β is an inverse step size with no value
   of its own. It gets a log-uniform prior on BETA_GRID and is fitted jointly with the population
   (μ, κ) to the held-out counts and the per-prompt group counts of the run's first steps: a group of
   G completions at step n has k successes with probability Σ_j w_j·Binom(k; G, p_{n−1}(q_j; β))
   (step n is sampled by π_{n−1}; q_j, w_j the population's nodes). Fitting the population too keeps
   a held-out estimate that is off (8 × 4 samples) from being read as a wrong speed.
   `StepSizeFit.band` gives the forecast of the mean success per step and its central credible band.
3. `judge_forecast` / `judge_logged`: whether a forecast may be shown at all. No point forecast whose band is
   wider than MAX_BAND_WIDTH, and none that the success measured beside it contradicts; otherwise the
   reader says TOO_EARLY and shows the band. The train summary, metrics.jsonl (`forecast_shown`), the
   studio and the calibration bench all ask this one rule.

Pure numpy and math; no I/O, no torch (local_grpo/train/p_ref.py wires this to a training run).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from . import dynamics

MEAN_LOGITS = np.linspace(-12.0, 12.0, 97)  # grid over the population mean μ, in log-odds
KAPPA_RANGE = (0.5, 1000.0)  # prior support of the concentration κ = a + b (log-uniform)
KAPPA_POINTS = 13
Q_LOGITS = np.linspace(-14.0, 10.0, 97)  # nodes of a prompt's p_ref, in log-odds
BETA_GRID = np.geomspace(0.02, 20000.0, 161)  # candidate step sizes (inverse), log-uniform prior
BAND_LEVEL = 0.8  # central credible band: the 10th to the 90th percentile
BAND_POINTS = 4096  # draws from the joint posterior that the band's quantiles are read from


@dataclass(frozen=True)
class PRefPool:
    """Starting success pooled across prompts.

    per_prompt: posterior mean p_ref of each measured prompt (same order as the counts);
    mean: posterior mean of the population mean μ; nodes, weights: a prompt's p_ref not yet
    measured, as values and their probabilities (sum 1).
    """

    per_prompt: list
    mean: float
    nodes: np.ndarray
    weights: np.ndarray


def _log_beta_binomial(successes, samples, a, b):
    """log P(k of n | Beta(a, b)) without the binomial coefficient, for integer counts (arrays a, b).

    B(a + k, b + n − k) / B(a, b) = Π_{t<k}(a + t) · Π_{t<n−k}(b + t) / Π_{t<n}(a + b + t).
    """
    total = np.zeros_like(a)
    for t in range(successes):
        total += np.log(a + t)
    for t in range(samples - successes):
        total += np.log(b + t)
    for t in range(samples):
        total -= np.log(a + b + t)
    return total


def _hyper_grid():
    """(a, b, log prior) over the flattened (μ, κ) grid: uniform in μ, log-uniform in κ."""
    mu = 1.0 / (1.0 + np.exp(-MEAN_LOGITS))
    kappa = np.geomspace(*KAPPA_RANGE, KAPPA_POINTS)
    mu_grid, kappa_grid = (x.ravel() for x in np.meshgrid(mu, kappa, indexing="ij"))
    log_prior = np.log(mu_grid * (1.0 - mu_grid))  # dμ = μ(1−μ) d logit μ on an even logit grid
    return mu_grid * kappa_grid, (1.0 - mu_grid) * kappa_grid, log_prior


def _held_out_log_likelihood(successes, samples, a, b):
    """Σ_i log P(k_i of n_i | Beta(a, b)) per grid point."""
    if len(successes) != len(samples) or any(not 0 <= k <= n for k, n in zip(successes, samples)):
        raise ValueError("pool_p_ref: need one count 0 <= successes <= samples per prompt")
    total = np.zeros_like(a)
    for k, n in zip(successes, samples):
        total += _log_beta_binomial(int(k), int(n), a, b)
    return total


def _normalised(log_weights):
    weights = np.exp(log_weights - log_weights.max())
    return weights / weights.sum()


def pool_p_ref(successes, samples) -> PRefPool:
    """Pool per-prompt counts (k_i successes of n_i samples) into p_ref estimates and a population.

    With no counts at all the population is the prior's (mean 0.5).
    """
    a, b, log_prior = _hyper_grid()
    post = _normalised(log_prior + _held_out_log_likelihood(successes, samples, a, b))
    per_prompt = [float(np.sum(post * (a + k) / (a + b + n))) for k, n in zip(successes, samples)]
    weights = _node_weights(a, b) @ post
    return PRefPool(per_prompt=per_prompt, mean=float(np.sum(post * a / (a + b))),
                    nodes=_sigmoid(Q_LOGITS), weights=weights / weights.sum())


def _sigmoid(logits):
    return np.exp(-np.logaddexp(0.0, -logits))


def _node_weights(a, b):
    """[node, grid point]: the probability of each Q_LOGITS node under Beta(a_g, b_g) (columns sum to 1).

    The density is taken in log-odds; mass beyond the grid's ends goes to the nearer end node.
    """
    log_norm = np.vectorize(lambda x, y: math.lgamma(x) + math.lgamma(y) - math.lgamma(x + y))(a, b)
    u = Q_LOGITS.reshape(-1, 1)
    log_sig, log_sig_neg = -np.logaddexp(0.0, -u), -np.logaddexp(0.0, u)
    mass = np.exp(a * log_sig + b * log_sig_neg - log_norm) * (Q_LOGITS[1] - Q_LOGITS[0])
    outside = np.clip(1.0 - mass.sum(axis=0), 0.0, None)
    low_end = a / (a + b) < 0.5
    mass[0] += np.where(low_end, outside, 0.0)
    mass[-1] += np.where(low_end, 0.0, outside)
    return mass / mass.sum(axis=0, keepdims=True)


# ---------------------------------------------------------------------------------------------
# The step size, fitted jointly with the population


@dataclass(frozen=True)
class StepSizeFit:
    """The joint posterior over (β, population), summarised.

    betas, beta_posterior: the β grid and β's marginal posterior (exact); mean_paths[i, n], weights[i]: the
    predicted mean success p_n at points drawn from the joint posterior (`_systematic_sample`) and their
    probabilities; p_ref_mean: the posterior mean of the starting success p_0 (exact); observed_steps:
    the steps whose groups were used.
    """

    betas: np.ndarray
    beta_posterior: np.ndarray
    mean_paths: np.ndarray
    weights: np.ndarray
    p_ref_mean: float
    observed_steps: tuple

    def band(self, level: float = BAND_LEVEL) -> dict:
        """{"median", "low", "high"}: per step index n (p_n), the posterior median and central band."""
        tail = (1.0 - level) / 2.0
        per_step = _weighted_quantiles_by_column(self.mean_paths, self.weights, np.array([0.5, tail, 1.0 - tail]))
        return {name: per_step[:, i].tolist() for i, name in enumerate(("median", "low", "high"))}

    def beta_quantiles(self, level: float = BAND_LEVEL) -> dict:
        """The fitted β: posterior median and the central band, {"median", "low", "high"}."""
        tail = (1.0 - level) / 2.0
        values = _weighted_quantile(self.betas, self.beta_posterior, np.array([0.5, tail, 1.0 - tail]))
        return {name: float(v) for name, v in zip(("median", "low", "high"), values)}


@dataclass(frozen=True)
class StepSizePrior:
    """What a step-size fit needs before any group is seen: the population grid kept by the held-out
    counts, its log posterior, its node weights and every β's paths. Built once per run (`prepare_step_size`);
    each refit (`fit`) adds only the groups' likelihood."""

    log_post: np.ndarray  # [population]
    node_weights: np.ndarray  # [node, population]
    betas: np.ndarray
    paths: np.ndarray  # [β, node, step index]
    _group_log_likelihoods: dict = field(default_factory=dict, compare=False, repr=False)

    def group_log_likelihood(self, index: int, k: int, n: int) -> np.ndarray:
        """[β, population]: log P(k of n | sampled by π_index), kept for the next refit."""
        key = (index, k, n)
        if key not in self._group_log_likelihoods:
            p = self.paths[:, :, index]
            likelihood = (p ** k * (1.0 - p) ** (n - k)) @ self.node_weights
            self._group_log_likelihoods[key] = np.log(np.maximum(likelihood, 1e-300))
        return self._group_log_likelihoods[key]

    def fit(self, groups) -> StepSizeFit:
        """The joint posterior of β and the population given [(step, successes, samples)] per prompt group."""
        steps = self.paths.shape[2] - 1
        joint = np.broadcast_to(self.log_post, (len(self.betas), len(self.log_post))).copy()  # [β, population]
        tallies: dict[tuple, int] = {}
        for step, k, n in groups:
            key = (min(max(int(step) - 1, 0), steps), int(k), int(n))
            tallies[key] = tallies.get(key, 0) + 1
        for (index, k, n), count in tallies.items():
            joint += count * self.group_log_likelihood(index, k, n)
        posterior = _normalised(joint)
        rows, columns, weights = _systematic_sample(posterior, BAND_POINTS)
        mean_paths = np.empty((len(rows), steps + 1))
        for i in np.unique(rows):  # one β at a time: Σ_j w_j(population)·p_n(q_j; β)
            chosen = rows == i
            mean_paths[chosen] = self.node_weights[:, columns[chosen]].T @ self.paths[i]
        population = posterior.sum(axis=0)
        return StepSizeFit(betas=self.betas, beta_posterior=posterior.sum(axis=1), mean_paths=mean_paths,
                           weights=weights, p_ref_mean=float(population @ (self.paths[0, :, 0] @ self.node_weights)),
                           observed_steps=tuple(sorted({int(g[0]) for g in groups})))


def prepare_step_size(held_out, steps: int, kl="none", norm="meanstd", alpha=0.5, eps=1e-5,
                      betas=BETA_GRID) -> StepSizePrior:
    """The groups-independent part of `fit_step_size`: held-out counts [(successes, samples)] per prompt."""
    a, b, log_prior = _hyper_grid()
    log_post = log_prior + _held_out_log_likelihood([k for k, _ in held_out], [n for _, n in held_out], a, b)
    keep = log_post > log_post.max() - 20.0  # the held-out counts alone rule out the rest
    a, b = a[keep], b[keep]
    betas = np.asarray(betas, dtype=float)
    paths = dynamics.trajectories(_sigmoid(Q_LOGITS), betas, kl=kl, norm=norm, alpha=alpha, eps=eps, steps=steps)
    return StepSizePrior(log_post=log_post[keep], node_weights=_node_weights(a, b), betas=betas, paths=paths)


def fit_step_size(held_out, groups, steps: int, kl="none", norm="meanstd", alpha=0.5, eps=1e-5,
                  betas=BETA_GRID) -> StepSizeFit:
    """Joint posterior of β and the p_ref population from held-out counts and a run's prompt groups.

    held_out: [(successes, samples)] per held-out prompt, sampled from the starting model;
    groups: [(step, successes, samples)] per prompt group of the run, step >= 1 (step n is sampled
    by π_{n−1}, predicted p_{n−1}). Paths are computed to p_steps. No groups: β keeps its prior.
    """
    return prepare_step_size(held_out, steps, kl=kl, norm=norm, alpha=alpha, eps=eps, betas=betas).fit(groups)


def _systematic_sample(probabilities, points: int):
    """(rows, columns, weights): `points` equally spaced draws from a 2-D distribution, repeats merged.

    Systematic resampling (one fixed offset, so the same posterior gives the same points): the band's
    quantiles come from these instead of every grid point, which costs the same whatever the grid's size.
    """
    cdf = np.cumsum(probabilities.ravel())
    drawn = np.searchsorted(cdf, (np.arange(points) + 0.5) / points * cdf[-1], side="right")
    flat, counts = np.unique(np.minimum(drawn, cdf.size - 1), return_counts=True)
    rows, columns = np.divmod(flat, probabilities.shape[1])
    return rows, columns, counts / points


def _weighted_quantile(values, weights, q):
    """The q-quantile(s) of a discrete distribution (values with probabilities), linearly interpolated."""
    order = np.argsort(values, kind="stable")
    v, w = np.asarray(values)[order], np.asarray(weights)[order]
    cdf = np.cumsum(w) - 0.5 * w
    return np.interp(q, cdf, v)


def _weighted_quantiles_by_column(values, weights, q):
    """[column, len(q)]: `_weighted_quantile` of each column of values [point, column].

    Each column is sorted starting from the previous column's order (the paths' order changes little
    from one step to the next, and numpy's stable sort runs faster on partly sorted data).
    """
    columns, weights = np.ascontiguousarray(np.asarray(values).T), np.asarray(weights)
    order = np.argsort(columns[0], kind="stable")
    quantiles = []
    for n, column in enumerate(columns):
        if n:
            order = order[np.argsort(column[order], kind="stable")]
        w = weights[order]
        quantiles.append(np.interp(q, np.cumsum(w) - 0.5 * w, column[order]))
    return np.array(quantiles)


# ---------------------------------------------------------------------------------------------
# What may be shown: the one rule every consumer asks (train summary, metrics.jsonl, studio, bench)

MAX_BAND_WIDTH = 0.5  # an 80 % band wider than this says too little: no point forecast
MAX_MISS = 0.1  # a band further than this from the measured success is contradicted, however few samples
MISS_Z = 2.0  # ... and so is one that the measured success's Wilson interval at this z does not reach
CHECK_STEPS = 5  # the measured success beside a forecast: that of the last quarter of the steps, at most 5
TOO_EARLY = "too early to forecast"


@dataclass(frozen=True)
class Band:
    """A forecast of the mean success: its point (the median) and central BAND_LEVEL band.

    low, high None: a model that gives no band (the paper's recurrence at a KL run's β), read as a band of width 0.
    """

    predicted: float
    low: float | None = None
    high: float | None = None

    @property
    def bounds(self) -> tuple[float, float]:
        return (self.predicted, self.predicted) if self.low is None or self.high is None else (self.low, self.high)

    @property
    def width(self) -> float:
        low, high = self.bounds
        return high - low


@dataclass(frozen=True)
class MeasuredSuccess:
    """Successes of `samples` completions judged beside a forecast."""

    successes: int
    samples: int

    @property
    def mean(self) -> float:
        return self.successes / self.samples

    def interval(self, z: float = MISS_Z) -> tuple[float, float]:
        """The Wilson score interval: unlike mean ± z·se it is not of width 0 at 0 or all successes."""
        n, p = self.samples, self.mean
        centre = (p + z * z / (2 * n)) / (1 + z * z / n)
        half = z / (1 + z * z / n) * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
        return max(0.0, centre - half), min(1.0, centre + half)


@dataclass(frozen=True)
class ForecastView:
    """What may be shown of a forecast: `shown` False means say TOO_EARLY (and `reason`), and show the band.

    at: the forecast at `step`; beside: the forecast over the `window_steps` logged steps whose measured
    success is `measured` (None: nothing measured yet).
    """

    shown: bool
    at: Band
    beside: Band
    measured: MeasuredSuccess | None
    reason: str = ""
    step: int | None = None
    window_steps: int = 0

    def describe(self) -> str:
        """One line of plain text: the forecast beside its measurement, or TOO_EARLY with why and the
        measurement. A quiet forecast prints neither its point nor its band (a band too wide or contradicted
        by the measurement is no number to read); metrics.jsonl and the studio's plot keep the band."""
        band = f"{round(BAND_LEVEL * 100)}% band"
        where = f"step {self.step}" if self.step is not None else "forecast"
        if self.shown:
            text = f"{where}: {_band_text(self.at)} ({band if self.at.low is not None else 'no band'})"
        else:
            text = f"{TOO_EARLY} ({self.reason})"
        if self.measured is not None:
            low, high = self.measured.interval()
            window = {0: "beside it", 1: "last step"}.get(self.window_steps, f"last {self.window_steps} steps")
            beside = _band_text(self.beside) if self.shown else ""
            text += (f"; {window}: {beside + ', ' if beside else ''}measured {self.measured.mean:.3f} "
                     f"[{low:.3f}, {high:.3f}] ({self.measured.successes}/{self.measured.samples})")
        return text


def _band_text(band: Band) -> str:
    if band.low is None or band.high is None:
        return f"{band.predicted:.3f}"
    return f"{band.predicted:.3f} [{band.low:.3f}, {band.high:.3f}]"


def judge_forecast(at: Band, beside: Band | None = None, measured: MeasuredSuccess | None = None,
                   step: int | None = None, window_steps: int = 0) -> ForecastView:
    """Whether a forecast may be shown (docs/dynamics.md, "Honest or quiet").

    Quiet when the band at `step` or the band `beside` the measurement is wider than MAX_BAND_WIDTH, or
    when the measured success contradicts the band beside it: it lies more than MAX_MISS outside, or its
    Wilson interval (z = MISS_Z) does not reach the band. `beside` defaults to `at`; no measurement (or
    none with samples) cannot contradict.
    """
    beside = at if beside is None else beside
    view = dict(at=at, beside=beside, measured=measured, step=step, window_steps=window_steps)
    widest = max(at.width, beside.width)
    if widest > MAX_BAND_WIDTH:
        return ForecastView(shown=False, reason=f"the {round(BAND_LEVEL * 100)}% band is {widest:.2f} wide, "
                            f"more than {MAX_BAND_WIDTH}", **view)
    if measured is None or measured.samples <= 0:
        return ForecastView(shown=True, **{**view, "measured": None})
    low, high = beside.bounds
    m_low, m_high = measured.interval()
    miss = max(low - measured.mean, measured.mean - high, 0.0)
    if miss > MAX_MISS or m_high < low or m_low > high:
        side = "below" if measured.mean < low else "above"
        what = "band" if beside.low is not None else "prediction"
        why = f"more than {MAX_MISS}" if miss > MAX_MISS else "beyond its sampling error"
        return ForecastView(shown=False, reason=f"the measured success lies {miss:.3f} {side} the {what}: {why}",
                            **view)
    return ForecastView(shown=True, **view)


def success_counts(completions) -> dict[int, tuple[int, int]]:
    """{trainer step: (successes, samples)} from completions.jsonl records (an iterable of dicts)."""
    counts: dict[int, list] = {}
    for record in completions:
        step, success = record.get("step"), record.get("success")
        if isinstance(step, int) and isinstance(success, (int, float)):
            tally = counts.setdefault(step, [0, 0])
            tally[0] += 1 if success else 0
            tally[1] += 1
    return {step: (k, n) for step, (k, n) in counts.items()}


def logged_band(line: dict) -> Band | None:
    """The forecast a metrics.jsonl line logged (success_predicted and its band), None when it has none."""
    point = line.get("success_predicted")
    if not _is_number(point):
        return None
    low, high = line.get("success_predicted_low"), line.get("success_predicted_high")
    if _is_number(low) and _is_number(high):
        return Band(float(point), float(low), float(high))
    return Band(float(point))


def recent_steps(logged: int) -> int:
    """How many of `logged` measured steps make "the last steps": a quarter of them, at least 1, at most
    CHECK_STEPS. The train summary's success line uses the same window, so the forecast is judged against
    the number printed beside it."""
    return max(1, min(CHECK_STEPS, logged // 4))


def judge_logged(lines: list[dict], counts: dict[int, tuple[int, int]], steps: int | None = None) -> ForecastView | None:
    """The view of the last logged forecast: metrics lines (step order) beside the measured success.

    A line's measurement is the completions sampled since the line before it (`counts`, from
    `success_counts`); a line without any (a step that reuses a batch) is not a measured step.
    at: the last line's forecast; beside: the mean of the forecasts of the last `steps` measured lines
    (default `recent_steps` of them); measured: their completions pooled. None when no line has a forecast.
    """
    counted = sorted(counts.items())
    logged, measured_lines, i = [], [], 0
    for line in lines:
        step, band = line.get("step"), logged_band(line)
        if not isinstance(step, int) or band is None:
            continue
        k = n = 0
        while i < len(counted) and counted[i][0] <= step:  # the steps since the line before
            k, n, i = k + counted[i][1][0], n + counted[i][1][1], i + 1
        logged.append((step, band))
        if n:
            measured_lines.append((band, k, n))
    if not logged:
        return None
    last, at = logged[-1]
    if not measured_lines:
        return judge_forecast(at, step=last)
    window = measured_lines[-(steps or recent_steps(len(measured_lines))):]
    measured = MeasuredSuccess(sum(k for _, k, _ in window), sum(n for _, _, n in window))
    bands = [band for band, _, _ in window]
    beside = Band(*(float(np.mean(values)) for values in zip(*((b.predicted, *b.bounds) for b in bands))))
    if all(b.low is None for b in bands):
        beside = Band(beside.predicted)
    return judge_forecast(at, beside, measured, step=last, window_steps=len(window))


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
