//! Helpers every generator shares: seeded random streams, spec checks, number formatting,
//! the logistic model's margin and loss, and the dense LIBSVM writer.

use std::io::{self, BufWriter, Write};

use mlless_core::SparseBatch;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rand_distr::{Distribution, StandardNormal};

/// Stream ids mixed into the seed.
pub(super) const STREAM_MODEL: u64 = 1;
pub(super) const STREAM_SAMPLES: u64 = 2;
pub(super) const STREAM_CALIBRATION: u64 = 3;
pub(super) const STREAM_BIAS: u64 = 4;

/// An RNG for one stream of one seed (SplitMix64 mixing of seed and stream).
pub(super) fn stream_rng(seed: u64, stream: u64) -> StdRng {
    let mut z = seed ^ stream.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    StdRng::seed_from_u64(z ^ (z >> 31))
}

pub(super) fn invalid(message: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, message)
}

/// Appends the decimal digits of `n` (without `format!`'s machinery: the writers of large text
/// inputs, the generators' and the Python package's, write millions of them).
pub fn push_u64(out: &mut Vec<u8>, mut n: u64) {
    let mut digits = [0u8; 20];
    let mut i = digits.len();
    loop {
        i -= 1;
        digits[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[i..]);
}

/// Appends `x` rounded to 4 decimals (`-0.5000`, `3.1416`); returns the rounded value times 10^4.
pub(super) fn push_fixed4(out: &mut Vec<u8>, x: f64) -> i64 {
    let scaled = (x * 10_000.0).round() as i64;
    if scaled < 0 {
        out.push(b'-');
    }
    let magnitude = scaled.unsigned_abs();
    push_u64(out, magnitude / 10_000);
    let frac = magnitude % 10_000;
    out.extend_from_slice(&[
        b'.',
        b'0' + (frac / 1000) as u8,
        b'0' + (frac / 100 % 10) as u8,
        b'0' + (frac / 10 % 10) as u8,
        b'0' + (frac % 10) as u8,
    ]);
    scaled
}

/// `ln(1 + e^x)` without overflow.
pub(super) fn softplus(x: f64) -> f64 {
    x.max(0.0) + (-x.abs()).exp().ln_1p()
}

pub(super) fn sigmoid(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}

/// A standard normal draw.
pub(super) fn gaussian(rng: &mut impl Rng) -> f64 {
    StandardNormal.sample(rng)
}

/// `x` rounded to 4 decimals, as [`push_fixed4`] writes it.
pub(super) fn round4(x: f64) -> f64 {
    (x * 10_000.0).round() / 10_000.0
}

/// Errors unless `x` is finite and non-negative; `what` names it in the message.
pub(super) fn check_non_negative(what: &str, x: f64) -> io::Result<()> {
    if x.is_finite() && x >= 0.0 {
        Ok(())
    } else {
        Err(invalid(format!(
            "{what} must be finite and non-negative, got {x}"
        )))
    }
}

/// Errors unless `n` is in `range`; `what` names it in the message.
pub(super) fn check_count(
    what: &str,
    n: u32,
    range: std::ops::RangeInclusive<u32>,
) -> io::Result<()> {
    if range.contains(&n) {
        Ok(())
    } else {
        Err(invalid(format!(
            "{what} must be in {}..={}, got {n}",
            range.start(),
            range.end()
        )))
    }
}

/// The margin `weights·x + bias` of a sparse row; indices beyond the weights count as weight 0.
pub(super) fn logistic_margin(weights: &[f32], bias: f32, indices: &[u32], values: &[f32]) -> f64 {
    indices
        .iter()
        .zip(values)
        .map(|(&i, &v)| f64::from(weights.get(i as usize).copied().unwrap_or(0.0)) * f64::from(v))
        .sum::<f64>()
        + f64::from(bias)
}

/// Mean log loss of the logistic model `(weights, bias)` on `rows` (labels 0/1), 0 for no rows.
pub(super) fn logistic_log_loss(weights: &[f32], bias: f32, rows: &SparseBatch) -> f64 {
    if rows.rows() == 0 {
        return 0.0;
    }
    let total: f64 = rows
        .iter_rows()
        .map(|(label, indices, values)| {
            let m = logistic_margin(weights, bias, indices, values);
            let y = f64::from(label);
            y * softplus(-m) + (1.0 - y) * softplus(m)
        })
        .sum();
    total / rows.rows() as f64
}

/// Writes `samples` rows of dense LIBSVM text, `label 1:v 2:v ... dims:v` with values rounded
/// to 4 decimals; `row` fills the values of each row and returns its label. Buffered
/// internally.
pub(super) fn write_dense_libsvm(
    out: impl Write,
    samples: u64,
    dims: usize,
    mut row: impl FnMut(&mut [f64]) -> u32,
) -> io::Result<()> {
    let mut out = BufWriter::with_capacity(1 << 20, out);
    let mut values = vec![0.0; dims];
    let mut line = Vec::with_capacity(16 + 16 * dims);
    for _ in 0..samples {
        let label = row(&mut values);
        line.clear();
        push_u64(&mut line, u64::from(label));
        for (i, &v) in values.iter().enumerate() {
            line.push(b' ');
            push_u64(&mut line, i as u64 + 1);
            line.push(b':');
            push_fixed4(&mut line, v);
        }
        line.push(b'\n');
        out.write_all(&line)?;
    }
    out.flush()
}

/// The index of the smallest distance (the first of equals), 0 if there is none.
pub(super) fn nearest(distances: impl Iterator<Item = f64>) -> u32 {
    distances
        .enumerate()
        .fold((0, f64::INFINITY), |best, (i, d)| {
            if d < best.1 { (i as u32, d) } else { best }
        })
        .0
}
