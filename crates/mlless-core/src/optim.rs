//! Optimisers that turn a sparse gradient into a sparse delta, and learning-rate schedules.
//!
//! An optimiser does not change the parameters: [`Optimizer::step`] returns the delta to add,
//! touching only the gradient's coordinates, so that the runtime can publish it and every
//! replica can apply the mean of the step's deltas.
//!
//! ```
//! use mlless_core::{OptimizerConfig, OptimizerKind, SparseVector, build_optimizer};
//! let mut opt = build_optimizer(&OptimizerConfig::new(OptimizerKind::Sgd), 3);
//! let grad = SparseVector::from_pairs(vec![(1, 2.0)]);
//! let delta = opt.step(&[0.0; 3], &grad, 0.1);
//! assert_eq!(delta.indices(), &[1]);
//! assert_eq!(delta.values(), &[-0.2]);
//! ```

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::sparse::SparseVector;

/// A string that names no known variant of an option.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown {what} {value:?} (expected one of: {expected})")]
pub struct ParseError {
    /// What was being parsed, e.g. "optimizer".
    pub what: &'static str,
    /// The string given.
    pub value: String,
    /// The accepted spellings.
    pub expected: &'static str,
}

/// The optimisation algorithm of a worker (`--optimizer`: with the feature `clap`, the CLI's
/// value, named as by [`OptimizerKind::as_str`], with the help of `--help`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "lowercase")]
pub enum OptimizerKind {
    /// Plain stochastic gradient descent.
    ///
    /// `Δ = -lr g`.
    Sgd,
    /// SGD with heavy-ball momentum 0.9.
    Momentum,
    /// SGD with Nesterov momentum 0.9.
    Nesterov,
    /// Adam (sparse: only touched coordinates are updated).
    ///
    /// Its moments are lazy: a coordinate's are updated when its gradient is not zero.
    Adam,
}

impl OptimizerKind {
    /// Every kind, in declaration order (each at its [`index`](Self::index)).
    pub const ALL: [OptimizerKind; 4] = [
        OptimizerKind::Sgd,
        OptimizerKind::Momentum,
        OptimizerKind::Nesterov,
        OptimizerKind::Adam,
    ];

    /// Its place in [`ALL`](Self::ALL): an exhaustive match, so that a new kind does not
    /// compile until it has a place here (and in `ALL`, checked by `assert_all_in_place!`).
    pub const fn index(self) -> usize {
        match self {
            OptimizerKind::Sgd => 0,
            OptimizerKind::Momentum => 1,
            OptimizerKind::Nesterov => 2,
            OptimizerKind::Adam => 3,
        }
    }

    /// The spelling used by `FromStr`, `Display` and serde.
    pub fn as_str(&self) -> &'static str {
        match self {
            OptimizerKind::Sgd => "sgd",
            OptimizerKind::Momentum => "momentum",
            OptimizerKind::Nesterov => "nesterov",
            OptimizerKind::Adam => "adam",
        }
    }
}

crate::assert_all_in_place!(OptimizerKind);

impl fmt::Display for OptimizerKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for OptimizerKind {
    type Err = ParseError;

    /// Parses `sgd`, `momentum`, `nesterov` or `adam` (ASCII case-insensitive).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|k| k.as_str().eq_ignore_ascii_case(s.trim()))
            .ok_or_else(|| ParseError {
                what: "optimizer",
                value: s.to_string(),
                expected: "sgd, momentum, nesterov, adam",
            })
    }
}

/// The optimiser of a job and its hyper-parameters (the learning rate is given per step).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct OptimizerConfig {
    /// The algorithm.
    pub kind: OptimizerKind,
    /// Momentum coefficient μ of `Momentum` and `Nesterov`.
    pub momentum: f32,
    /// Adam's decay of the first moment.
    pub beta1: f32,
    /// Adam's decay of the second moment.
    pub beta2: f32,
    /// Adam's ε, added to the square root of the second moment.
    pub epsilon: f32,
}

impl Default for OptimizerConfig {
    /// Adam with μ = 0.9, β1 = 0.9, β2 = 0.999, ε = 1e-8.
    fn default() -> Self {
        Self {
            kind: OptimizerKind::Adam,
            momentum: 0.9,
            beta1: 0.9,
            beta2: 0.999,
            epsilon: 1e-8,
        }
    }
}

impl OptimizerConfig {
    /// The default hyper-parameters for `kind`.
    pub fn new(kind: OptimizerKind) -> Self {
        Self {
            kind,
            ..Self::default()
        }
    }

    /// Checks that the hyper-parameters are in range: μ, β1, β2 in [0, 1), ε > 0, all finite.
    pub fn validate(&self) -> Result<(), OptimizerError> {
        let unit = |name: &'static str, v: f32| {
            if (0.0..1.0).contains(&v) {
                Ok(())
            } else {
                Err(OptimizerError::InvalidConfig {
                    reason: format!("{name} must be in [0, 1), got {v}"),
                })
            }
        };
        unit("momentum", self.momentum)?;
        unit("beta1", self.beta1)?;
        unit("beta2", self.beta2)?;
        if !(self.epsilon.is_finite() && self.epsilon > 0.0) {
            return Err(OptimizerError::InvalidConfig {
                reason: format!("epsilon must be finite and > 0, got {}", self.epsilon),
            });
        }
        Ok(())
    }
}

/// Why an optimiser cannot be built or restored.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OptimizerError {
    /// A hyper-parameter is out of range.
    #[error("invalid optimizer config: {reason}")]
    InvalidConfig {
        /// What is wrong.
        reason: String,
    },
    /// A saved state does not fit this optimiser.
    #[error("optimizer state does not fit: {reason}")]
    StateMismatch {
        /// What does not fit.
        reason: String,
    },
}

/// The state of an optimiser, for checkpoints: restoring it into a fresh optimiser of the same
/// kind and dimension continues the exact same sequence of deltas.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OptimizerState {
    /// The optimiser's kind.
    pub kind: OptimizerKind,
    /// Number of steps taken.
    pub steps: u64,
    /// Per-coordinate state vectors: none for SGD, `[velocity]` for momentum and Nesterov,
    /// `[m, v]` for Adam.
    pub slots: Vec<Vec<f32>>,
}

/// An optimiser: turns a sparse gradient into the sparse delta to add to the parameters.
pub trait Optimizer: Send + Sync {
    /// Returns the delta for gradient `grad` at learning rate `lr`, over the gradient's
    /// coordinates only, and updates the state of those coordinates. Counts one step, even for
    /// an empty gradient.
    ///
    /// `params` are the parameters the gradient was computed at; the built-in optimisers do not
    /// read them, but they are part of the interface for those that do (e.g. proximal steps).
    ///
    /// # Panics
    /// Panics if a gradient index is not below the optimiser's dimension.
    fn step(&mut self, params: &[f32], grad: &SparseVector, lr: f32) -> SparseVector;

    /// The algorithm.
    fn kind(&self) -> OptimizerKind;

    /// Number of steps taken.
    fn steps(&self) -> u64;

    /// A copy of the state, for a checkpoint.
    fn state(&self) -> OptimizerState;

    /// Replaces the state with a saved one of the same kind and dimension.
    fn restore(&mut self, state: OptimizerState) -> Result<(), OptimizerError>;
}

/// Builds the optimiser `config` describes over `dim` parameters, with zero state.
///
/// The config is used as given; call [`OptimizerConfig::validate`] first on untrusted input.
pub fn build_optimizer(config: &OptimizerConfig, dim: usize) -> Box<dyn Optimizer> {
    match config.kind {
        OptimizerKind::Sgd => Box::new(Sgd::new()),
        OptimizerKind::Momentum => Box::new(Momentum::new(dim, config.momentum, false)),
        OptimizerKind::Nesterov => Box::new(Momentum::new(dim, config.momentum, true)),
        OptimizerKind::Adam => Box::new(Adam::new(dim, config.beta1, config.beta2, config.epsilon)),
    }
}

/// Checks a saved state's kind and slot shapes.
fn check_state(
    state: &OptimizerState,
    kind: OptimizerKind,
    slots: usize,
    dim: usize,
) -> Result<(), OptimizerError> {
    let mismatch = |reason: String| Err(OptimizerError::StateMismatch { reason });
    if state.kind != kind {
        return mismatch(format!("state of {} for a {kind} optimizer", state.kind));
    }
    if state.slots.len() != slots {
        return mismatch(format!(
            "{} state vectors, {kind} has {slots}",
            state.slots.len()
        ));
    }
    if let Some(bad) = state.slots.iter().find(|s| s.len() != dim) {
        return mismatch(format!(
            "a state vector of length {}, the optimizer has dimension {dim}",
            bad.len()
        ));
    }
    Ok(())
}

/// Plain SGD: `Δ_j = -lr g_j`. Stateless apart from its step count.
#[derive(Debug, Clone, Default)]
pub struct Sgd {
    steps: u64,
}

impl Sgd {
    /// A fresh SGD optimiser.
    pub fn new() -> Self {
        Self::default()
    }
}

impl Optimizer for Sgd {
    fn step(&mut self, _params: &[f32], grad: &SparseVector, lr: f32) -> SparseVector {
        self.steps += 1;
        let mut delta = grad.clone();
        delta.scale(-lr);
        delta
    }

    fn kind(&self) -> OptimizerKind {
        OptimizerKind::Sgd
    }

    fn steps(&self) -> u64 {
        self.steps
    }

    fn state(&self) -> OptimizerState {
        OptimizerState {
            kind: OptimizerKind::Sgd,
            steps: self.steps,
            slots: Vec::new(),
        }
    }

    fn restore(&mut self, state: OptimizerState) -> Result<(), OptimizerError> {
        check_state(&state, OptimizerKind::Sgd, 0, 0)?;
        self.steps = state.steps;
        Ok(())
    }
}

/// Heavy-ball or Nesterov momentum with lazy (sparse) velocities, in PyTorch's form.
///
/// For each touched coordinate: `v_j ← μ v_j + g_j`, then `Δ_j = -lr v_j` (heavy ball) or
/// `Δ_j = -lr (g_j + μ v_j)` (Nesterov). The learning rate multiplies the velocity when it is
/// applied, so a schedule that changes `lr` takes effect at once.
///
/// Lazy: a coordinate the gradient does not touch keeps its velocity unchanged (no decay, no
/// step along it), so a step costs O(nnz). This differs from dense momentum, which would keep
/// moving an untouched coordinate along its decaying velocity; for sparse data that is both
/// O(dim) per step and of little use.
#[derive(Debug, Clone)]
pub struct Momentum {
    momentum: f32,
    nesterov: bool,
    velocity: Vec<f32>,
    steps: u64,
}

impl Momentum {
    /// Zero velocities over `dim` coordinates, coefficient `momentum`.
    pub fn new(dim: usize, momentum: f32, nesterov: bool) -> Self {
        Self {
            momentum,
            nesterov,
            velocity: vec![0.0; dim],
            steps: 0,
        }
    }
}

impl Optimizer for Momentum {
    fn step(&mut self, _params: &[f32], grad: &SparseVector, lr: f32) -> SparseVector {
        self.steps += 1;
        let mu = self.momentum;
        let mut delta = grad.clone();
        for (&j, d) in grad.indices().iter().zip(delta.values_mut()) {
            let g = *d;
            let v = &mut self.velocity[j as usize];
            *v = mu * *v + g;
            *d = if self.nesterov {
                -lr * (g + mu * *v)
            } else {
                -lr * *v
            };
        }
        delta
    }

    fn kind(&self) -> OptimizerKind {
        if self.nesterov {
            OptimizerKind::Nesterov
        } else {
            OptimizerKind::Momentum
        }
    }

    fn steps(&self) -> u64 {
        self.steps
    }

    fn state(&self) -> OptimizerState {
        OptimizerState {
            kind: self.kind(),
            steps: self.steps,
            slots: vec![self.velocity.clone()],
        }
    }

    fn restore(&mut self, state: OptimizerState) -> Result<(), OptimizerError> {
        check_state(&state, self.kind(), 1, self.velocity.len())?;
        self.steps = state.steps;
        self.velocity = state.slots.into_iter().next().unwrap_or_default();
        Ok(())
    }
}

/// Adam with lazy (sparse) moments — the "LazyAdam" of TensorFlow Addons and the update of
/// PyTorch's `SparseAdam`.
///
/// At step `t` (the optimiser's global step count, starting at 1), for each coordinate `j`
/// the gradient touches:
///
/// ```text
/// m_j ← β1 m_j + (1 - β1) g_j
/// v_j ← β2 v_j + (1 - β2) g_j²
/// Δ_j = -lr · (m_j / (1 - β1^t)) / (sqrt(v_j / (1 - β2^t)) + ε)
/// ```
///
/// **Untouched coordinates**: their moments are *not* decayed and they get no delta; their
/// `m_j` and `v_j` stay exactly as they were when the coordinate was last touched. The bias
/// correction nevertheless uses the global step count `t`, not a per-coordinate count.
///
/// **Why**: dense Adam would decay every moment and move every coordinate whose `m_j ≠ 0` at
/// every step, costing O(dim) per step and producing dense deltas — fatal for sparse models
/// (millions of hashed features, a few thousand touched per batch) whose deltas must stay
/// sparse to be cheap to exchange. Lazy moments cost O(nnz) per step and keep the delta's
/// support equal to the gradient's. The price is that a rarely seen coordinate keeps an older,
/// larger moment than dense Adam would; in practice (LazyAdam, SparseAdam) this converges as
/// well or better on sparse problems. Using the global `t` for the bias correction keeps the
/// state at two vectors; for a coordinate first seen at a late step the correction is then ≈ 1,
/// so its first update is `≈ -lr (1-β1) g / (sqrt(1-β2) |g| + ε)`, i.e. about `0.32 lr` in
/// magnitude with the default betas, smaller than dense Adam's first step of `lr`.
#[derive(Debug, Clone)]
pub struct Adam {
    beta1: f32,
    beta2: f32,
    epsilon: f32,
    /// `[m_j, v_j]` side by side: one cache line per touched coordinate, not two.
    moments: Vec<[f32; 2]>,
    steps: u64,
}

impl Adam {
    /// Zero moments over `dim` coordinates.
    pub fn new(dim: usize, beta1: f32, beta2: f32, epsilon: f32) -> Self {
        Self {
            beta1,
            beta2,
            epsilon,
            moments: vec![[0.0; 2]; dim],
            steps: 0,
        }
    }
}

impl Optimizer for Adam {
    fn step(&mut self, _params: &[f32], grad: &SparseVector, lr: f32) -> SparseVector {
        self.steps += 1;
        let t = self.steps as f64;
        let (b1, b2) = (self.beta1, self.beta2);
        let correction1 = 1.0 - f64::from(b1).powf(t);
        let correction2 = 1.0 - f64::from(b2).powf(t);
        // Δ = -(lr / c1) · m / (sqrt(v) / sqrt(c2) + ε), PyTorch's arrangement.
        let step_size = (f64::from(lr) / correction1) as f32;
        let inv_sqrt_c2 = (1.0 / correction2.sqrt()) as f32;
        let mut delta = grad.clone();
        for (&j, d) in grad.indices().iter().zip(delta.values_mut()) {
            let g = *d;
            let [m, v] = &mut self.moments[j as usize];
            *m = b1 * *m + (1.0 - b1) * g;
            *v = b2 * *v + (1.0 - b2) * g * g;
            *d = -step_size * *m / (v.sqrt() * inv_sqrt_c2 + self.epsilon);
        }
        delta
    }

    fn kind(&self) -> OptimizerKind {
        OptimizerKind::Adam
    }

    fn steps(&self) -> u64 {
        self.steps
    }

    fn state(&self) -> OptimizerState {
        OptimizerState {
            kind: OptimizerKind::Adam,
            steps: self.steps,
            slots: vec![
                self.moments.iter().map(|mv| mv[0]).collect(),
                self.moments.iter().map(|mv| mv[1]).collect(),
            ],
        }
    }

    fn restore(&mut self, state: OptimizerState) -> Result<(), OptimizerError> {
        check_state(&state, OptimizerKind::Adam, 2, self.moments.len())?;
        self.steps = state.steps;
        let (m, v) = (&state.slots[0], &state.slots[1]);
        self.moments = m.iter().zip(v).map(|(&m, &v)| [m, v]).collect();
        Ok(())
    }
}

/// How the learning rate changes over epochs (`--schedule`: with the feature `clap`, the CLI's
/// value, named as by [`Schedule::as_str`], with the help of `--help`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "kebab-case")]
pub enum Schedule {
    /// The same rate throughout.
    #[default]
    Constant,
    /// lr / sqrt(1 + epoch / T), T = --decay-epochs.
    ///
    /// That is `base / sqrt(1 + epoch / T)`, epochs counted from 0, `T` the schedule's time constant in
    /// epochs (`--decay-epochs`; 1: `base / sqrt(epoch + 1)`).
    InvSqrtEpoch,
}

impl Schedule {
    /// The learning rate at `epoch` (from 0) for base rate `base`, with `decay_epochs` the
    /// inverse-square-root schedule's time constant (> 0; the rate has fallen to `base / √2`
    /// after that many epochs).
    pub fn rate(&self, base: f32, epoch: u64, decay_epochs: f64) -> f32 {
        match self {
            Schedule::Constant => base,
            Schedule::InvSqrtEpoch => {
                (f64::from(base) / (1.0 + epoch as f64 / decay_epochs).sqrt()) as f32
            }
        }
    }

    /// The spelling used by `FromStr`, `Display` and serde.
    pub fn as_str(&self) -> &'static str {
        match self {
            Schedule::Constant => "constant",
            Schedule::InvSqrtEpoch => "inv-sqrt-epoch",
        }
    }
}

impl fmt::Display for Schedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Schedule {
    type Err = ParseError;

    /// Parses `constant` or `inv-sqrt-epoch` (ASCII case-insensitive).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        [Schedule::Constant, Schedule::InvSqrtEpoch]
            .into_iter()
            .find(|k| k.as_str().eq_ignore_ascii_case(s.trim()))
            .ok_or_else(|| ParseError {
                what: "schedule",
                value: s.to_string(),
                expected: "constant, inv-sqrt-epoch",
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn g1() -> SparseVector {
        SparseVector::from_parts(vec![0, 2], vec![1.0, -2.0]).unwrap()
    }

    fn g2() -> SparseVector {
        SparseVector::from_parts(vec![0, 1], vec![0.5, 1.0]).unwrap()
    }

    fn run_two_steps(kind: OptimizerKind) -> (SparseVector, SparseVector, Box<dyn Optimizer>) {
        let mut opt = build_optimizer(&OptimizerConfig::new(kind), 4);
        let params = [0.0; 4];
        let d1 = opt.step(&params, &g1(), 0.1);
        let d2 = opt.step(&params, &g2(), 0.1);
        (d1, d2, opt)
    }

    fn assert_delta(got: &SparseVector, indices: &[u32], values: &[f64]) {
        assert_eq!(got.indices(), indices);
        for (&g, &w) in got.values().iter().zip(values) {
            assert!(
                (f64::from(g) - w).abs() <= 1e-6 * w.abs().max(1e-3),
                "got {:?}, want {values:?}",
                got.values()
            );
        }
    }

    #[test]
    fn sgd_two_steps() {
        let (d1, d2, opt) = run_two_steps(OptimizerKind::Sgd);
        assert_delta(&d1, &[0, 2], &[-0.1, 0.2]);
        assert_delta(&d2, &[0, 1], &[-0.05, -0.1]);
        assert_eq!(opt.steps(), 2);
    }

    #[test]
    fn momentum_two_steps_and_lazy_velocity() {
        let (d1, d2, opt) = run_two_steps(OptimizerKind::Momentum);
        // v0 = 1, v2 = -2; then v0 = 0.9·1 + 0.5 = 1.4, v1 = 1.
        assert_delta(&d1, &[0, 2], &[-0.1, 0.2]);
        assert_delta(&d2, &[0, 1], &[-0.14, -0.1]);
        let state = opt.state();
        // Coordinate 2 was not touched by step 2: its velocity is not decayed.
        assert_eq!(state.slots[0], vec![1.4, 1.0, -2.0, 0.0]);
    }

    #[test]
    fn nesterov_two_steps_and_lazy_velocity() {
        let (d1, d2, opt) = run_two_steps(OptimizerKind::Nesterov);
        // Δ = -lr (g + μ v): step 1: -0.1(1 + 0.9) = -0.19, -0.1(-2 - 1.8) = 0.38;
        // step 2: -0.1(0.5 + 0.9·1.4) = -0.176, -0.1(1 + 0.9) = -0.19.
        assert_delta(&d1, &[0, 2], &[-0.19, 0.38]);
        assert_delta(&d2, &[0, 1], &[-0.176, -0.19]);
        assert_eq!(opt.state().slots[0], vec![1.4, 1.0, -2.0, 0.0]);
        assert_eq!(opt.kind(), OptimizerKind::Nesterov);
    }

    #[test]
    fn adam_two_steps_and_lazy_moments() {
        let (d1, d2, opt) = run_two_steps(OptimizerKind::Adam);
        // Step 1 (t = 1): m̂ = g, v̂ = g², Δ = -lr·sign(g) (ε negligible).
        assert_delta(&d1, &[0, 2], &[-0.1, 0.1]);
        // Step 2 (t = 2), coordinate 0: m = 0.09 + 0.05 = 0.14, v = 0.000999 + 0.00025 =
        // 0.001249; m̂ = 0.14 / 0.19 = 0.7368421, v̂ = 0.001249 / 0.001999 = 0.6248124;
        // Δ = -0.1 · 0.7368421 / 0.7904507 = -0.09321796.
        // Coordinate 1, first seen at t = 2: m = 0.1, v = 0.001; m̂ = 0.5263158,
        // v̂ = 0.5002501; Δ = -0.1 · 0.5263158 / 0.7072836 = -0.07441368.
        assert_delta(&d2, &[0, 1], &[-0.09321796, -0.07441368]);
        let state = opt.state();
        assert_eq!(state.steps, 2);
        // Coordinate 2's moments are still those of step 1: m = -0.2, v = 0.004 (not decayed).
        let (m, v) = (&state.slots[0], &state.slots[1]);
        // Bit-exact: the f32 values written at step 1 are untouched.
        let (b1, b2) = (0.9_f32, 0.999_f32);
        assert_eq!((m[2], v[2]), ((1.0 - b1) * -2.0, (1.0 - b2) * 4.0));
        assert_eq!((m[3], v[3]), (0.0, 0.0));
        // Touched coordinate 0 moved on (f32's 1 - 0.999 is off by 1.3e-5 relative).
        assert!((m[0] - 0.14).abs() < 1e-6 * 0.14 && (v[0] - 0.001249).abs() < 3e-5 * 0.001249);
    }

    #[test]
    fn deltas_touch_only_the_gradient() {
        for kind in OptimizerKind::ALL {
            let mut opt = build_optimizer(&OptimizerConfig::new(kind), 100);
            let params = vec![1.0; 100];
            for _ in 0..3 {
                let d = opt.step(&params, &g1(), 0.1);
                assert_eq!(d.indices(), g1().indices(), "{kind}");
            }
            assert!(opt.step(&params, &SparseVector::new(), 0.1).is_empty());
            assert_eq!(opt.steps(), 4);
        }
    }

    #[test]
    fn restore_continues_the_same_sequence() {
        for kind in OptimizerKind::ALL {
            let config = OptimizerConfig::new(kind);
            let mut a = build_optimizer(&config, 4);
            let params = [0.0; 4];
            a.step(&params, &g1(), 0.1);
            let saved = a.state();
            let mut b = build_optimizer(&config, 4);
            b.restore(saved.clone()).unwrap();
            assert_eq!(b.state(), saved);
            assert_eq!(a.step(&params, &g2(), 0.1), b.step(&params, &g2(), 0.1));

            let mut wrong_dim = build_optimizer(&config, 5);
            let mismatch = wrong_dim.restore(saved.clone());
            assert_eq!(mismatch.is_err(), kind != OptimizerKind::Sgd, "{kind}");
            let other = OptimizerKind::ALL.into_iter().find(|&k| k != kind).unwrap();
            let mut wrong_kind = build_optimizer(&OptimizerConfig::new(other), 4);
            assert!(wrong_kind.restore(saved).is_err());
        }
    }

    #[test]
    fn kinds_and_schedules_parse_and_print() {
        for kind in OptimizerKind::ALL {
            assert_eq!(kind.to_string().parse::<OptimizerKind>(), Ok(kind));
        }
        assert_eq!("Adam".parse::<OptimizerKind>(), Ok(OptimizerKind::Adam));
        let err = "adagrad".parse::<OptimizerKind>().unwrap_err();
        assert_eq!(err.value, "adagrad");
        assert!(err.to_string().contains("adagrad"));
        for s in [Schedule::Constant, Schedule::InvSqrtEpoch] {
            assert_eq!(s.to_string().parse::<Schedule>(), Ok(s));
        }
        assert!("inv_sqrt".parse::<Schedule>().is_err());
        assert_eq!(Schedule::Constant.rate(0.5, 9, 1.0), 0.5);
        assert_eq!(Schedule::InvSqrtEpoch.rate(0.5, 0, 1.0), 0.5);
        assert_eq!(Schedule::InvSqrtEpoch.rate(0.5, 3, 1.0), 0.25);
        assert_eq!(Schedule::InvSqrtEpoch.rate(0.5, 48, 16.0), 0.25);
        assert_eq!(Schedule::Constant.rate(0.5, 48, 16.0), 0.5);
    }

    #[test]
    fn config_defaults_and_validation() {
        let c = OptimizerConfig::default();
        assert_eq!(
            (c.kind, c.momentum, c.beta1, c.beta2, c.epsilon),
            (OptimizerKind::Adam, 0.9, 0.9, 0.999, 1e-8)
        );
        assert_eq!(
            OptimizerConfig::new(OptimizerKind::Sgd).kind,
            OptimizerKind::Sgd
        );
        assert!(c.validate().is_ok());
        assert!(OptimizerConfig { beta2: 1.0, ..c }.validate().is_err());
        assert!(OptimizerConfig { epsilon: 0.0, ..c }.validate().is_err());
        assert!(
            OptimizerConfig {
                momentum: f32::NAN,
                ..c
            }
            .validate()
            .is_err()
        );
    }
}
