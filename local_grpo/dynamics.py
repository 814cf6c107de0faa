"""GRPO success dynamics: the recurrence of the probability of success, its limit and fixed points.

The model (Mroueh, arXiv 2503.06639; restated in docs/dynamics.md): with a binary verifiable
reward, one exact GRPO iteration moves the log-odds of success L = logit(p) by Ω(p)/β, where Ω is the
sum of the contrastive weights of correct and wrong samples. Every variant fits one recurrence on
the log-odds gain over the reference, D = L − logit(p_ref):

    D_0 = 0,    D_n = (1 − a)·D_{n−1} + Ω(p_{n−1}) / β,    p_n = σ(logit(p_ref) + D_n)

    kl="ref"     a = 1      KL to the fixed reference policy (TRL's β)
    kl="mirror"  a = 0      KL to the previous policy: D grows without bound, p → 1
    kl="both"    a = α      β·[α·KL(·‖π_ref) + (1−α)·KL(·‖π_{n−1})]
    kl="none"    a = 0      no KL has no finite optimum per step; β is read as an inverse step
                            size and the dynamics are the mirror ones (PPO clipping plays the role
                            of the KL to the previous policy in a real trainer)

    norm="meanstd"  Ω(p) = (p(1−p) + ε)^(−1/2)      (GRPO: advantages divided by the std)
    norm="mean"     Ω(p) = 1                        (Dr. GRPO: mean-only advantages)

Working in D (log-odds) keeps p near 1 exact where probability space would round to 1.0.
p_ref = 0 and p_ref = 1 are absorbing: no sample differs from the others, so there is no signal.

This module is pure Python (+ numpy for the fixed-point grid): the CLI imports it, so it must stay
instant. It must not import torch, transformers or trl, and it does no I/O (the `predict` command is local_grpo/cli/predict.py).
"""

from __future__ import annotations

import math

import numpy as np

from local_grpo.errors import UserError

KL_CHOICES = ("ref", "mirror", "both", "none")
NORM_CHOICES = ("meanstd", "mean")

# limit(): iterate at most this many steps; converged when the log-odds move less than this.
MAX_ITERATIONS = 100_000
LOGIT_TOLERANCE = 1e-12
MAX_CYCLE_PERIOD = 8


class InvalidParameter(UserError, ValueError):
    """A predictor parameter out of range; the message names the CLI flag."""


# ---------------------------------------------------------------------------------------------
# Parameters and the elementary pieces


def check_params(p_ref, beta, kl="ref", norm="meanstd", alpha=0.5, eps=1e-5, steps=None):
    """Raise InvalidParameter (a UserError) naming the flag when a parameter is out of range."""
    if not isinstance(p_ref, (int, float)) or not 0.0 <= p_ref <= 1.0:
        raise InvalidParameter(f"--p-ref must be a probability in [0, 1], got {p_ref!r}")
    if not isinstance(beta, (int, float)) or not (beta > 0 and math.isfinite(beta)):
        raise InvalidParameter(f"--beta must be a finite number > 0, got {beta!r}")
    if kl not in KL_CHOICES:
        raise InvalidParameter(f"--kl must be one of {', '.join(KL_CHOICES)}, got {kl!r}")
    if norm not in NORM_CHOICES:
        raise InvalidParameter(f"--norm must be one of {', '.join(NORM_CHOICES)}, got {norm!r}")
    if kl == "both" and not (isinstance(alpha, (int, float)) and 0.0 < alpha <= 1.0):
        raise InvalidParameter(f"--alpha must be in (0, 1] with --kl both, got {alpha!r}")
    if norm == "meanstd" and not (isinstance(eps, (int, float)) and 1e-300 < eps < math.inf):
        raise InvalidParameter(f"--eps must be > 0 with --norm meanstd (the paper uses 1e-5), got {eps!r}")
    if steps is not None and (not isinstance(steps, int) or steps < 0):
        raise InvalidParameter(f"--steps must be an integer >= 0, got {steps!r}")


def ref_weight(kl, alpha):
    """The weight a of the KL to the reference in D_n = (1 − a)·D_{n−1} + Ω/β."""
    return {"ref": 1.0, "mirror": 0.0, "none": 0.0, "both": alpha}[kl]


def sigmoid(logit):
    """σ(L) without overflow for any float L (±inf included)."""
    if logit >= 0:
        return 1.0 / (1.0 + math.exp(-logit))
    z = math.exp(logit)
    return z / (1.0 + z)


def logit(p):
    """log(p/(1−p)), with logit(0) = −inf and logit(1) = +inf."""
    if p <= 0.0:
        return -math.inf
    if p >= 1.0:
        return math.inf
    return math.log(p) - math.log1p(-p)


def _variance_from_logit(logit_p):
    """p(1−p) computed from L = logit(p) without cancellation: e^−|L| / (1 + e^−|L|)²."""
    z = math.exp(-abs(logit_p))
    return z / (1.0 + z) ** 2


def omega(p, norm="meanstd", eps=1e-5):
    """Ω(p) = w⁺ + w⁻: (p(1−p) + ε)^(−1/2) for mean+std normalisation, 1 for mean-only."""
    if norm == "mean":
        return 1.0
    return (p * (1.0 - p) + eps) ** -0.5


def _omega_from_logit(logit_p, norm, eps):
    if norm == "mean":
        return 1.0
    return (_variance_from_logit(logit_p) + eps) ** -0.5


def _omega_from_logit_array(logits, norm, eps):
    """Vectorised Ω(σ(L)) for the fixed-point grid."""
    if norm == "mean":
        return np.ones_like(logits)
    z = np.exp(-np.abs(logits))
    return (z / (1.0 + z) ** 2 + eps) ** -0.5


# ---------------------------------------------------------------------------------------------
# One step of the recurrence


def step(p, p_ref, beta, kl="ref", norm="meanstd", alpha=0.5, eps=1e-5):
    """The map h: p_n = h(p_{n−1}) for the given p_ref and variant (in probability space)."""
    if p_ref <= 0.0 or p_ref >= 1.0:
        return float(p_ref)
    a = ref_weight(kl, alpha)
    gain = omega(p, norm, eps) / beta
    if a < 1.0:  # (skipped for kl="ref": 0·inf at p = 1 would give nan)
        gain += (1.0 - a) * (logit(p) - logit(p_ref))
    return sigmoid(logit(p_ref) + gain)


def step_derivative(p, p_ref, beta, kl="ref", norm="meanstd", alpha=0.5, eps=1e-5):
    """h′(p), analytic. For kl="ref", mean+std: −h(1−h)(1−2p) / (2β(p(1−p)+ε)^{3/2}).

    General form: h(1−h)·[(1−a)/(p(1−p)) + Ω′(p)/β]; at a fixed point h = p this is the
    derivative (1 − a) + p(1−p)·Ω′(p)/β of the log-odds map, so stability can be read off either.
    """
    if p_ref <= 0.0 or p_ref >= 1.0:
        return 0.0
    h = step(p, p_ref, beta, kl, norm, alpha, eps)
    a = ref_weight(kl, alpha)
    d_omega = 0.0 if norm == "mean" else -0.5 * (1.0 - 2.0 * p) * (p * (1.0 - p) + eps) ** -1.5
    mirror_part = (1.0 - a) / (p * (1.0 - p)) if a < 1.0 else 0.0
    return h * (1.0 - h) * (mirror_part + d_omega / beta)


def _gain_map_derivative(logit_p, beta, a, norm, eps):
    """dD_n/dD_{n−1} = (1 − a) + p(1−p)·Ω′(p)/β, evaluated from L = logit(p)."""
    if norm == "mean":
        return 1.0 - a
    var = _variance_from_logit(logit_p)
    one_minus_2p = math.tanh(-logit_p / 2.0)  # 1 − 2σ(L), exact for large |L|
    d_omega = -0.5 * one_minus_2p * (var + eps) ** -1.5
    return (1.0 - a) + var * d_omega / beta


def _next_gain(gain, logit_ref, beta, a, norm, eps):
    return (1.0 - a) * gain + _omega_from_logit(logit_ref + gain, norm, eps) / beta


# ---------------------------------------------------------------------------------------------
# Trajectory, fixed points, limit


def trajectory(p_ref, beta, kl="ref", norm="meanstd", alpha=0.5, eps=1e-5, steps=50):
    """[p_0, p_1, ..., p_steps] of the exact iteration started at π_0 = π_ref (p_0 = p_ref)."""
    check_params(p_ref, beta, kl, norm, alpha, eps, steps)
    if p_ref in (0.0, 1.0):
        return [float(p_ref)] * (steps + 1)
    logit_ref, a = logit(p_ref), ref_weight(kl, alpha)
    gain, path = 0.0, [float(p_ref)]
    for _ in range(steps):
        gain = _next_gain(gain, logit_ref, beta, a, norm, eps)
        path.append(sigmoid(logit_ref + gain))
    return path


def trajectories(p_refs, betas, kl="ref", norm="meanstd", alpha=0.5, eps=1e-5, steps=50):
    """trajectory() for many p_ref and many β at once (the forecast's fit): an array [β, p_ref, step].

    Entry [i, j, n] is p_n for p_refs[j] at betas[i], equal to trajectory(p_refs[j], betas[i], ...)[n]
    up to float rounding. p_ref 0 and 1 stay put (absorbing), as in trajectory().
    """
    p_refs = np.asarray(p_refs, dtype=float).reshape(1, -1)
    betas = np.asarray(betas, dtype=float).reshape(-1, 1)
    for p in np.unique(p_refs):
        check_params(float(p), 1.0, kl, norm, alpha, eps, steps)
    for beta in np.unique(betas):
        check_params(0.5, float(beta))
    a = ref_weight(kl, alpha)
    inner = (p_refs > 0.0) & (p_refs < 1.0)
    clipped = np.clip(p_refs, 1e-300, 1.0 - 1e-16)
    logit_ref = np.where(inner, np.log(clipped) - np.log1p(-clipped), 0.0)
    gain = np.zeros((betas.shape[0], p_refs.shape[1]))
    path = np.empty((betas.shape[0], p_refs.shape[1], steps + 1))
    path[:, :, 0] = p_refs
    for n in range(1, steps + 1):
        gain = (1.0 - a) * gain + _omega_from_logit_array(logit_ref + gain, norm, eps) / betas
        path[:, :, n] = np.where(inner, _sigmoid_array(logit_ref + gain), p_refs)
    return path


def _sigmoid_array(logits):
    """σ(L) elementwise, without overflow and with full relative precision near 0."""
    return np.exp(-np.logaddexp(0.0, -logits))


def fixed_points(p_ref, beta, kl="ref", norm="meanstd", alpha=0.5, eps=1e-5):
    """Every fixed point p* = h(p*) as [{"p": float, "stable": bool}], ascending in p.

    Interior fixed points exist only with a KL to the reference (a > 0); they solve
    a·D = Ω(σ(logit p_ref + D))/β, i.e. the kl="ref" equation at strength a·β. Stability is
    |dD_n/dD_{n−1}| < 1 at the point (the same number as |h′(p*)|).
    With a = 0 (mirror, none) the only fixed point is the boundary p = 1, which attracts every
    0 < p_ref < 1. p_ref = 0 or 1 is its own (absorbing) fixed point.

    Found by bracketing sign changes of F(D) = Ω/(aβ) − D on a grid in log-odds (dense where Ω
    varies, |L| ≲ log(1/ε), coarse elsewhere, so points extremely close to 1 are found), then
    bisection. Two roots closer than the dense grid step (0.005 in log-odds, near a tangency)
    can be missed.
    """
    check_params(p_ref, beta, kl, norm, alpha, eps)
    if p_ref in (0.0, 1.0):
        return [{"p": float(p_ref), "stable": True}]
    a = ref_weight(kl, alpha)
    if a == 0.0:
        return [{"p": 1.0, "stable": True}]

    logit_ref = logit(p_ref)
    strength = a * beta
    omega_max = 1.0 if norm == "mean" else eps ** -0.5
    gain_max = omega_max / strength  # F(D) < 0 beyond this, and F(0) > 0: at least one root

    def excess(gain):  # F(D); its zeros are the fixed points
        return _omega_from_logit(logit_ref + gain, norm, eps) / strength - gain

    dense_halfwidth = 40.0 + (0.0 if norm == "mean" else math.log(1.0 / eps))
    lo, hi = max(0.0, -dense_halfwidth - logit_ref), min(gain_max, dense_halfwidth - logit_ref)
    grid = [np.linspace(0.0, gain_max, 4001)]
    if lo < hi:
        grid.append(np.arange(lo, hi, 0.005))
    gains = np.unique(np.concatenate(grid))
    values = _omega_from_logit_array(logit_ref + gains, norm, eps) / strength - gains

    roots = []
    for i in np.flatnonzero(values == 0.0):
        roots.append(float(gains[i]))
    for i in np.flatnonzero(values[:-1] * values[1:] < 0.0):
        left, right = float(gains[i]), float(gains[i + 1])
        f_left = excess(left)
        for _ in range(200):
            mid = 0.5 * (left + right)
            if mid in (left, right):
                break
            f_mid = excess(mid)
            if (f_mid > 0.0) == (f_left > 0.0):
                left, f_left = mid, f_mid
            else:
                right = mid
        roots.append(0.5 * (left + right))

    points = []
    for gain in sorted(roots):
        slope = _gain_map_derivative(logit_ref + gain, beta, a, norm, eps)
        points.append({"p": sigmoid(logit_ref + gain), "stable": abs(slope) < 1.0})
    return points


def limit_info(p_ref, beta, kl="ref", norm="meanstd", alpha=0.5, eps=1e-5):
    """The long-run behaviour of the iteration from p_ref, as a dict.

    {"p_star": float, "converged": bool, "cycle": None | [p, ...], "steps": int}.
    - converged: p_star is the fixed point the iteration reaches (mirror/none: 1.0).
    - a period-k cycle (an unstable fixed point with h′ < −1, seen with mean+std, small β and
      p* < 1/2): p_star is the mean of p over the cycle — what measured success would average to —
      and "cycle" lists the cycle's values.
    - neither within MAX_ITERATIONS (aperiodic oscillation): p_star is the mean of p over the
      last 1000 iterates, converged False, cycle None.
    """
    check_params(p_ref, beta, kl, norm, alpha, eps)
    if p_ref in (0.0, 1.0):
        return {"p_star": float(p_ref), "converged": True, "cycle": None, "steps": 0}
    a = ref_weight(kl, alpha)
    if a == 0.0:  # each step adds at least Ω_min/β > 0 to the log-odds: p → 1
        return {"p_star": 1.0, "converged": True, "cycle": None, "steps": 0}

    logit_ref = logit(p_ref)
    recent = [0.0]  # the last MAX_CYCLE_PERIOD + 1 gains
    for n in range(1, MAX_ITERATIONS + 1):
        gain = _next_gain(recent[-1], logit_ref, beta, a, norm, eps)
        recent = (recent + [gain])[-(MAX_CYCLE_PERIOD + 1):]
        tolerance = LOGIT_TOLERANCE * max(1.0, abs(logit_ref + gain))
        if abs(gain - recent[-2]) <= tolerance:
            return {"p_star": sigmoid(logit_ref + gain), "converged": True, "cycle": None, "steps": n}
        for period in range(2, min(MAX_CYCLE_PERIOD, len(recent) - 1) + 1):
            spread = max(recent[-period:]) - min(recent[-period:])
            # a slowly damped oscillation also repeats within tolerance; a real cycle has spread
            if abs(gain - recent[-1 - period]) <= tolerance and spread > 1e6 * tolerance:
                cycle = [sigmoid(logit_ref + g) for g in recent[-period:]]
                return {"p_star": sum(cycle) / period, "converged": False, "cycle": cycle, "steps": n}

    tail, gain = [], recent[-1]
    for _ in range(1000):
        gain = _next_gain(gain, logit_ref, beta, a, norm, eps)
        tail.append(sigmoid(logit_ref + gain))
    return {"p_star": sum(tail) / len(tail), "converged": False, "cycle": None, "steps": MAX_ITERATIONS}


def limit(p_ref, beta, kl="ref", norm="meanstd", alpha=0.5, eps=1e-5):
    """p_star: the limit of the iteration from p_ref (the cycle mean if it oscillates; see limit_info)."""
    return limit_info(p_ref, beta, kl, norm, alpha, eps)["p_star"]


# ---------------------------------------------------------------------------------------------
# Predictions


def predict(p_ref, beta, kl="ref", norm="meanstd", alpha=0.5, eps=1e-5, steps=50):
    """Everything the predictor says about one prompt.

    {"p_star", "fixed_points": [{"p", "stable"}], "trajectory": [p_0..p_steps],
     "converged": bool, "cycle": None | [p, ...]}
    """
    info = limit_info(p_ref, beta, kl, norm, alpha, eps)
    return {
        "p_star": info["p_star"],
        "fixed_points": fixed_points(p_ref, beta, kl, norm, alpha, eps),
        "trajectory": trajectory(p_ref, beta, kl, norm, alpha, eps, steps),
        "converged": info["converged"],
        "cycle": info["cycle"],
    }


def predict_dataset(p_refs, beta, kl="ref", norm="meanstd", alpha=0.5, eps=1e-5, steps=50):
    """Predict per prompt, then average: the recurrence is nonlinear, so the mean of p_ref is not
    a valid input (with β = 1, Dr. GRPO, prompts at p_ref 0 and 1 stay put — mean 0.5 — while a
    single prompt at 0.5 would go to 0.73).

    {"p_star": mean of per-prompt p*, "trajectory": per-step mean success, "p_ref_mean",
     "per_prompt": [{"p_ref", "p_star", "fixed_points", "converged", "cycle"}], "fixed_points": []}
    A dataset has no single fixed point; "fixed_points" stays empty and each prompt carries its own.
    """
    p_refs = [float(p) for p in p_refs]
    if not p_refs:
        raise InvalidParameter("--p-ref: the dataset has no prompts to predict for")
    for p in p_refs:
        check_params(p, beta, kl, norm, alpha, eps, steps)
    by_value = {p: predict(p, beta, kl, norm, alpha, eps, steps) for p in sorted(set(p_refs))}
    per_prompt = [{"p_ref": p, **{k: by_value[p][k] for k in ("p_star", "fixed_points", "converged", "cycle")}}
                  for p in p_refs]
    trajectories = np.array([by_value[p]["trajectory"] for p in p_refs])
    return {
        "p_star": float(np.mean([row["p_star"] for row in per_prompt])),
        "fixed_points": [],
        "trajectory": [float(x) for x in trajectories.mean(axis=0)],
        "p_ref_mean": float(np.mean(p_refs)),
        "per_prompt": per_prompt,
    }


def mapping_from_trl(beta, scale_rewards="group", num_generations=8):
    """The predictor's (beta, eps, norm) for a TRL GRPOConfig, as a dict.

    TRL divides by the group's unbiased std plus 1e-4: with k of G correct and p = k/G that is
    A = (r − p)/(c·sqrt(p(1−p)) + 1e-4), c = sqrt(G/(G−1)), i.e. the paper's weights scaled by 1/c
    (β_eff = c·β) with the small constant outside the root; matching at p(1−p) = 0 gives
    ε = (1e-4/c)². "batch" uses one std for the whole batch, approximated by the same mapping.
    "none" is mean-only (Dr. GRPO): β_eff = β. TRL's β is per token, the paper's per sequence;
    see docs/dynamics.md for what that does to the prediction.
    """
    if scale_rewards is True:  # older TRL accepted booleans
        scale_rewards = "group"
    elif scale_rewards is False:
        scale_rewards = "none"
    if scale_rewards not in ("group", "batch", "none"):
        raise InvalidParameter(f"grpo.scale_rewards must be group, batch or none, got {scale_rewards!r}")
    if not isinstance(num_generations, int) or num_generations < 2:
        raise InvalidParameter(f"grpo.num_generations must be an integer >= 2, got {num_generations!r}")
    if scale_rewards == "none":
        return {"beta": float(beta), "eps": 1e-5, "norm": "mean"}
    c = math.sqrt(num_generations / (num_generations - 1))
    return {"beta": float(beta) * c, "eps": (1e-4 / c) ** 2, "norm": "meanstd"}
