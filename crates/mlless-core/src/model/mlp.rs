//! A small dense neural network (multi-layer perceptron) over sparse features.
//!
//! The forward and backward passes are written by hand rather than with a tensor or autodiff
//! crate: the network is small (one or two hidden layers, thousands to a few hundred thousand
//! parameters), each layer is a plain vector–matrix product, and such a crate would be a large
//! dependency of the pure-maths core for a few dozen lines of loops.

use rand::{Rng, SeedableRng, rngs::StdRng};
use rand_distr::StandardNormal;

use super::linear::{LabelRule, validate_sparse};
use super::{
    BatchLoss, GradientAccumulator, Model, ModelError, Prediction, Result, batch_kind, check_dims,
};
use crate::batch::{Batch, SparseBatch};
use crate::metrics::Evaluation;

/// Where one dense layer lives in the flat parameter vector.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Layer {
    /// Number of input units.
    inputs: usize,
    /// Number of output units.
    outputs: usize,
    /// Start of the `inputs × outputs` weights, row-major (row `i` = input unit `i`).
    weights: usize,
    /// Start of the `outputs` biases (right after the weights).
    biases: usize,
}

impl Layer {
    /// One past the layer's last parameter.
    fn end(&self) -> usize {
        self.biases + self.outputs
    }
}

/// A dense neural network: `features` sparse inputs, one or two ReLU hidden layers, and a
/// softmax over `classes` outputs trained with the cross-entropy; labels are class ids
/// `0..classes` stored as `f32`.
///
/// # Parameter layout
///
/// Layer by layer from the input (first hidden, second hidden if any, output), each layer's
/// weights then its biases:
///
/// ```text
/// [W1: features × h1][b1: h1] ([W2: h1 × h2][b2: h2]) [Wo: h_last × classes][bo: classes]
/// ```
///
/// Weights are row-major with one row per *input* unit: `W[i][o]` is at `weights + i·out + o`.
/// A sparse input row then reads (and its gradient writes) only the contiguous rows of `W1` of
/// its stored features, and every other layer is an `axpy` of whole rows.
///
/// # Regularisation
///
/// Per-example L2 as in the other models: each sample adds `l2/2 · Σ w²` over the weights it
/// uses, never the biases, and the gradient is the mean over the batch. A sample uses the rows
/// of `W1` of the features it stores and every weight of the later layers, so a batch adds
/// `l2 · (rows storing j)/rows · W1[j]` to the rows of `W1` it touches (untouched rows cost
/// nothing, as in logistic regression) and `l2 · W` to the later layers' weights (plain weight
/// decay). With dense data every row stores every feature and the whole net decays uniformly.
///
/// # Initialisation
///
/// He-normal weights, `N(0, 2/fan_in)`, drawn from a `StdRng` seeded by the seed in layout
/// order; biases start at 0.
#[derive(Debug, Clone, PartialEq)]
pub struct Mlp {
    features: u32,
    classes: u32,
    l2: f32,
    /// The hidden layers, then the output layer.
    layers: Vec<Layer>,
    num_params: usize,
    /// Why the shape is not trainable, if it is not (see [`ModelSpec::validate`]).
    ///
    /// [`ModelSpec::validate`]: super::ModelSpec::validate
    shape_error: Option<String>,
}

/// Number of parameters of an MLP of this shape, exact (no overflow in `u128`).
pub(crate) fn num_params(features: u32, hidden: &[u32], classes: u32) -> u128 {
    let mut fan_in = u128::from(features);
    let mut n = 0_u128;
    for &width in hidden.iter().chain([&classes]) {
        let width = u128::from(width);
        n = n.saturating_add((fan_in + 1) * width);
        fan_in = width;
    }
    n
}

/// Checks that the shape is trainable: one or two hidden layers, each at least 1 wide, and at
/// least 2 classes.
pub(crate) fn check_shape(hidden: &[u32], classes: u32) -> Result<(), String> {
    if !(1..=2).contains(&hidden.len()) {
        return Err(format!(
            "an mlp needs one or two hidden layers, got {}",
            hidden.len()
        ));
    }
    if let Some(layer) = hidden.iter().position(|&w| w == 0) {
        return Err(format!("hidden layer {layer} has no unit"));
    }
    if classes < 2 {
        return Err(format!("an mlp needs at least 2 classes, got {classes}"));
    }
    Ok(())
}

/// `y += a · x`.
#[inline]
fn axpy(a: f32, x: &[f32], y: &mut [f32]) {
    for (y, &x) in y.iter_mut().zip(x) {
        *y += a * x;
    }
}

/// `x · y`, in eight independent lanes so that the compiler can vectorise it.
#[inline]
fn dot(x: &[f32], y: &[f32]) -> f32 {
    let mut lanes = [0.0_f32; 8];
    let (xc, yc) = (x.chunks_exact(8), y.chunks_exact(8));
    let tail: f32 = xc
        .remainder()
        .iter()
        .zip(yc.remainder())
        .map(|(a, b)| a * b)
        .sum();
    for (a, b) in xc.zip(yc) {
        for k in 0..8 {
            lanes[k] += a[k] * b[k];
        }
    }
    lanes.iter().sum::<f32>() + tail
}

/// ReLU in place (NaN stays NaN, so broken parameters show in the loss).
#[inline]
fn relu(v: &mut [f32]) {
    for x in v {
        if *x < 0.0 {
            *x = 0.0;
        }
    }
}

impl Mlp {
    /// A network over `features` inputs with hidden layers `hidden` and `classes` outputs.
    ///
    /// An untrainable shape (see [`ModelSpec::validate`](super::ModelSpec::validate)) makes
    /// [`gradient`](Model::gradient) and [`evaluate`](Model::evaluate) fail with
    /// [`ModelError::InvalidSpec`].
    pub fn new(features: u32, hidden: &[u32], classes: u32, l2: f32) -> Self {
        let mut layers = Vec::with_capacity(hidden.len() + 1);
        let (mut inputs, mut next) = (features as usize, 0_usize);
        for &width in hidden.iter().chain([&classes]) {
            let outputs = width as usize;
            let biases = next.saturating_add(inputs.saturating_mul(outputs));
            layers.push(Layer {
                inputs,
                outputs,
                weights: next,
                biases,
            });
            next = biases.saturating_add(outputs);
            inputs = outputs;
        }
        Self {
            features,
            classes,
            l2,
            layers,
            num_params: next,
            shape_error: check_shape(hidden, classes).err(),
        }
    }

    /// The initial parameters: He-normal weights `N(0, 2/fan_in)` drawn in layout order from a
    /// `StdRng` seeded by `seed`, zero biases. Identical for identical seeds.
    pub fn init_params(&self, seed: u64) -> Vec<f32> {
        let mut rng = StdRng::seed_from_u64(seed);
        let mut params = Vec::with_capacity(self.num_params);
        for layer in &self.layers {
            let std = (2.0 / layer.inputs.max(1) as f64).sqrt();
            params.extend((0..layer.inputs * layer.outputs).map(|_| {
                let z: f64 = rng.sample(StandardNormal);
                (z * std) as f32
            }));
            params.resize(layer.end(), 0.0);
        }
        params
    }

    /// Checks the shape, the parameters and the batch, returning the batch's rows.
    fn prepare<'b>(
        &self,
        params: &[f32],
        batch: &'b Batch,
        acc_dim: Option<usize>,
    ) -> Result<&'b SparseBatch> {
        if let Some(reason) = &self.shape_error {
            return Err(ModelError::InvalidSpec {
                reason: reason.clone(),
            });
        }
        check_dims(self.num_params, params, acc_dim)?;
        let Batch::Sparse(rows) = batch else {
            return Err(ModelError::WrongBatchKind {
                model: "mlp",
                expected: "sparse",
                got: batch_kind(batch),
            });
        };
        validate_sparse(rows, self.features, LabelRule::Classes(self.classes))?;
        Ok(rows)
    }

    /// The output logits of each row of `batch`, as [`evaluate`](Model::evaluate) computes
    /// them; labels are ignored (they need not be class ids).
    pub(super) fn logits(&self, params: &[f32], batch: &SparseBatch) -> Result<Vec<Vec<f32>>> {
        if let Some(reason) = &self.shape_error {
            return Err(ModelError::InvalidSpec {
                reason: reason.clone(),
            });
        }
        check_dims(self.num_params, params, None)?;
        validate_sparse(batch, self.features, LabelRule::Ignored)?;
        let mut acts = self.layer_buffers();
        let last = self.layers.len() - 1;
        Ok(batch
            .iter_rows()
            .map(|(_, indices, values)| {
                self.forward(params, indices, values, &mut acts);
                acts[last].clone()
            })
            .collect())
    }

    /// One buffer per layer for its activations (or its deltas).
    fn layer_buffers(&self) -> Vec<Vec<f32>> {
        self.layers.iter().map(|l| vec![0.0; l.outputs]).collect()
    }

    /// The forward pass of one sparse row: `acts[k]` gets layer `k`'s output (after ReLU for the
    /// hidden layers; the last one holds the logits).
    fn forward(&self, params: &[f32], indices: &[u32], values: &[f32], acts: &mut [Vec<f32>]) {
        let last = self.layers.len() - 1;
        let first = &self.layers[0];
        let h = first.outputs;
        let out = &mut acts[0];
        out.copy_from_slice(&params[first.biases..first.end()]);
        // Only the stored entries: one contiguous row of W1 each.
        for (&j, &x) in indices.iter().zip(values) {
            let row = first.weights + j as usize * h;
            axpy(x, &params[row..row + h], out);
        }
        for k in 1..=last {
            let (done, todo) = acts.split_at_mut(k);
            let (input, out) = (&mut done[k - 1], &mut todo[0]);
            relu(input);
            let layer = &self.layers[k];
            out.copy_from_slice(&params[layer.biases..layer.end()]);
            let weights = &params[layer.weights..layer.biases];
            for (&a, row) in input.iter().zip(weights.chunks_exact(layer.outputs)) {
                // ReLU zeroes many inputs: skip their rows.
                if a != 0.0 {
                    axpy(a, row, out);
                }
            }
        }
    }
}

impl Model for Mlp {
    fn predict_rows(&self, params: &[f32], rows: &SparseBatch) -> Result<Vec<Prediction>> {
        Ok(self
            .logits(params, rows)?
            .into_iter()
            .map(Prediction::Classes)
            .collect())
    }

    fn name(&self) -> &'static str {
        "mlp"
    }

    fn num_params(&self) -> usize {
        self.num_params
    }

    fn gradient(
        &self,
        params: &[f32],
        batch: &Batch,
        acc: &mut GradientAccumulator,
    ) -> Result<BatchLoss> {
        let batch = self.prepare(params, batch, Some(acc.dim()))?;
        let rows = batch.rows();
        if rows == 0 {
            return Ok(BatchLoss::default());
        }
        let inv_n = 1.0 / rows as f64;
        let last = self.layers.len() - 1;
        let first = self.layers[0];
        let h = first.outputs;

        // The batch's distinct features, each with a row of the first layer's gradient; `slot`
        // maps every stored entry to its feature's row, `uses` counts the entries per feature.
        let mut distinct = batch.indices.clone();
        distinct.sort_unstable();
        distinct.dedup();
        let slot: Vec<usize> = batch
            .indices
            .iter()
            .map(|&j| distinct.partition_point(|&d| d < j))
            .collect();
        let mut uses = vec![0_u32; distinct.len()];
        slot.iter().for_each(|&s| uses[s] += 1);
        let mut grad_w1 = vec![0.0_f32; distinct.len() * h];
        // Everything after W1 (b1 and the later layers) is dense and contiguous.
        let dense_start = first.biases;
        let mut grad_dense = vec![0.0_f32; self.num_params - dense_start];

        let mut acts = self.layer_buffers();
        let mut deltas = self.layer_buffers();
        let mut probs = vec![0.0_f64; self.classes as usize];
        let mut loss = 0.0_f64;
        for row in 0..rows {
            let (start, end) = (batch.offsets[row] as usize, batch.offsets[row + 1] as usize);
            let (indices, values) = (&batch.indices[start..end], &batch.values[start..end]);
            self.forward(params, indices, values, &mut acts);

            // Softmax cross-entropy in f64, from the max-shifted logits.
            let label = batch.labels[row] as usize;
            let logits = &acts[last];
            let max = f64::from(logits.iter().fold(f32::NEG_INFINITY, |m, &z| m.max(z)));
            let mut sum = 0.0;
            for (p, &z) in probs.iter_mut().zip(logits) {
                *p = (f64::from(z) - max).exp();
                sum += *p;
            }
            loss += max + sum.ln() - f64::from(logits[label]);
            for (k, (d, &p)) in deltas[last].iter_mut().zip(&probs).enumerate() {
                let target = if k == label { 1.0 } else { 0.0 };
                *d = ((p / sum - target) * inv_n) as f32;
            }

            // Backward through the dense layers: weight rows of active inputs, then the delta
            // of the layer below through the ReLU.
            for k in (1..=last).rev() {
                let layer = &self.layers[k];
                let (below, here) = deltas.split_at_mut(k);
                let (delta, back) = (&here[0], &mut below[k - 1]);
                let grad = &mut grad_dense[layer.weights - dense_start..layer.end() - dense_start];
                let (grad_w, grad_b) = grad.split_at_mut(layer.inputs * layer.outputs);
                axpy(1.0, delta, grad_b);
                let weights = &params[layer.weights..layer.biases];
                for (((&a, w), g), b) in acts[k - 1]
                    .iter()
                    .zip(weights.chunks_exact(layer.outputs))
                    .zip(grad_w.chunks_exact_mut(layer.outputs))
                    .zip(back.iter_mut())
                {
                    if a > 0.0 {
                        axpy(a, delta, g);
                        *b = dot(w, delta);
                    } else {
                        *b = 0.0;
                    }
                }
            }
            // The first layer: its biases, and the W1 rows of the stored features.
            let delta = &deltas[0];
            axpy(1.0, delta, &mut grad_dense[..h]);
            for (&s, &x) in slot[start..end].iter().zip(values) {
                axpy(x, delta, &mut grad_w1[s * h..(s + 1) * h]);
            }
        }

        if self.l2 != 0.0 {
            let l2 = f64::from(self.l2);
            for ((&j, &n), g) in distinct.iter().zip(&uses).zip(grad_w1.chunks_exact_mut(h)) {
                let row = first.weights + j as usize * h;
                axpy((l2 * f64::from(n) * inv_n) as f32, &params[row..row + h], g);
            }
            for layer in &self.layers[1..] {
                let grad = &mut grad_dense[layer.weights - dense_start..layer.biases - dense_start];
                axpy(l2 as f32, &params[layer.weights..layer.biases], grad);
            }
        }

        // Indices fit u32: check_dims bounded num_params by MAX_PARAMS.
        for (&j, g) in distinct.iter().zip(grad_w1.chunks_exact(h)) {
            let row = first.weights + j as usize * h;
            for (o, &v) in g.iter().enumerate() {
                acc.add((row + o) as u32, v);
            }
        }
        for (k, &v) in grad_dense.iter().enumerate() {
            acc.add((dense_start + k) as u32, v);
        }
        Ok(BatchLoss::new(loss, rows as u64))
    }

    fn evaluate(&self, params: &[f32], batch: &Batch, eval: &mut Evaluation) -> Result<()> {
        let batch = self.prepare(params, batch, None)?;
        eval.check_multiclass()?;
        let mut acts = self.layer_buffers();
        for (label, indices, values) in batch.iter_rows() {
            self.forward(params, indices, values, &mut acts);
            eval.push_class_logits(&acts[self.layers.len() - 1], label as u32)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
