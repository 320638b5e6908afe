//! What the linear models over sparse rows share: batch validation, the margin `w·x + b`, the
//! gradient loop of a per-row loss of the margin with per-example L2, and the whole [`Model`]
//! of a [`LinearModel`].
//!
//! Logistic regression and the linear SVM are [`LinearModel`]s; k-means (which validates its
//! rows the same way but ignores their labels) and the MLP build on the validation.

use super::{
    BatchLoss, GradientAccumulator, Model, ModelError, Prediction, Result, SupportSums, batch_kind,
    check_dims,
};
use crate::batch::{Batch, SparseBatch};
use crate::metrics::{Evaluation, EvaluationError};

/// A linear model over sparse rows with binary labels, parameters `[w_0 .. w_{features-1},
/// bias]` and per-example L2 on the weights: logistic regression and the linear SVM, told
/// apart only by the loss of the margin and the kind of their predictions. Its [`Model`] is
/// the one below.
pub(crate) trait LinearModel: Send + Sync {
    /// The model family's short name, as [`Model::name`] gives it.
    const NAME: &'static str;
    /// The task of its evaluations, as [`Evaluation::task`] names it.
    const TASK: &'static str;
    /// A row's prediction from its margin.
    const PREDICTION: fn(f64) -> Prediction;
    /// Adds a row's margin and label to an evaluation of [`Self::TASK`].
    const PUSH: fn(&mut Evaluation, f64, bool) -> Result<(), EvaluationError>;

    /// The number of features (the bias is extra) and the L2 coefficient.
    fn shape(&self) -> (u32, f32);

    /// The loss of margin `z` for label `y` (0 or 1), and its derivative in `z`.
    fn loss(z: f64, y: f64) -> (f64, f64);
}

impl<M: LinearModel> Model for M {
    fn name(&self) -> &'static str {
        M::NAME
    }

    fn num_params(&self) -> usize {
        self.shape().0 as usize + 1
    }

    fn gradient(
        &self,
        params: &[f32],
        batch: &Batch,
        acc: &mut GradientAccumulator,
    ) -> Result<BatchLoss> {
        let (features, l2) = self.shape();
        let batch = prepare_linear(M::NAME, features, params, batch, Some(acc.dim()))?;
        Ok(linear_gradient(params, batch, l2, acc, M::loss))
    }

    fn evaluate(&self, params: &[f32], batch: &Batch, eval: &mut Evaluation) -> Result<()> {
        let batch = prepare_linear(M::NAME, self.shape().0, params, batch, None)?;
        eval.check_task(M::TASK)?;
        for (z, label) in margins(params, batch) {
            M::PUSH(eval, z, label)?;
        }
        Ok(())
    }

    fn predict_rows(&self, params: &[f32], rows: &SparseBatch) -> Result<Vec<Prediction>> {
        validate_sparse(rows, self.shape().0, LabelRule::Ignored)?;
        Ok(margins(params, rows)
            .map(|(z, _)| M::PREDICTION(z))
            .collect())
    }
}

/// What a model requires of the labels of its rows ([`ModelSpec::label_rule`]): the rule its
/// batch validation applies, and the one `train` checks a data set's labels against before it
/// starts.
///
/// ```
/// use mlless_core::LabelRule;
/// assert!(LabelRule::Binary.accepts(1.0));
/// assert!(!LabelRule::Binary.accepts(2.0));
/// assert!(LabelRule::Classes(3).accepts(2.0));
/// assert!(!LabelRule::Classes(3).accepts(1.5));
/// assert!(LabelRule::Ignored.accepts(-7.25));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LabelRule {
    /// Every label is 0 or 1 (binary classifiers).
    Binary,
    /// Labels are ignored (clustering, ratings).
    Ignored,
    /// Every label is a class id, an integer below the given number of classes (multi-class
    /// models).
    Classes(u32),
}

impl LabelRule {
    /// Whether a row may have `label`.
    pub fn accepts(self, label: f32) -> bool {
        match self {
            LabelRule::Binary => label == 0.0 || label == 1.0,
            LabelRule::Ignored => true,
            LabelRule::Classes(classes) => {
                label >= 0.0 && label.fract() == 0.0 && label < classes as f32
            }
        }
    }

    /// What the rule asks, for messages: `0 or 1`, `a class id in 0..3`, `anything`.
    pub fn describe(self) -> String {
        match self {
            LabelRule::Binary => "0 or 1".into(),
            LabelRule::Ignored => "anything".into(),
            LabelRule::Classes(classes) => format!("a class id in 0..{classes}"),
        }
    }
}

/// The rows of `batch`, or [`ModelError::WrongBatchKind`] for `model` when it holds ratings.
pub(crate) fn sparse_rows<'b>(model: &'static str, batch: &'b Batch) -> Result<&'b SparseBatch> {
    match batch {
        Batch::Sparse(rows) => Ok(rows),
        _ => Err(ModelError::WrongBatchKind {
            model,
            expected: "sparse",
            got: batch_kind(batch),
        }),
    }
}

/// Checks the parameters (`features + 1` of them), the accumulator and the batch of a linear
/// model named `model`, returning the batch's rows.
pub(crate) fn prepare_linear<'b>(
    model: &'static str,
    features: u32,
    params: &[f32],
    batch: &'b Batch,
    acc_dim: Option<usize>,
) -> Result<&'b SparseBatch> {
    check_dims(features as usize + 1, params, acc_dim)?;
    let rows = sparse_rows(model, batch)?;
    validate_sparse(rows, features, LabelRule::Binary)?;
    Ok(rows)
}

/// Checks the CSR layout, the labels (as `labels` asks), the indices and the values of an
/// untrusted batch.
pub(crate) fn validate_sparse(batch: &SparseBatch, features: u32, labels: LabelRule) -> Result<()> {
    let malformed = |reason: String| Err(ModelError::MalformedBatch { reason });
    let rows = batch.labels.len();
    if batch.values.len() != batch.indices.len() {
        return malformed(format!(
            "{} feature indices but {} values",
            batch.indices.len(),
            batch.values.len()
        ));
    }
    if batch.offsets.is_empty() && rows == 0 && batch.indices.is_empty() {
        return Ok(()); // SparseBatch::default()
    }
    if batch.offsets.len() != rows + 1 {
        return malformed(format!(
            "{rows} labels need {} row offsets, got {}",
            rows + 1,
            batch.offsets.len()
        ));
    }
    if batch.offsets[0] != 0 {
        return malformed(format!(
            "the first row offset is {}, not 0",
            batch.offsets[0]
        ));
    }
    let last = batch.offsets[rows] as usize;
    if last != batch.indices.len() {
        return malformed(format!(
            "the last row offset is {last} but there are {} feature values",
            batch.indices.len()
        ));
    }
    // One pass over the entries that the compiler vectorises (every step's batch goes through
    // it); only a batch that fails it is searched row by row for its first bad entry.
    let entries_ok = batch
        .indices
        .iter()
        .fold(true, |ok, &index| ok & (index < features))
        & batch
            .values
            .iter()
            .fold(true, |ok, value| ok & value.is_finite());
    for row in 0..rows {
        let (start, end) = (batch.offsets[row] as usize, batch.offsets[row + 1] as usize);
        if end < start {
            return malformed(format!("row offsets decrease at row {row}"));
        }
        if end > last {
            return malformed(format!(
                "row {row} ends at offset {end}, past the {last} feature values"
            ));
        }
        let label = batch.labels[row];
        if !labels.accepts(label) {
            return Err(match labels {
                LabelRule::Classes(classes) => ModelError::BadClassLabel {
                    row,
                    label,
                    classes,
                },
                LabelRule::Binary | LabelRule::Ignored => ModelError::BadLabel { row, label },
            });
        }
        if entries_ok {
            continue;
        }
        for (&index, &value) in batch.indices[start..end]
            .iter()
            .zip(&batch.values[start..end])
        {
            if index >= features {
                return Err(ModelError::FeatureOutOfRange {
                    row,
                    index,
                    features,
                });
            }
            if !value.is_finite() {
                return Err(ModelError::NonFiniteFeature { row, index, value });
            }
        }
    }
    Ok(())
}

/// The margin (LR: the logit) of one row: `b + Σ w_j x_j`.
#[inline]
pub(crate) fn margin(weights: &[f32], bias: f32, indices: &[u32], values: &[f32]) -> f32 {
    let mut z = bias;
    for (&j, &x) in indices.iter().zip(values) {
        z += weights[j as usize] * x;
    }
    z
}

/// The margins of a validated batch's rows with `params = [w.., b]`, with their labels.
pub(crate) fn margins<'a>(
    params: &'a [f32],
    batch: &'a SparseBatch,
) -> impl Iterator<Item = (f64, bool)> + 'a {
    let (weights, bias) = params.split_at(params.len() - 1);
    batch.iter_rows().map(move |(label, indices, values)| {
        (
            f64::from(margin(weights, bias[0], indices, values)),
            label == 1.0,
        )
    })
}

/// Adds to `acc` the gradient of a validated batch's mean loss plus per-example L2, where
/// `loss(z, y)` gives the loss of margin `z` for label `y` (0 or 1) and its derivative in `z`;
/// returns the data loss summed over the rows.
///
/// Each row adds `l2 · w_j` (over the batch's mean) for every weight it touches, never for the
/// bias; see the comment on [`Model`].
pub(crate) fn linear_gradient(
    params: &[f32],
    batch: &SparseBatch,
    l2: f32,
    acc: &mut GradientAccumulator,
    loss: impl Fn(f64, f64) -> (f64, f64),
) -> BatchLoss {
    if batch.rows() == 0 {
        return BatchLoss::default();
    }
    // The batch's features and the bias are every coordinate it adds to: into an empty
    // accumulator its sums go in compact entries that stay in the cache.
    let bias = [(params.len() - 1) as u32];
    let support = [&batch.indices[..], &bias[..]];
    match acc.sum_on_support(&support, |sums| {
        rows_on_support(params, batch, l2, sums, &loss)
    }) {
        Some(total) => total,
        None => linear_rows(params, params, batch, l2, acc, &loss),
    }
}

/// Where [`linear_rows`] adds a non-zero's gradient, each coordinate at a slot: the
/// accumulator's dense sums, or the compact sums of the batch's support.
trait RowSums {
    /// The slot of coordinate `index`.
    fn slot(&self, index: u32) -> usize;
    /// Adds `value` to the gradient at `slot`.
    fn add(&mut self, slot: usize, value: f32);
}

/// A slot is the coordinate.
impl RowSums for GradientAccumulator {
    #[inline]
    fn slot(&self, index: u32) -> usize {
        index as usize
    }
    #[inline]
    fn add(&mut self, slot: usize, value: f32) {
        // A slot is a coordinate, which fits a u32.
        GradientAccumulator::add(self, slot as u32, value);
    }
}

/// A slot is the coordinate's entry, found once a non-zero (a bitmap word and a count of its
/// bits, in the L2 cache).
impl RowSums for SupportSums<'_> {
    #[inline]
    fn slot(&self, index: u32) -> usize {
        self.entry(index)
    }
    #[inline]
    fn add(&mut self, slot: usize, value: f32) {
        self.add_to_entry(slot, value);
    }
}

/// [`compact_rows`], with the CPU's `popcnt` where it has one: finding a coordinate's entry
/// counts the set bits of a bitmap word, and the x86-64 baseline's replacement, a dozen
/// instructions, made the gradient 15% slower.
fn rows_on_support(
    params: &[f32],
    batch: &SparseBatch,
    l2: f32,
    sums: &mut SupportSums<'_>,
    loss: &impl Fn(f64, f64) -> (f64, f64),
) -> BatchLoss {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("popcnt") {
        // SAFETY: the CPU has `popcnt`, the one feature the function is compiled for.
        return unsafe { rows_with_popcnt(params, batch, l2, sums, loss) };
    }
    compact_rows(params, batch, l2, sums, loss)
}

/// [`compact_rows`] compiled with `popcnt`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "popcnt")]
fn rows_with_popcnt(
    params: &[f32],
    batch: &SparseBatch,
    l2: f32,
    sums: &mut SupportSums<'_>,
    loss: &impl Fn(f64, f64) -> (f64, f64),
) -> BatchLoss {
    compact_rows(params, batch, l2, sums, loss)
}

/// [`linear_rows`] into the compact sums of the batch's support, reading the weights from a
/// copy gathered in the support's order, where a random read of the million weights (4 MB,
/// past the L2 cache) was most of the loop's time in a real step. Always inlined, so that
/// [`rows_with_popcnt`] compiles it with its feature.
#[inline(always)]
fn compact_rows(
    params: &[f32],
    batch: &SparseBatch,
    l2: f32,
    sums: &mut SupportSums<'_>,
    loss: &impl Fn(f64, f64) -> (f64, f64),
) -> BatchLoss {
    let weights = sums.gather(params);
    linear_rows(params, &weights, batch, l2, sums, loss)
}

/// [`linear_gradient`]'s loop over the rows of a non-empty batch with `params = [w.., b]`,
/// reading a non-zero's weight at its slot of `weights` (the parameters themselves, or the
/// support's gathered) and adding its gradient at its slot of `sums`; the bits do not depend
/// on which. Each row's slots are found once, before its margin (`margin`'s sum, in its order)
/// and its gradient. Always inlined, so that [`rows_with_popcnt`] compiles it with its feature.
#[inline(always)]
fn linear_rows(
    params: &[f32],
    weights: &[f32],
    batch: &SparseBatch,
    l2: f32,
    sums: &mut impl RowSums,
    loss: &impl Fn(f64, f64) -> (f64, f64),
) -> BatchLoss {
    let rows = batch.rows();
    let features = params.len() - 1;
    let bias = params[features];
    let inv_n = 1.0 / rows as f64;
    let l2 = (f64::from(l2) * inv_n) as f32;
    let mut total = 0.0_f64;
    let mut bias_grad = 0.0_f64;
    let mut slots: Vec<usize> = Vec::new();
    for row in 0..rows {
        let (start, end) = (batch.offsets[row] as usize, batch.offsets[row + 1] as usize);
        let (indices, values) = (&batch.indices[start..end], &batch.values[start..end]);
        slots.resize(indices.len(), 0);
        for (slot, &j) in slots.iter_mut().zip(indices) {
            *slot = sums.slot(j);
        }
        let mut z = bias;
        for (&at, &x) in slots.iter().zip(values) {
            z += weights[at] * x;
        }
        let (l, dz) = loss(f64::from(z), f64::from(batch.labels[row]));
        total += l;
        let g = dz * inv_n;
        bias_grad += g;
        let g = g as f32;
        for (&at, &x) in slots.iter().zip(values) {
            sums.add(at, g * x + l2 * weights[at]);
        }
    }
    let at = sums.slot(features as u32);
    sums.add(at, bias_grad as f32);
    BatchLoss::new(total, rows as u64)
}

#[cfg(test)]
mod tests {
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};

    use super::*;
    use crate::model::logistic::logistic_loss;
    use crate::sparse::SparseVector;

    /// The gradient's three loops, on one batch: the plain one into the dense sums, and the
    /// support's with and without the run-time `popcnt` dispatch.
    #[test]
    fn the_support_loop_gives_the_bits_of_the_plain_one() {
        let mut rng = StdRng::seed_from_u64(17);
        let features = 5_000_u32;
        let params: Vec<f32> = (0..=features)
            .map(|_| rng.random_range(-1.0..1.0))
            .collect();
        let mut batch = SparseBatch::new();
        for _ in 0..300 {
            // Popular low features and rare high ones, so coordinates repeat across rows.
            let mut row: Vec<u32> = (0..rng.random_range(1..40))
                .map(|_| {
                    let span = rng.random_range(1..=features);
                    rng.random_range(0..span)
                })
                .collect();
            row.sort_unstable();
            row.dedup();
            let values: Vec<f32> = row.iter().map(|_| rng.random_range(-2.0..2.0)).collect();
            batch.push_row(f32::from(rng.random_bool(0.5)), &row, &values);
        }
        let bias = [features];
        let support = [&batch.indices[..], &bias[..]];
        let bits = |v: &SparseVector| -> (Vec<u32>, Vec<u32>) {
            (
                v.indices().to_vec(),
                v.values().iter().map(|x| x.to_bits()).collect(),
            )
        };
        let dim = params.len();
        let mut acc = GradientAccumulator::new(dim);
        let plain_loss = linear_rows(&params, &params, &batch, 0.01, &mut acc, &logistic_loss);
        let plain = acc.take();
        for dispatched in [true, false] {
            let mut acc = GradientAccumulator::new(dim);
            let loss = acc
                .sum_on_support(&support, |sums| {
                    if dispatched {
                        rows_on_support(&params, &batch, 0.01, sums, &logistic_loss)
                    } else {
                        compact_rows(&params, &batch, 0.01, sums, &logistic_loss)
                    }
                })
                .expect("an empty accumulator");
            assert_eq!(loss, plain_loss, "dispatched {dispatched}");
            assert_eq!(bits(&acc.take()), bits(&plain), "dispatched {dispatched}");
        }
    }
}
