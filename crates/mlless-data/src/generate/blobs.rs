//! Gaussian blobs, labelled by blob, for k-means: [`write_blobs`].

use std::io::{self, Write};

use rand::Rng;
use serde::{Deserialize, Serialize};

use super::MAX_CLASSES;
use super::shared::{
    STREAM_MODEL, STREAM_SAMPLES, check_count, check_non_negative, gaussian, invalid, nearest,
    stream_rng, write_dense_libsvm,
};

/// Gaussian blobs for k-means (see [`write_blobs`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BlobsSpec {
    /// Rows to write.
    pub samples: u64,
    /// Number of blobs.
    pub k: u32,
    /// Dimension of the points.
    pub features: u32,
    /// Standard deviation of each coordinate around the blob's centre.
    pub spread: f64,
    /// Centres are uniform in `[-box_half_width, box_half_width]^features`.
    pub box_half_width: f64,
    /// Seed of every random choice.
    pub seed: u64,
}

impl BlobsSpec {
    /// A spec with spread 1.0 and centres in `[-10, 10]^features`.
    pub fn new(samples: u64, k: u32, features: u32, seed: u64) -> Self {
        Self {
            samples,
            k,
            features,
            spread: 1.0,
            box_half_width: 10.0,
            seed,
        }
    }

    /// Checks that the spec describes a dataset that can be generated.
    pub fn validate(&self) -> io::Result<()> {
        check_count("blobs k", self.k, 1..=MAX_CLASSES)?;
        check_count("blobs features", self.features, 1..=u32::MAX)?;
        check_non_negative("blob spread", self.spread)?;
        if !(self.box_half_width.is_finite() && self.box_half_width > 0.0) {
            return Err(invalid(format!(
                "blobs box half-width must be finite and positive, got {}",
                self.box_half_width
            )));
        }
        Ok(())
    }
}

/// The blobs [`write_blobs`] drew from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BlobsTruth {
    /// One centre per blob, `features` coordinates each.
    pub centres: Vec<Vec<f64>>,
    /// Standard deviation of each coordinate around the centre.
    pub spread: f64,
}

impl BlobsTruth {
    /// The blob whose centre is nearest to `point` (Euclidean).
    pub fn nearest_centre(&self, point: &[f32]) -> u32 {
        nearest(self.centres.iter().map(|c| {
            c.iter()
                .zip(point)
                .map(|(&a, &b)| (a - f64::from(b)).powi(2))
                .sum::<f64>()
        }))
    }
}

/// The blobs of a spec.
fn blobs_model(spec: &BlobsSpec) -> BlobsTruth {
    let mut rng = stream_rng(spec.seed, STREAM_MODEL);
    let w = spec.box_half_width;
    let centres = (0..spec.k)
        .map(|_| {
            (0..spec.features)
                .map(|_| rng.random_range(-w..=w))
                .collect()
        })
        .collect();
    BlobsTruth {
        centres,
        spread: spec.spread,
    }
}

/// Writes `spec.samples` points of Gaussian blobs as dense LIBSVM text and returns the blobs.
///
/// The `k` centres are uniform in `[-box_half_width, box_half_width]^features`. Each row picks
/// a blob uniformly and writes its centre plus `N(0, spread²)` noise on every coordinate; the
/// label is the blob id, `0..k` (with two blobs the LIBSVM parser maps them to 0/1 as they are,
/// with more it keeps them). Lines are `blob 1:v 2:v ... F:v` (every feature, 1-based). Errors
/// if the spec is invalid (`ErrorKind::InvalidInput`) or on a write error.
pub fn write_blobs(spec: &BlobsSpec, out: impl Write) -> io::Result<BlobsTruth> {
    spec.validate()?;
    let truth = blobs_model(spec);
    let mut rng = stream_rng(spec.seed, STREAM_SAMPLES);
    write_dense_libsvm(out, spec.samples, spec.features as usize, |x| {
        let blob = rng.random_range(0..spec.k);
        for (v, &c) in x.iter_mut().zip(&truth.centres[blob as usize]) {
            *v = c + spec.spread * gaussian(&mut rng);
        }
        blob
    })?;
    Ok(truth)
}
