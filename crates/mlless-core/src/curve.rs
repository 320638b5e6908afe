//! Curves of `(x, y)` points as records and plots keep them.

/// Every k-th point of `points` and the last, so that at most about `max` remain (all of them
/// when there are no more than `max`): a curve small enough to store or draw, its shape and its
/// end kept.
pub fn thin(points: Vec<(f64, f64)>, max: usize) -> Vec<(f64, f64)> {
    if points.len() <= max.max(1) {
        return points;
    }
    let k = points.len().div_ceil(max.max(1));
    let last = points.len() - 1;
    points
        .into_iter()
        .enumerate()
        .filter(|(i, _)| i % k == 0 || *i == last)
        .map(|(_, p)| p)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thin_keeps_at_most_about_max_points_the_first_and_the_last() {
        let points: Vec<(f64, f64)> = (0..5001).map(|i| (f64::from(i), 0.0)).collect();
        let thinned = thin(points.clone(), 1500);
        assert!(thinned.len() <= 1501, "{}", thinned.len());
        assert_eq!(thinned.first().map(|p| p.0), Some(0.0));
        assert_eq!(thinned.last().map(|p| p.0), Some(5000.0));
        assert_eq!(thin(points[..10].to_vec(), 1500).len(), 10);
    }
}
