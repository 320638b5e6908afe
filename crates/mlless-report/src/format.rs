//! Numbers as the report shows them: three significant digits, in their unit.

/// Dollars with three significant digits, e.g. `$0.000123`, `$1.23`.
pub(crate) fn format_usd(v: f64) -> String {
    if v == 0.0 || !v.is_finite() {
        return "$0".to_string();
    }
    format!("${}", significant(v, 3, 2))
}

/// Seconds with three significant digits (at least one decimal below 100 s), e.g. `0.274`,
/// `2.74`, `27.4`, `274`.
pub(crate) fn format_seconds(v: f64) -> String {
    if v == 0.0 || !v.is_finite() {
        return "0".to_string();
    }
    significant(v, 3, 0)
}

/// `v` with `digits` significant digits and at least `min_decimals` decimals.
fn significant(v: f64, digits: i32, min_decimals: i32) -> String {
    let magnitude = v.abs().log10().floor() as i32;
    let decimals = (digits - 1 - magnitude).clamp(min_decimals, 12) as usize;
    format!("{v:.decimals$}")
}

/// A byte count as a tick of an axis spanning `span` bytes: in the unit of the span (B, kB,
/// MB, GB) with the decimals its tick step needs, so that no two ticks read the same (in whole kB, 2.1 kB and
/// 2.4 kB would both read "2 kB").
pub(crate) fn format_bytes_tick(v: f64, span: f64) -> String {
    let a = span.abs();
    let (scale, unit) = if a >= 1e9 {
        (1e9, "GB")
    } else if a >= 1e6 {
        (1e6, "MB")
    } else if a >= 1e3 {
        (1e3, "kB")
    } else {
        (1.0, "B")
    };
    format!("{} {unit}", format_tick(v / scale, span / scale))
}

/// An axis tick: `v` with as many decimals as a tick step of `span / 10` needs.
pub(crate) fn format_tick(v: f64, span: f64) -> String {
    let step = span.abs() / 10.0;
    let decimals = if step > 0.0 && step.is_finite() {
        (-step.log10().floor()).clamp(0.0, 8.0) as usize
    } else {
        2
    };
    format!("{v:.decimals$}")
}

/// The smallest and largest of the finite `values`, or `None` when there is none: where an
/// axis must reach.
pub(crate) fn finite_range(values: impl Iterator<Item = f64>) -> Option<(f64, f64)> {
    values
        .filter(|v| v.is_finite())
        .fold(None, |range, v| match range {
            None => Some((v, v)),
            Some((lo, hi)) => Some((f64::min(lo, v), f64::max(hi, v))),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_have_three_significant_digits() {
        assert_eq!(format_usd(0.000_123_4), "$0.000123");
        assert_eq!(format_usd(1.234), "$1.23");
        assert_eq!(format_usd(0.0), "$0");
        assert_eq!(format_seconds(0.274_18), "0.274");
        assert_eq!(format_seconds(27.418), "27.4");
        assert_eq!(format_seconds(274.18), "274");
        // Ticks in the span's unit, with the decimals its step needs: no two read the same.
        assert_eq!(format_bytes_tick(1_500.0, 7_400.0), "1.5 kB");
        assert_eq!(format_bytes_tick(2_000.0, 7_400.0), "2.0 kB");
        assert_eq!(format_bytes_tick(2_500_000.0, 3e6), "2.5 MB");
        assert_eq!(format_bytes_tick(0.0, 300.0), "0 B");
        assert_eq!(format_tick(0.2, 1.0), "0.2");
        assert_eq!(format_tick(0.5, 0.4), "0.50");
        assert_eq!(format_tick(120.0, 300.0), "120");
    }
}
