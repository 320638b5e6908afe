//! Concentric rings in 2-D, one class per ring: [`write_rings`].

use std::io::{self, Write};

use rand::Rng;
use serde::{Deserialize, Serialize};

use super::MAX_CLASSES;
use super::shared::{
    STREAM_SAMPLES, check_count, check_non_negative, gaussian, nearest, stream_rng,
    write_dense_libsvm,
};

/// Concentric rings in 2-D, one class per ring (see [`write_rings`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RingsSpec {
    /// Rows to write.
    pub samples: u64,
    /// Number of rings, which are the classes (2 or more).
    pub classes: u32,
    /// Standard deviation of the Gaussian noise on the radius.
    pub noise: f64,
    /// Features of pure noise after the two coordinates.
    pub extra_dims: u32,
    /// Seed of every random choice.
    pub seed: u64,
}

impl RingsSpec {
    /// A spec with noise 0.1 and no extra dimension.
    pub fn new(samples: u64, classes: u32, seed: u64) -> Self {
        Self {
            samples,
            classes,
            noise: 0.1,
            extra_dims: 0,
            seed,
        }
    }

    /// Checks that the spec describes a dataset that can be generated.
    pub fn validate(&self) -> io::Result<()> {
        check_count("rings classes", self.classes, 2..=MAX_CLASSES)?;
        check_non_negative("rings noise", self.noise)?;
        check_count("rings extra dimensions", self.extra_dims, 0..=u32::MAX - 2)
    }
}

/// What [`write_rings`] drew from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RingsTruth {
    /// Radius of each class's ring: class `c` has radius `c + 1`.
    pub radii: Vec<f64>,
    /// Standard deviation of the Gaussian noise on the radius.
    pub noise: f64,
    /// Standard-normal noise features after the two coordinates.
    pub extra_dims: u32,
}

impl RingsTruth {
    /// The class whose ring is nearest to the point `(x, y)`.
    pub fn nearest_ring(&self, x: f64, y: f64) -> u32 {
        let r = x.hypot(y);
        nearest(self.radii.iter().map(|&radius| (r - radius).abs()))
    }
}

/// Writes `spec.samples` rows of concentric rings as dense LIBSVM text and returns the truth.
///
/// Each row picks a class `c` uniformly, an angle uniformly and a radius `c + 1 + noise·ε`
/// (`ε` standard normal), and writes the point's two coordinates, then `extra_dims` standard
/// normal features. Labels are `0..classes`: with two classes the LIBSVM parser maps them to
/// 0/1 as they are, with more it keeps them. No linear model separates the classes; classifying
/// by the nearest ring is right unless the noise moves a point half-way to the next ring
/// (noise 0.1: all but about 1 in 10^6).
///
/// Lines are `label 1:x 2:y 3:e ...` (every feature, 1-based). Errors if the spec is invalid
/// (`ErrorKind::InvalidInput`) or on a write error.
pub fn write_rings(spec: &RingsSpec, out: impl Write) -> io::Result<RingsTruth> {
    spec.validate()?;
    let truth = RingsTruth {
        radii: (1..=spec.classes).map(f64::from).collect(),
        noise: spec.noise,
        extra_dims: spec.extra_dims,
    };
    let mut rng = stream_rng(spec.seed, STREAM_SAMPLES);
    let dims = 2 + spec.extra_dims as usize;
    write_dense_libsvm(out, spec.samples, dims, |x| {
        let class = rng.random_range(0..spec.classes);
        let angle = rng.random::<f64>() * std::f64::consts::TAU;
        let r = truth.radii[class as usize] + spec.noise * gaussian(&mut rng);
        x[0] = r * angle.cos();
        x[1] = r * angle.sin();
        x[2..].iter_mut().for_each(|v| *v = gaussian(&mut rng));
        class
    })?;
    Ok(truth)
}
