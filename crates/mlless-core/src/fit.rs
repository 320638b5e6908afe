//! Small dense fits: least squares (Householder QR), non-negative least squares
//! (Lawson–Hanson), a projected Levenberg–Marquardt for four-coefficient curves, the weighted
//! non-negative line, and the median. Pure `f64` maths, no allocation beyond the problem's.
//!
//! The scale-in tuner ([`crate::scale_in`]) fits its loss curves and step-duration model with
//! these; `mlless-cost` fits its exchange model with [`nonneg_line`].
//!
//! The solvers are hand-written: the problems have 2–4 unknowns, while the `nnls` crate pulls
//! `ndarray` and `ndarray-stats`, and the least-squares crates `nalgebra` or `ndarray` (some
//! with BLAS), into a crate whose promise is pure maths on light dependencies.
//!
//! ```
//! use mlless_core::fit::{LineFit, nnls, nonneg_line};
//!
//! // x ≥ 0 in min ‖A x − b‖: the unconstrained answer (2, −1) is not feasible.
//! let x = nnls(&[vec![1.0, 1.0, 1.0], vec![0.0, 1.0, 2.0]], &[2.0, 1.0, 0.0]);
//! assert!((x[0] - 1.0).abs() < 1e-12 && x[1] == 0.0);
//!
//! // y = 1 + 2·x, each point weighted 1.
//! let points: Vec<(f64, f64, f64)> = (0..4).map(|x| (x as f64, 1.0 + 2.0 * x as f64, 1.0)).collect();
//! let LineFit::Line { intercept, slope } = nonneg_line(&points) else { panic!() };
//! assert!((intercept - 1.0).abs() < 1e-12 && (slope - 2.0).abs() < 1e-12);
//! ```

fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

fn norm(a: &[f64]) -> f64 {
    dot(a, a).sqrt()
}

/// Applies the Householder reflection `I − 2 v vᵀ / vᵀv` to `x`.
fn reflect(v: &[f64], vv: f64, x: &mut [f64]) {
    let s = 2.0 * dot(v, x) / vv;
    x.iter_mut().zip(v).for_each(|(xi, vi)| *xi -= s * vi);
}

/// `min ‖A x − b‖` over the columns `cols` by Householder QR; `None` if there are fewer rows
/// than columns or the columns are numerically rank-deficient.
pub fn lstsq(cols: &[&[f64]], b: &[f64]) -> Option<Vec<f64>> {
    let (n, k) = (b.len(), cols.len());
    if k == 0 || n < k {
        return None;
    }
    let mut a: Vec<Vec<f64>> = cols.iter().map(|c| c.to_vec()).collect();
    let mut y = b.to_vec();
    for j in 0..k {
        let col_norm = norm(&a[j][j..]);
        if !(col_norm > 0.0 && col_norm.is_finite()) {
            return None;
        }
        let alpha = if a[j][j] > 0.0 { -col_norm } else { col_norm };
        let mut v = a[j][j..].to_vec();
        v[0] -= alpha;
        let vv = dot(&v, &v);
        if vv > 0.0 {
            for col in a.iter_mut().skip(j) {
                reflect(&v, vv, &mut col[j..]);
            }
            reflect(&v, vv, &mut y[j..]);
        }
    }
    // R[i][j] = a[j][i] for i ≤ j.
    let max_diag = (0..k).map(|j| a[j][j].abs()).fold(0.0, f64::max);
    let mut x = vec![0.0; k];
    for j in (0..k).rev() {
        let r_jj = a[j][j];
        if r_jj.abs() <= 1e-12 * max_diag {
            return None;
        }
        let tail: f64 = (j + 1..k).map(|c| a[c][j] * x[c]).sum();
        x[j] = (y[j] - tail) / r_jj;
    }
    x.iter().all(|v| v.is_finite()).then_some(x)
}

/// Non-negative least squares `min ‖A x − b‖, x ≥ 0` (Lawson–Hanson active set), on columns
/// scaled to unit norm (a positive scaling keeps the constraint and helps the conditioning).
/// Zero or non-finite columns get `x = 0`.
pub fn nnls(cols: &[Vec<f64>], b: &[f64]) -> Vec<f64> {
    let k = cols.len();
    let scale: Vec<f64> = cols.iter().map(|c| norm(c)).collect();
    let mut usable: Vec<bool> = scale.iter().map(|s| *s > 0.0 && s.is_finite()).collect();
    let a: Vec<Vec<f64>> = cols
        .iter()
        .zip(&scale)
        .zip(&usable)
        .map(|((c, &s), &ok)| {
            if ok {
                c.iter().map(|v| v / s).collect()
            } else {
                vec![0.0; c.len()]
            }
        })
        .collect();
    let mut x = vec![0.0; k];
    let mut passive = vec![false; k];
    let tol = 1e-12 * norm(b).max(f64::MIN_POSITIVE);
    let max_iter = 8 * k + 8;
    for _ in 0..max_iter {
        let mut r = b.to_vec();
        for (col, &xj) in a.iter().zip(&x) {
            if xj != 0.0 {
                r.iter_mut().zip(col).for_each(|(ri, ci)| *ri -= xj * ci);
            }
        }
        let w: Vec<f64> = a.iter().map(|c| dot(c, &r)).collect();
        let Some(j) = (0..k)
            .filter(|&j| usable[j] && !passive[j] && w[j] > tol)
            .max_by(|&i, &j| w[i].total_cmp(&w[j]))
        else {
            break;
        };
        passive[j] = true;
        for _ in 0..max_iter {
            let idx: Vec<usize> = (0..k).filter(|&i| passive[i]).collect();
            let sub: Vec<&[f64]> = idx.iter().map(|&i| a[i].as_slice()).collect();
            let Some(z) = lstsq(&sub, b) else {
                // The new column is dependent on the passive ones: never try it again.
                passive[j] = false;
                usable[j] = false;
                break;
            };
            if z.iter().all(|&v| v > 0.0) {
                x.fill(0.0);
                idx.iter().zip(&z).for_each(|(&i, &v)| x[i] = v);
                break;
            }
            // Move from x towards z until the first passive coefficient reaches 0.
            let step = idx
                .iter()
                .zip(&z)
                .filter(|&(_, &zi)| zi <= 0.0)
                .map(|(&i, &zi)| x[i] / (x[i] - zi))
                .fold(1.0, f64::min);
            for (&i, &zi) in idx.iter().zip(&z) {
                x[i] += step * (zi - x[i]);
                if x[i] <= 0.0 || (zi <= 0.0 && x[i] <= 1e-15) {
                    x[i] = 0.0;
                    passive[i] = false;
                }
            }
        }
    }
    x.iter()
        .zip(&scale)
        .zip(&usable)
        .map(|((&v, &s), &ok)| if ok { (v / s).max(0.0) } else { 0.0 })
        .collect()
}

/// Solves a small dense system by Gaussian elimination with partial pivoting.
fn solve(mut a: Vec<Vec<f64>>, mut b: Vec<f64>) -> Option<Vec<f64>> {
    let m = b.len();
    for col in 0..m {
        let pivot = (col..m).max_by(|&i, &j| a[i][col].abs().total_cmp(&a[j][col].abs()))?;
        if a[pivot][col] == 0.0 || a[pivot][col].is_nan() {
            return None;
        }
        a.swap(col, pivot);
        b.swap(col, pivot);
        for row in col + 1..m {
            let f = a[row][col] / a[col][col];
            if f != 0.0 {
                let (upper, lower) = a.split_at_mut(row);
                lower[0]
                    .iter_mut()
                    .zip(&upper[col])
                    .skip(col)
                    .for_each(|(x, p)| *x -= f * p);
                b[row] -= f * b[col];
            }
        }
    }
    let mut x = vec![0.0; m];
    for row in (0..m).rev() {
        let tail: f64 = (row + 1..m).map(|c| a[row][c] * x[c]).sum();
        x[row] = (b[row] - tail) / a[row][row];
    }
    x.iter().all(|v| v.is_finite()).then_some(x)
}

/// A four-coefficient curve: its value at `t` and the gradient in the coefficients.
pub type CurveFn = fn(&[f64; 4], f64) -> (f64, [f64; 4]);

/// Sum of squared relative residuals `(f(t) − y) / y`; infinite if the curve is not finite
/// somewhere.
pub fn relative_sse(model: CurveFn, p: &[f64; 4], points: &[(f64, f64)]) -> f64 {
    let mut total = 0.0;
    for &(t, y) in points {
        let r = model(p, t).0 / y - 1.0;
        if !r.is_finite() {
            return f64::INFINITY;
        }
        total += r * r;
    }
    total
}

/// Projected Levenberg–Marquardt from `start` on the squared relative error
/// ([`relative_sse`]), all coefficients ≥ 0. Coefficients at 0 whose gradient points below 0
/// are held fixed for the step; the step is clamped at 0 and accepted only if it lowers the
/// error. Returns the coefficients and their error.
pub fn levenberg_marquardt(
    model: CurveFn,
    start: [f64; 4],
    points: &[(f64, f64)],
) -> ([f64; 4], f64) {
    let mut p = start;
    let mut cost = relative_sse(model, &p, points);
    if !cost.is_finite() {
        return (p, cost);
    }
    let mut lambda = 1e-3;
    for _ in 0..400 {
        if cost == 0.0 {
            break;
        }
        let mut jtj = [[0.0; 4]; 4];
        let mut g = [0.0; 4];
        for &(t, y) in points {
            let (f, mut d) = model(&p, t);
            let r = f / y - 1.0;
            d.iter_mut().for_each(|v| *v /= y);
            for a in 0..4 {
                g[a] += d[a] * r;
                for b in 0..4 {
                    jtj[a][b] += d[a] * d[b];
                }
            }
        }
        let free: Vec<usize> = (0..4).filter(|&j| !(p[j] <= 0.0 && g[j] >= 0.0)).collect();
        if free.is_empty() {
            break;
        }
        let max_diag = free.iter().map(|&j| jtj[j][j]).fold(0.0, f64::max);
        if !(max_diag > 0.0 && max_diag.is_finite()) {
            break;
        }
        let mut accepted = false;
        while lambda < 1e12 {
            let mat: Vec<Vec<f64>> = free
                .iter()
                .map(|&a| {
                    free.iter()
                        .map(|&b| {
                            let damp = if a == b {
                                lambda * jtj[a][a].max(1e-12 * max_diag)
                            } else {
                                0.0
                            };
                            jtj[a][b] + damp
                        })
                        .collect()
                })
                .collect();
            let rhs: Vec<f64> = free.iter().map(|&j| -g[j]).collect();
            if let Some(delta) = solve(mat, rhs) {
                let mut q = p;
                free.iter()
                    .zip(&delta)
                    .for_each(|(&j, &dj)| q[j] = (p[j] + dj).max(0.0));
                let c = relative_sse(model, &q, points);
                if c < cost {
                    p = q;
                    cost = c;
                    lambda = (lambda / 3.0).max(1e-12);
                    accepted = true;
                    break;
                }
            }
            lambda *= 4.0;
        }
        if !accepted {
            break;
        }
    }
    (p, cost)
}

/// The median of `values` (sorted in place by [`f64::total_cmp`]); NaN if empty.
pub fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    let n = values.len();
    if n == 0 {
        f64::NAN
    } else if n % 2 == 1 {
        values[n / 2]
    } else {
        0.5 * (values[n / 2 - 1] + values[n / 2])
    }
}

/// What [`nonneg_line`] could fit.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum LineFit {
    /// No point has weight.
    Empty,
    /// Every point has (numerically) the same `x`: only the weighted means are known.
    OneAbscissa {
        /// The weighted mean of `x`.
        mean_x: f64,
        /// The weighted mean of `y`.
        mean_y: f64,
    },
    /// The line `y = intercept + slope·x`, both ≥ 0.
    Line {
        /// The value at `x = 0`.
        intercept: f64,
        /// The rise per unit of `x`.
        slope: f64,
    },
}

/// Weighted least squares line `y = a + b·x` through `(x, y, weight)` points with `a, b ≥ 0`,
/// in closed form: the unconstrained line with its slope clamped at 0; if its intercept is then
/// negative, `a = 0` and the slope of the line through the origin, clamped at 0.
pub fn nonneg_line(points: &[(f64, f64, f64)]) -> LineFit {
    let n: f64 = points.iter().map(|p| p.2).sum();
    if n == 0.0 {
        return LineFit::Empty;
    }
    let mean_x = points.iter().map(|p| p.2 * p.0).sum::<f64>() / n;
    let mean_y = points.iter().map(|p| p.2 * p.1).sum::<f64>() / n;
    let sxx: f64 = points.iter().map(|p| p.2 * (p.0 - mean_x).powi(2)).sum();
    if sxx <= 1e-12 {
        return LineFit::OneAbscissa { mean_x, mean_y };
    }
    let sxy: f64 = points
        .iter()
        .map(|p| p.2 * (p.0 - mean_x) * (p.1 - mean_y))
        .sum();
    let mut b = (sxy / sxx).max(0.0);
    let mut a = mean_y - b * mean_x;
    if a < 0.0 {
        // A negative intercept: force it to 0 and fit the slope through the origin.
        a = 0.0;
        let sxx0: f64 = points.iter().map(|p| p.2 * p.0 * p.0).sum();
        let sxy0: f64 = points.iter().map(|p| p.2 * p.0 * p.1).sum();
        b = if sxx0 > 0.0 {
            (sxy0 / sxx0).max(0.0)
        } else {
            0.0
        };
    }
    LineFit::Line {
        intercept: a,
        slope: b,
    }
}

#[cfg(test)]
mod tests {
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};

    use super::*;

    #[test]
    fn fit_lstsq_solves_an_exact_system() {
        let cols = [vec![1.0, 1.0, 1.0, 1.0], vec![0.0, 1.0, 2.0, 3.0]];
        let b: Vec<f64> = (0..4).map(|i| 2.0 + 0.5 * i as f64).collect();
        let refs: Vec<&[f64]> = cols.iter().map(|c| c.as_slice()).collect();
        let x = lstsq(&refs, &b).unwrap();
        assert!(
            (x[0] - 2.0).abs() < 1e-12 && (x[1] - 0.5).abs() < 1e-12,
            "{x:?}"
        );
        // Dependent columns are refused.
        let dep = [vec![1.0, 2.0, 3.0], vec![2.0, 4.0, 6.0]];
        let refs: Vec<&[f64]> = dep.iter().map(|c| c.as_slice()).collect();
        assert!(lstsq(&refs, &[1.0, 2.0, 3.0]).is_none());
    }

    /// The reference answer of scipy's (Lawson–Hanson) NNLS on a small problem.
    #[test]
    fn fit_nnls_matches_a_known_answer() {
        let cols = vec![
            vec![1.0, 1.0, 0.9, 0.0],
            vec![0.5, 0.6, 0.5, 0.0],
            vec![0.0, 0.0, 0.1, 1.0],
        ];
        let x = nnls(&cols, &[2.0, 1.0, 1.0, 0.5]);
        let expected = [1.37279152, 0.0, 0.47173145];
        for (got, want) in x.iter().zip(expected) {
            assert!((got - want).abs() < 1e-7, "{x:?}");
        }
    }

    /// Random NNLS problems satisfy the KKT conditions: x ≥ 0, Aᵀ(b − Ax) ≤ 0 and = 0 where
    /// x > 0; and some of them have an unconstrained solution with a negative coefficient.
    #[test]
    fn fit_nnls_satisfies_kkt() {
        let mut rng = StdRng::seed_from_u64(7);
        let mut constrained = 0;
        for trial in 0..400 {
            // Half the problems are like the curve fits' — columns t^a, strongly correlated, and
            // a target mixing them with signed weights — where adding a column often drives an
            // earlier one below 0 (Lawson–Hanson's inner loop); half are random.
            let (n, k) = (rng.random_range(6..30), rng.random_range(1..6));
            let cols: Vec<Vec<f64>> = if trial % 2 == 0 {
                (0..k)
                    .map(|_| {
                        let a: f64 = rng.random_range(0.0..2.0);
                        (1..=n).map(|t| (t as f64).powf(a)).collect()
                    })
                    .collect()
            } else {
                (0..k)
                    .map(|_| (0..n).map(|_| rng.random_range(-1.0..1.0)).collect())
                    .collect()
            };
            let mut b: Vec<f64> = (0..n).map(|_| rng.random_range(-0.1..0.1)).collect();
            for c in &cols {
                let weight: f64 = rng.random_range(-1.0..1.0);
                b.iter_mut().zip(c).for_each(|(bi, ci)| *bi += weight * ci);
            }
            let x = nnls(&cols, &b);
            let mut r = b.clone();
            for (c, &xj) in cols.iter().zip(&x) {
                r.iter_mut().zip(c).for_each(|(ri, ci)| *ri -= xj * ci);
            }
            for (c, &xj) in cols.iter().zip(&x) {
                let w = dot(c, &r);
                assert!(xj >= 0.0);
                assert!(w < 1e-9, "gradient {w} points into the feasible set");
                if xj > 0.0 {
                    assert!(w.abs() < 1e-9, "gradient {w} at a free coefficient");
                }
            }
            let refs: Vec<&[f64]> = cols.iter().map(|c| c.as_slice()).collect();
            if lstsq(&refs, &b).is_some_and(|u| u.iter().any(|&v| v < 0.0)) {
                constrained += 1;
            }
        }
        assert!(
            constrained > 100,
            "only {constrained} problems exercised the bound"
        );
    }
}
