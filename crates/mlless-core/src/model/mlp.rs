//! A small dense neural network (multi-layer perceptron) over sparse features.
//!
//! The forward and backward passes are written by hand rather than with a tensor or autodiff
//! crate: the network is small (one or two hidden layers, thousands to a few hundred thousand
//! parameters), each layer is a plain vector–matrix product, and such a crate would be a large
//! dependency of the pure-maths core for a few dozen lines of loops.

use rand::{Rng, SeedableRng, rngs::StdRng};
use rand_distr::StandardNormal;

use super::linear::{Labels, validate_sparse};
use super::{BatchLoss, GradientAccumulator, Model, ModelError, batch_kind, check_dims};
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
    ) -> Result<&'b SparseBatch, ModelError> {
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
        validate_sparse(rows, self.features, Labels::Classes(self.classes))?;
        Ok(rows)
    }

    /// The output logits of each row of `batch`, as [`evaluate`](Model::evaluate) computes
    /// them; labels are ignored (they need not be class ids).
    pub(super) fn logits(
        &self,
        params: &[f32],
        batch: &SparseBatch,
    ) -> Result<Vec<Vec<f32>>, ModelError> {
        if let Some(reason) = &self.shape_error {
            return Err(ModelError::InvalidSpec {
                reason: reason.clone(),
            });
        }
        check_dims(self.num_params, params, None)?;
        validate_sparse(batch, self.features, Labels::Ignored)?;
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
    fn num_params(&self) -> usize {
        self.num_params
    }

    fn gradient(
        &self,
        params: &[f32],
        batch: &Batch,
        acc: &mut GradientAccumulator,
    ) -> Result<BatchLoss, ModelError> {
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

    fn evaluate(
        &self,
        params: &[f32],
        batch: &Batch,
        eval: &mut Evaluation,
    ) -> Result<(), ModelError> {
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
mod tests {
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};
    use rand_distr::StandardNormal;

    use super::*;
    use crate::model::ModelSpec;
    use crate::model::testutil::{assert_close, finite_difference};
    use crate::{RatingBatch, SparseVector};

    fn spec(features: u32, hidden: &[u32], classes: u32, l2: f32) -> ModelSpec {
        ModelSpec::Mlp {
            features,
            hidden: hidden.to_vec(),
            classes,
            l2,
        }
    }

    fn dense(v: &SparseVector, dim: usize) -> Vec<f32> {
        let mut d = vec![0.0; dim];
        v.scaled_add_to(&mut d, 1.0);
        d
    }

    /// The regularised objective in f64, written independently of the model (dense input,
    /// triple loops): the mean over rows of the cross-entropy plus the per-example L2, l2/2 ·
    /// Σ w² over the W1 rows of the row's stored features and every later weight.
    fn objective(
        features: usize,
        hidden: &[usize],
        classes: usize,
        batch: &SparseBatch,
        l2: f64,
        x: &[f64],
    ) -> f64 {
        let mut widths = vec![features];
        widths.extend_from_slice(hidden);
        widths.push(classes);
        let layers = widths.len() - 1;
        let (mut w_at, mut b_at, mut next) = (Vec::new(), Vec::new(), 0);
        for k in 0..layers {
            w_at.push(next);
            next += widths[k] * widths[k + 1];
            b_at.push(next);
            next += widths[k + 1];
        }
        assert_eq!(next, x.len());
        let mut sum = 0.0;
        for (label, idx, vals) in batch.iter_rows() {
            let mut a = vec![0.0; features];
            for (&j, &v) in idx.iter().zip(vals) {
                a[j as usize] += f64::from(v);
            }
            for k in 0..layers {
                let mut z = x[b_at[k]..b_at[k] + widths[k + 1]].to_vec();
                for (i, &ai) in a.iter().enumerate() {
                    for (o, zo) in z.iter_mut().enumerate() {
                        *zo += ai * x[w_at[k] + i * widths[k + 1] + o];
                    }
                }
                if k + 1 < layers {
                    z.iter_mut().for_each(|v| *v = v.max(0.0));
                }
                a = z;
            }
            let max = a.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let lse = max + a.iter().map(|z| (z - max).exp()).sum::<f64>().ln();
            sum += lse - a[label as usize];
            let h1 = widths[1];
            for &j in idx {
                let row = j as usize * h1;
                sum += 0.5 * l2 * x[row..row + h1].iter().map(|w| w * w).sum::<f64>();
            }
            for k in 1..layers {
                sum += 0.5 * l2 * x[w_at[k]..b_at[k]].iter().map(|w| w * w).sum::<f64>();
            }
        }
        sum / batch.rows() as f64
    }

    fn check_gradient(hidden: &[u32], seed: u64) {
        let mut rng = StdRng::seed_from_u64(seed);
        let (features, classes, l2) = (9_u32, 3_u32, 0.2_f32);
        let mut batch = SparseBatch::new();
        for r in 0..6 {
            // The last feature is never stored.
            let mut idx: Vec<u32> = (0..3).map(|_| rng.random_range(0..features - 1)).collect();
            idx.sort_unstable();
            idx.dedup();
            let vals: Vec<f32> = idx.iter().map(|_| rng.sample(StandardNormal)).collect();
            batch.push_row((r % classes) as f32, &idx, &vals);
        }
        let mut touched: Vec<u32> = batch.indices.clone();
        touched.sort_unstable();
        touched.dedup();
        assert!(touched.len() < features as usize, "some features untouched");
        assert!(touched.len() < batch.nnz(), "some features touched twice");

        let spec = spec(features, hidden, classes, l2);
        spec.validate().unwrap();
        let n = spec.num_params();
        // Random biases too, so that every parameter matters.
        let params: Vec<f32> = (0..n)
            .map(|_| rng.sample::<f32, _>(StandardNormal) * 0.7)
            .collect();
        let mut acc = GradientAccumulator::new(n);
        let loss = spec
            .model()
            .gradient(&params, &Batch::Sparse(batch.clone()), &mut acc)
            .unwrap();
        let grad = acc.take();

        let h1 = hidden[0] as usize;
        let widths: Vec<usize> = hidden.iter().map(|&w| w as usize).collect();
        let x: Vec<f64> = params.iter().map(|&v| f64::from(v)).collect();
        let data = objective(
            features as usize,
            &widths,
            classes as usize,
            &batch,
            0.0,
            &x,
        );
        assert_close(loss.mean(), data, 1e-6, "batch loss");
        assert_eq!(loss.count, 6);

        // Exactly the W1 rows of the batch's features, and everything after W1.
        let mut support: Vec<usize> = touched
            .iter()
            .flat_map(|&j| j as usize * h1..(j as usize + 1) * h1)
            .collect();
        support.extend(features as usize * h1..n);
        let got: Vec<usize> = grad.indices().iter().map(|&j| j as usize).collect();
        assert_eq!(got, support);

        let f = |x: &[f64]| {
            objective(
                features as usize,
                &widths,
                classes as usize,
                &batch,
                f64::from(l2),
                x,
            )
        };
        let g = dense(&grad, n);
        for (j, want) in finite_difference(f, &x, 0..n) {
            assert_close(f64::from(g[j]), want, 1e-4, &format!("d/dθ_{j}"));
        }
    }

    #[test]
    fn gradient_matches_finite_differences_one_hidden_layer() {
        check_gradient(&[5], 1);
    }

    #[test]
    fn gradient_matches_finite_differences_two_hidden_layers() {
        check_gradient(&[4, 3], 2);
    }

    /// Dense 2-D rows (both coordinates stored, zeros included).
    fn points(data: &[([f32; 2], u32)]) -> SparseBatch {
        let mut batch = SparseBatch::new();
        for &(p, label) in data {
            batch.push_row(label as f32, &[0, 1], &p);
        }
        batch
    }

    /// Full-batch plain SGD for `steps` steps; the loss of every step.
    fn sgd(spec: &ModelSpec, params: &mut [f32], batch: &Batch, lr: f32, steps: usize) -> Vec<f64> {
        let model = spec.model();
        let mut acc = GradientAccumulator::new(params.len());
        (0..steps)
            .map(|_| {
                let loss = model.gradient(params, batch, &mut acc).unwrap();
                acc.take().scaled_add_to(params, -lr);
                loss.mean()
            })
            .collect()
    }

    fn accuracy(spec: &ModelSpec, params: &[f32], batch: &Batch) -> f64 {
        let mut eval = Evaluation::for_spec(spec);
        spec.model().evaluate(params, batch, &mut eval).unwrap();
        eval.finish()["test_accuracy"]
    }

    #[test]
    fn sgd_lowers_the_loss_on_xor() {
        let xor = Batch::Sparse(points(&[
            ([0.0, 0.0], 0),
            ([0.0, 1.0], 1),
            ([1.0, 0.0], 1),
            ([1.0, 1.0], 0),
        ]));
        let spec = spec(2, &[8], 2, 0.0);
        let mut params = spec.init_params(3);
        let losses = sgd(&spec, &mut params, &xor, 0.5, 400);
        let (first, end) = (losses[0], losses[losses.len() - 1]);
        assert!(end < 0.1 * first, "loss {first} -> {end}");
        assert!(losses[100] < first && end < losses[100]);
        assert_eq!(accuracy(&spec, &params, &xor), 1.0);
    }

    /// Two concentric classes in the plane: radius below 1 (class 0) or in 1.6..2.4 (class 1).
    fn rings(rng: &mut StdRng, n: usize) -> Batch {
        let data: Vec<([f32; 2], u32)> = (0..n)
            .map(|k| {
                let label = (k % 2) as u32;
                let r = if label == 0 {
                    rng.random_range(0.0..1.0)
                } else {
                    rng.random_range(1.6..2.4)
                };
                let angle = rng.random_range(0.0..std::f32::consts::TAU);
                ([r * angle.cos(), r * angle.sin()], label)
            })
            .collect();
        Batch::Sparse(points(&data))
    }

    #[test]
    fn learns_rings_that_logistic_regression_cannot() {
        let mut rng = StdRng::seed_from_u64(5);
        let (train, test) = (rings(&mut rng, 300), rings(&mut rng, 300));

        let mlp = spec(2, &[16, 16], 2, 1e-4);
        let mut params = mlp.init_params(9);
        let losses = sgd(&mlp, &mut params, &train, 0.2, 600);
        let mlp_accuracy = accuracy(&mlp, &params, &test);
        assert!(
            mlp_accuracy >= 0.95,
            "mlp accuracy {mlp_accuracy}, loss {} -> {}",
            losses[0],
            losses[losses.len() - 1]
        );

        let lr = ModelSpec::LogisticRegression {
            features: 2,
            l2: 1e-4,
            init_bias: 0.0,
        };
        let mut params = lr.init_params(9);
        sgd(&lr, &mut params, &train, 0.2, 600);
        let lr_accuracy = accuracy(&lr, &params, &test);
        assert!(lr_accuracy < 0.7, "lr accuracy {lr_accuracy}");
    }

    #[test]
    fn evaluation_agrees_with_the_training_loss() {
        let mut rng = StdRng::seed_from_u64(8);
        let batch = rings(&mut rng, 50);
        let spec = spec(2, &[6], 2, 0.0);
        let params = spec.init_params(1);
        let mut acc = GradientAccumulator::new(spec.num_params());
        let loss = spec.model().gradient(&params, &batch, &mut acc).unwrap();
        let mut eval = Evaluation::for_spec(&spec);
        spec.model().evaluate(&params, &batch, &mut eval).unwrap();
        let m = eval.finish();
        assert_eq!(m["test_samples"], 50.0);
        assert_close(m["test_logloss"], loss.mean(), 1e-9, "mean cross-entropy");
    }

    #[test]
    fn errors_for_untrusted_batches() {
        let spec = spec(5, &[4], 3, 0.1);
        let model = spec.model();
        let params = spec.init_params(0);
        let n = spec.num_params();
        let mut acc = GradientAccumulator::new(n);
        let mut eval = Evaluation::for_spec(&spec);
        let mut run = |batch: SparseBatch, acc: &mut GradientAccumulator| {
            let batch = Batch::Sparse(batch);
            let err = model.evaluate(&params, &batch, &mut eval).err();
            let got = model.gradient(&params, &batch, acc);
            // Compared as text: a NaN label is not equal to itself.
            let text = |e: Option<&ModelError>| format!("{e:?}");
            assert_eq!(
                text(got.as_ref().err()),
                text(err.as_ref()),
                "gradient and evaluate agree"
            );
            got
        };

        for label in [3.0, -1.0, 0.5, f32::NAN, f32::INFINITY] {
            let mut b = SparseBatch::new();
            b.push_row(2.0, &[0], &[1.0]);
            b.push_row(label, &[1], &[1.0]);
            let err = run(b, &mut acc).unwrap_err();
            assert!(
                matches!(
                    err,
                    ModelError::BadClassLabel {
                        row: 1,
                        classes: 3,
                        ..
                    }
                ),
                "label {label}: {err:?}"
            );
        }
        let mut b = SparseBatch::new();
        b.push_row(1.0, &[0, 5], &[1.0, 1.0]);
        assert_eq!(
            run(b, &mut acc),
            Err(ModelError::FeatureOutOfRange {
                row: 0,
                index: 5,
                features: 5
            })
        );
        let mut b = SparseBatch::new();
        b.push_row(0.0, &[2], &[f32::INFINITY]);
        assert!(matches!(
            run(b, &mut acc),
            Err(ModelError::NonFiniteFeature {
                row: 0,
                index: 2,
                ..
            })
        ));
        let mut b = SparseBatch::new();
        b.push_row(0.0, &[2, 3], &[1.0, 1.0]);
        b.offsets[1] = 9;
        assert!(matches!(
            run(b, &mut acc),
            Err(ModelError::MalformedBatch { .. })
        ));

        let mut ratings = RatingBatch::default();
        ratings.push(0, 0, 1.0);
        assert_eq!(
            model.gradient(&params, &Batch::Ratings(ratings), &mut acc),
            Err(ModelError::WrongBatchKind {
                model: "mlp",
                expected: "sparse",
                got: "ratings"
            })
        );
        let ok = Batch::Sparse(points(&[([1.0, 2.0], 2)]));
        assert!(matches!(
            model.gradient(&params[1..], &ok, &mut acc),
            Err(ModelError::ParamsLength { .. })
        ));
        assert!(matches!(
            model.gradient(&params, &ok, &mut GradientAccumulator::new(n + 1)),
            Err(ModelError::AccumulatorDim { .. })
        ));
        let mut binary = Evaluation::binary();
        assert!(matches!(
            model.evaluate(&params, &ok, &mut binary),
            Err(ModelError::EvaluationKind { .. })
        ));
        // An untrainable shape fails instead of panicking.
        let flat = Mlp::new(2, &[], 2, 0.0);
        assert!(matches!(
            flat.gradient(&vec![0.0; flat.num_params()], &ok, &mut acc),
            Err(ModelError::InvalidSpec { .. })
        ));
        // Nothing was left behind.
        assert!(acc.is_empty());
        assert_eq!(eval.samples(), 0);
        assert_eq!(binary.samples(), 0);
        // An empty batch is fine; a valid one works.
        let empty = model.gradient(&params, &Batch::Sparse(SparseBatch::default()), &mut acc);
        assert_eq!(empty, Ok(BatchLoss::default()));
        assert!(acc.is_empty());
        assert_eq!(model.gradient(&params, &ok, &mut acc).unwrap().count, 1);
    }

    #[test]
    fn spec_shape_params_and_validation() {
        let s = spec(28, &[64, 64], 2, 1e-4);
        assert_eq!(s.name(), "mlp");
        let want = 28 * 64 + 64 + 64 * 64 + 64 + 64 * 2 + 2;
        assert_eq!(s.num_params(), want);
        assert_eq!(s.model().num_params(), want);
        assert!(s.validate().is_ok());
        assert_eq!(spec(3, &[5], 4, 0.0).num_params(), 3 * 5 + 5 + 5 * 4 + 4);

        for bad in [
            spec(3, &[], 2, 0.0),
            spec(3, &[2, 2, 2], 2, 0.0),
            spec(3, &[2, 0], 2, 0.0),
            spec(3, &[2], 1, 0.0),
            spec(3, &[2], 2, -1.0),
            spec(3, &[2], 2, f32::NAN),
            spec(u32::MAX, &[u32::MAX], 2, 0.0),
        ] {
            assert!(
                matches!(bad.validate(), Err(ModelError::InvalidSpec { .. })),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn init_is_seeded_he_normal_with_zero_biases() {
        let s = spec(200, &[50, 40], 3, 0.0);
        let (a, b, c) = (s.init_params(42), s.init_params(42), s.init_params(43));
        assert_eq!(a.len(), s.num_params());
        assert_eq!(a, b);
        assert_ne!(a, c);
        let std = |w: &[f32]| {
            (w.iter().map(|&x| f64::from(x).powi(2)).sum::<f64>() / w.len() as f64).sqrt()
        };
        let (w1, rest) = a.split_at(200 * 50);
        let (b1, rest) = rest.split_at(50);
        let (w2, rest) = rest.split_at(50 * 40);
        let (b2, rest) = rest.split_at(40);
        let (wo, bo) = rest.split_at(40 * 3);
        assert_eq!(bo.len(), 3);
        for bias in [b1, b2, bo] {
            assert!(bias.iter().all(|&x| x == 0.0));
        }
        for (w, fan_in) in [(w1, 200.0), (w2, 50.0), (wo, 40.0)] {
            let want = (2.0_f64 / fan_in).sqrt();
            assert!(
                (std(w) / want - 1.0).abs() < 0.15,
                "std {} vs {want}",
                std(w)
            );
        }
    }

    #[test]
    fn spec_serialises_in_snake_case() {
        let s = spec(4, &[3, 2], 5, 0.5);
        let json = serde_json::to_string(&s).unwrap();
        assert_eq!(
            json,
            r#"{"mlp":{"features":4,"hidden":[3,2],"classes":5,"l2":0.5}}"#
        );
        assert_eq!(serde_json::from_str::<ModelSpec>(&json).unwrap(), s);
    }

    /// `cargo test -p mlless-core --release -- --ignored --nocapture gradient_benchmark`
    #[test]
    #[ignore = "micro benchmark; run explicitly, in release"]
    fn gradient_benchmark() {
        let mut rng = StdRng::seed_from_u64(4);
        let spec = spec(28, &[64, 64], 2, 1e-4);
        let mut batch = SparseBatch::new();
        let all: Vec<u32> = (0..28).collect();
        for _ in 0..128 {
            let vals: Vec<f32> = (0..28).map(|_| rng.sample(StandardNormal)).collect();
            batch.push_row(f32::from(rng.random_bool(0.5)), &all, &vals);
        }
        let batch = Batch::Sparse(batch);
        let model = spec.model();
        let params = spec.init_params(1);
        let mut acc = GradientAccumulator::new(params.len());
        let time = |iters: u32, take: bool, acc: &mut GradientAccumulator| {
            let start = std::time::Instant::now();
            for _ in 0..iters {
                model.gradient(&params, &batch, acc).unwrap();
                if take {
                    std::hint::black_box(acc.take());
                } else {
                    acc.clear();
                }
            }
            start.elapsed() / iters
        };
        time(200, true, &mut acc);
        let grad = time(2000, false, &mut acc);
        let with_take = time(2000, true, &mut acc);
        let start = std::time::Instant::now();
        for _ in 0..2000 {
            let mut eval = Evaluation::multiclass();
            model.evaluate(&params, &batch, &mut eval).unwrap();
            std::hint::black_box(eval);
        }
        let forward = start.elapsed() / 2000;
        println!(
            "mlp 28-64-64-2, 128 rows: gradient {grad:?} per batch, gradient + take \
             {with_take:?}, forward only (evaluate) {forward:?}"
        );
    }
}
