//! Search spaces over `mlless train`'s options, and the trials drawn from them.
//!
//! A parameter is named by its `train` flag without the dashes (`lr`, `l2`, `factors`,
//! `optimizer`, `memory-mb`; `memory_mb` is the same name) and takes its values as text, which
//! the caller hands to the flag's own parser. Its values are one of:
//!
//! | written | random sampling | grid (`N` points, default [`DEFAULT_GRID_POINTS`]) |
//! | --- | --- | --- |
//! | `a,b,c` (TOML: an array) | one of the values, uniformly | every value |
//! | `LO..HI[:N]` | uniform in [LO, HI] | N evenly spaced, both ends included |
//! | `log:LO..HI[:N]` | log-uniform (LO > 0) | N evenly spaced in log |
//! | `int:LO..HI[:N]` | a uniform integer | N evenly spaced, rounded, repeats dropped |
//! | `log-int:LO..HI[:N]` | a log-uniform integer (LO ≥ 1) | N evenly spaced in log, rounded |
//!
//! Sampled real values keep [`SIGNIFICANT_DIGITS`] significant digits, so that the text a trial
//! is given, the one shown and the one used are the same number.
//!
//! ```
//! use mlless_tune::{Sampler, SearchSpace};
//! let mut space = SearchSpace::default();
//! space.push_arg("lr=log:0.01..1:3")?;
//! space.push_arg("factors=5,10")?;
//! let trials = space.trials(Sampler::Grid, None, 1)?;
//! assert_eq!(trials.len(), 6);
//! assert!(trials.iter().any(|t| t.get("lr") == Some("0.1") && t.get("factors") == Some("10")));
//! # Ok::<(), mlless_tune::SpaceError>(())
//! ```

use std::collections::BTreeSet;
use std::fmt;

use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};

/// Points of a range in a grid when the range does not say (`:N`).
pub const DEFAULT_GRID_POINTS: u32 = 3;
/// Significant digits of a sampled real value.
pub const SIGNIFICANT_DIGITS: usize = 4;
/// A grid larger than this is refused: the search could never run it.
pub const MAX_GRID: usize = 100_000;

/// Why a search space or its sampling cannot be.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum SpaceError {
    /// `--param` without `=`, or with an empty name or values.
    #[error("a parameter is NAME=VALUES (e.g. lr=log:1e-3..1 or factors=5,10,20), not {0:?}")]
    Shape(String),
    /// The same parameter twice.
    #[error("parameter {0} is given twice")]
    Duplicate(String),
    /// A range whose bounds are not numbers, are reversed, or do not fit its scale.
    #[error("parameter {name}: {reason} (in {text:?})")]
    Range {
        /// The parameter.
        name: String,
        /// Its values as written.
        text: String,
        /// What is wrong.
        reason: String,
    },
    /// A TOML space that does not parse or holds something other than strings and arrays.
    #[error("search space: {0}")]
    Toml(String),
    /// Random sampling without a number of trials.
    #[error("random sampling needs --trials N")]
    NoTrials,
    /// A space without parameters.
    #[error("the search space is empty: give --param NAME=VALUES or --space FILE.toml")]
    Empty,
    /// A grid too large to be a search.
    #[error("the grid has more than {MAX_GRID} points: use fewer values or --sampler random")]
    TooLarge,
}

/// How trials are drawn from a space (`--sampler`: with the feature `clap`, the CLI's value,
/// with the help of `--help`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "snake_case")]
pub enum Sampler {
    /// Every point of the grid (a range at its `:N` points, default 3), in a seeded order.
    Grid,
    /// `--trials` independent draws, seeded.
    Random,
}

/// The scale of a range.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Scale {
    /// Uniform reals.
    Linear,
    /// Log-uniform reals.
    Log,
    /// Uniform integers.
    Int,
    /// Log-uniform integers.
    LogInt,
}

/// The values a parameter may take.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Domain {
    /// One of these values, as text.
    Choice {
        /// The values.
        values: Vec<String>,
    },
    /// A range.
    Range {
        /// Its scale.
        scale: Scale,
        /// Lower bound.
        lo: f64,
        /// Upper bound.
        hi: f64,
        /// Its points in a grid (`None`: [`DEFAULT_GRID_POINTS`]).
        points: Option<u32>,
    },
}

/// One parameter of a space: a `train` option and its values.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Param {
    /// The option, as its flag without the dashes (`lr`, `memory-mb`).
    pub name: String,
    /// Its values.
    pub domain: Domain,
}

/// The parameters of a search, in the order given.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SearchSpace {
    /// The parameters.
    pub params: Vec<Param>,
}

/// The values of one trial: a value for each parameter of the space, in its order.
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Assignment(pub Vec<(String, String)>);

impl Assignment {
    /// The value of `name`, if the assignment has one.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// Whether it sets no parameter (the options as given).
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl fmt::Display for Assignment {
    /// `lr=0.1 factors=10`, or `(defaults)` when empty.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            return f.write_str("(defaults)");
        }
        for (i, (name, value)) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(" ")?;
            }
            write!(f, "{name}={value}")?;
        }
        Ok(())
    }
}

/// A parameter's name as the space keeps it: the flag's spelling (`memory_mb` → `memory-mb`).
pub fn normalize_name(name: &str) -> String {
    name.trim().trim_start_matches("--").replace('_', "-")
}

impl Param {
    /// Parses `NAME=VALUES` (`--param`).
    pub fn parse(arg: &str) -> Result<Self, SpaceError> {
        let (name, values) = arg
            .split_once('=')
            .ok_or_else(|| SpaceError::Shape(arg.to_string()))?;
        let name = normalize_name(name);
        if name.is_empty() || values.trim().is_empty() {
            return Err(SpaceError::Shape(arg.to_string()));
        }
        let domain = Domain::parse(&name, values.trim())?;
        Ok(Self { name, domain })
    }
}

impl Domain {
    /// Parses the values of parameter `name` as written after `=` (see the module's table).
    pub fn parse(name: &str, text: &str) -> Result<Self, SpaceError> {
        let (scale, rest) = [
            ("log-int:", Scale::LogInt),
            ("int:", Scale::Int),
            ("log:", Scale::Log),
        ]
        .into_iter()
        .find_map(|(prefix, scale)| text.strip_prefix(prefix).map(|rest| (scale, rest)))
        .unwrap_or((Scale::Linear, text));
        if !rest.contains("..") {
            if scale != Scale::Linear {
                return Err(range_error(name, text, "a scale prefix needs LO..HI"));
            }
            let values: Vec<String> = text.split(',').map(|v| v.trim().to_string()).collect();
            if values.iter().any(String::is_empty) {
                return Err(SpaceError::Shape(format!("{name}={text}")));
            }
            return Ok(Domain::choice(values));
        }
        let (bounds, points) = match rest.rsplit_once(':') {
            Some((bounds, n)) => {
                let n: u32 =
                    n.trim().parse().ok().filter(|&n| n >= 1).ok_or_else(|| {
                        range_error(name, text, "the grid points :N are at least 1")
                    })?;
                (bounds, Some(n))
            }
            None => (rest, None),
        };
        let (lo, hi) = bounds
            .split_once("..")
            .ok_or_else(|| range_error(name, text, "a range is LO..HI"))?;
        let number = |s: &str| {
            s.trim()
                .parse::<f64>()
                .ok()
                .filter(|v| v.is_finite())
                .ok_or_else(|| range_error(name, text, "the bounds of a range are finite numbers"))
        };
        let (lo, hi) = (number(lo)?, number(hi)?);
        if lo > hi {
            return Err(range_error(name, text, "LO is above HI"));
        }
        match scale {
            Scale::Log if lo <= 0.0 => {
                return Err(range_error(name, text, "a log range needs LO > 0"));
            }
            Scale::LogInt if lo < 1.0 => {
                return Err(range_error(name, text, "a log-int range needs LO ≥ 1"));
            }
            Scale::Int | Scale::LogInt if lo.ceil() > hi.floor() => {
                return Err(range_error(name, text, "the range holds no integer"));
            }
            _ => {}
        }
        Ok(Domain::Range {
            scale,
            lo,
            hi,
            points,
        })
    }

    /// A choice of `values`, repeats dropped (the first kept).
    fn choice(values: Vec<String>) -> Self {
        let mut seen = BTreeSet::new();
        Domain::Choice {
            values: values
                .into_iter()
                .filter(|v| seen.insert(v.clone()))
                .collect(),
        }
    }

    /// The grid's values of this domain.
    pub fn grid(&self) -> Vec<String> {
        match self {
            Domain::Choice { values } => values.clone(),
            &Domain::Range {
                scale,
                lo,
                hi,
                points,
            } => {
                let n = points.unwrap_or(DEFAULT_GRID_POINTS).max(1);
                let mut out: Vec<String> = Vec::new();
                for i in 0..n {
                    let t = if n == 1 {
                        0.5
                    } else {
                        f64::from(i) / f64::from(n - 1)
                    };
                    let v = match scale {
                        Scale::Linear | Scale::Int => lo + t * (hi - lo),
                        Scale::Log | Scale::LogInt => (lo.ln() + t * (hi.ln() - lo.ln())).exp(),
                    };
                    let text = format_value(scale, v, lo, hi);
                    if !out.contains(&text) {
                        out.push(text);
                    }
                }
                out
            }
        }
    }

    /// A random value of this domain.
    pub fn sample(&self, rng: &mut impl Rng) -> String {
        match self {
            Domain::Choice { values } => values[rng.random_range(0..values.len())].clone(),
            &Domain::Range { scale, lo, hi, .. } => {
                let v = match scale {
                    Scale::Linear => lo + rng.random::<f64>() * (hi - lo),
                    Scale::Log => (lo.ln() + rng.random::<f64>() * (hi.ln() - lo.ln())).exp(),
                    Scale::Int => rng.random_range(lo.ceil() as i64..=hi.floor() as i64) as f64,
                    Scale::LogInt => {
                        // Uniform in log over [lo - 0.5, hi + 0.5), so that the ends weigh as
                        // the values between them.
                        let (a, b) = ((lo.ceil() - 0.5).max(0.5), hi.floor() + 0.5);
                        (a.ln() + rng.random::<f64>() * (b.ln() - a.ln())).exp()
                    }
                };
                format_value(scale, v, lo, hi)
            }
        }
    }

    /// The values as they would be written (`log:0.001..1:4`, `5,10,20`).
    pub fn describe(&self) -> String {
        match self {
            Domain::Choice { values } => values.join(","),
            Domain::Range {
                scale,
                lo,
                hi,
                points,
            } => {
                let prefix = match scale {
                    Scale::Linear => "",
                    Scale::Log => "log:",
                    Scale::Int => "int:",
                    Scale::LogInt => "log-int:",
                };
                let points = points.map_or(String::new(), |n| format!(":{n}"));
                format!("{prefix}{lo}..{hi}{points}")
            }
        }
    }
}

fn range_error(name: &str, text: &str, reason: &str) -> SpaceError {
    SpaceError::Range {
        name: name.to_string(),
        text: text.to_string(),
        reason: reason.to_string(),
    }
}

/// `v` as the text a trial gets: an integer for the integer scales (clamped to the range's
/// integers), otherwise [`SIGNIFICANT_DIGITS`] significant digits (clamped to the range).
fn format_value(scale: Scale, v: f64, lo: f64, hi: f64) -> String {
    match scale {
        Scale::Int | Scale::LogInt => format!("{}", v.round().clamp(lo.ceil(), hi.floor()) as i64),
        Scale::Linear | Scale::Log => {
            let rounded: f64 = format!("{:.*e}", SIGNIFICANT_DIGITS - 1, v)
                .parse()
                .unwrap_or(v);
            format!("{}", rounded.clamp(lo, hi))
        }
    }
}

impl SearchSpace {
    /// Adds a parameter given as `NAME=VALUES` (`--param`).
    pub fn push_arg(&mut self, arg: &str) -> Result<(), SpaceError> {
        let param = Param::parse(arg)?;
        self.push(param)
    }

    /// Adds a parameter; an error if the space has one of that name already.
    pub fn push(&mut self, param: Param) -> Result<(), SpaceError> {
        if self.params.iter().any(|p| p.name == param.name) {
            return Err(SpaceError::Duplicate(param.name));
        }
        self.params.push(param);
        Ok(())
    }

    /// Adds the parameters of a TOML space: one key per parameter, whose value is the text
    /// `--param` takes after `=` (`lr = "log:1e-3..1"`) or an array of values
    /// (`factors = [5, 10, 20]`, `optimizer = ["momentum", "adam"]`).
    pub fn push_toml(&mut self, text: &str) -> Result<(), SpaceError> {
        let table: toml::Table =
            toml::from_str(text).map_err(|e| SpaceError::Toml(e.to_string()))?;
        for (key, value) in table {
            let name = normalize_name(&key);
            let domain = match value {
                toml::Value::String(text) => Domain::parse(&name, text.trim())?,
                toml::Value::Array(values) => {
                    if values.is_empty() {
                        return Err(SpaceError::Toml(format!("{key} has no values")));
                    }
                    let values = values
                        .into_iter()
                        .map(|v| scalar_text(&key, v))
                        .collect::<Result<Vec<_>, _>>()?;
                    Domain::choice(values)
                }
                other => Domain::choice(vec![scalar_text(&key, other)?]),
            };
            self.push(Param { name, domain })?;
        }
        Ok(())
    }

    /// The trials of this space: with [`Sampler::Grid`] every point of the grid in an order
    /// shuffled by `seed`, the first `trials` of them if given; with [`Sampler::Random`]
    /// `trials` draws (required), without repeats as far as the space allows.
    pub fn trials(
        &self,
        sampler: Sampler,
        trials: Option<u32>,
        seed: u64,
    ) -> Result<Vec<Assignment>, SpaceError> {
        if self.params.is_empty() {
            return Err(SpaceError::Empty);
        }
        let mut rng = StdRng::seed_from_u64(seed);
        match sampler {
            Sampler::Grid => {
                let mut grid = vec![Assignment::default()];
                for param in &self.params {
                    let values = param.domain.grid();
                    if grid.len().saturating_mul(values.len()) > MAX_GRID {
                        return Err(SpaceError::TooLarge);
                    }
                    grid = grid
                        .into_iter()
                        .flat_map(|a| {
                            values.iter().map(move |v| {
                                let mut a = a.clone();
                                a.0.push((param.name.clone(), v.clone()));
                                a
                            })
                        })
                        .collect();
                }
                grid.shuffle(&mut rng);
                if let Some(n) = trials {
                    grid.truncate(n as usize);
                }
                Ok(grid)
            }
            Sampler::Random => {
                let n = trials.ok_or(SpaceError::NoTrials)? as usize;
                let mut seen = BTreeSet::new();
                let mut out = Vec::with_capacity(n);
                // A finite space smaller than n gives each of its points once.
                for _ in 0..n.saturating_mul(100).max(100) {
                    if out.len() == n {
                        break;
                    }
                    let a = Assignment(
                        self.params
                            .iter()
                            .map(|p| (p.name.clone(), p.domain.sample(&mut rng)))
                            .collect(),
                    );
                    if seen.insert(a.clone()) {
                        out.push(a);
                    }
                }
                Ok(out)
            }
        }
    }
}

/// A TOML scalar as the text of a flag's value.
fn scalar_text(key: &str, value: toml::Value) -> Result<String, SpaceError> {
    match value {
        toml::Value::String(s) => Ok(s),
        toml::Value::Integer(i) => Ok(i.to_string()),
        toml::Value::Float(f) => Ok(format!("{f}")),
        toml::Value::Boolean(b) => Ok(b.to_string()),
        other => Err(SpaceError::Toml(format!(
            "{key}: a value is a string, a number or a boolean, not {}",
            other.type_str()
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn space(args: &[&str]) -> SearchSpace {
        let mut s = SearchSpace::default();
        for a in args {
            s.push_arg(a).unwrap();
        }
        s
    }

    #[test]
    fn parameters_parse() {
        let p = Param::parse("memory_mb=512,1024").unwrap();
        assert_eq!(p.name, "memory-mb");
        assert_eq!(
            p.domain,
            Domain::Choice {
                values: vec!["512".into(), "1024".into()]
            }
        );
        let p = Param::parse("lr=log:1e-3..1:4").unwrap();
        assert_eq!(
            p.domain,
            Domain::Range {
                scale: Scale::Log,
                lo: 1e-3,
                hi: 1.0,
                points: Some(4)
            }
        );
        assert_eq!(p.domain.describe(), "log:0.001..1:4");
        // A value with colons is a choice: algorithm=ma:5,admm:0.05:1.
        let p = Param::parse("algorithm=ma:5,admm:0.05:1").unwrap();
        assert_eq!(p.domain.grid(), ["ma:5", "admm:0.05:1"]);
        for bad in [
            "lr",
            "=1",
            "lr=",
            "lr=1,,2",
            "lr=log:0..1",
            "lr=2..1",
            "lr=a..b",
            "lr=0..1:0",
            "factors=int:1.2..1.8",
            "factors=log-int:0..10",
            "lr=log:1,2",
            "lr=0..inf",
        ] {
            assert!(Param::parse(bad).is_err(), "{bad}");
        }
        let mut s = space(&["lr=1,2"]);
        assert_eq!(
            s.push_arg("lr=3").unwrap_err(),
            SpaceError::Duplicate("lr".into())
        );
    }

    #[test]
    fn grids_hold_the_ends_and_the_points() {
        let grid = |text: &str| Domain::parse("x", text).unwrap().grid();
        assert_eq!(grid("log:0.001..1:4"), ["0.001", "0.01", "0.1", "1"]);
        assert_eq!(grid("0..1"), ["0", "0.5", "1"]);
        assert_eq!(grid("int:5..20:4"), ["5", "10", "15", "20"]);
        // Rounding repeats are dropped.
        assert_eq!(grid("int:1..2:5"), ["1", "2"]);
        assert_eq!(grid("log-int:1..100:3"), ["1", "10", "100"]);
        assert_eq!(grid("0.5..0.5:1"), ["0.5"]);
        assert_eq!(grid("b,a,b"), ["b", "a"]);
    }

    #[test]
    fn samples_stay_in_their_range_and_round_trip() {
        let mut rng = StdRng::seed_from_u64(3);
        for text in ["log:1e-4..0.3", "0.1..0.9", "int:5..50", "log-int:2..64"] {
            let d = Domain::parse("x", text).unwrap();
            let Domain::Range { lo, hi, scale, .. } = d else {
                unreachable!()
            };
            let mut seen = BTreeSet::new();
            for _ in 0..500 {
                let s = d.sample(&mut rng);
                let v: f64 = s.parse().unwrap();
                assert!((lo..=hi).contains(&v), "{text}: {s}");
                if matches!(scale, Scale::Int | Scale::LogInt) {
                    assert_eq!(v.fract(), 0.0, "{s}");
                }
                seen.insert(s);
            }
            // Both ends of the integer ranges are reached.
            if text == "int:5..50" {
                assert!(seen.contains("5") && seen.contains("50"));
            }
            if text == "log-int:2..64" {
                assert!(seen.contains("2") && seen.contains("64"));
            }
        }
        // Log-uniform: about half the draws of 1e-4..1 fall below 1e-2.
        let d = Domain::parse("x", "log:1e-4..1").unwrap();
        let below = (0..4000)
            .filter(|_| d.sample(&mut rng).parse::<f64>().unwrap() < 1e-2)
            .count();
        assert!((1800..2200).contains(&below), "{below}");
        assert_eq!(
            format_value(Scale::Log, 0.0031622776, 1e-3, 1.0),
            "0.003162"
        );
    }

    #[test]
    fn a_grid_is_the_product_in_a_seeded_order() {
        let s = space(&["lr=0.1,0.3,1", "factors=5,10", "optimizer=sgd"]);
        let a = s.trials(Sampler::Grid, None, 7).unwrap();
        assert_eq!(a.len(), 6);
        assert_eq!(a.iter().collect::<BTreeSet<_>>().len(), 6);
        assert!(a.iter().all(|t| t.get("optimizer") == Some("sgd")));
        assert_eq!(a, s.trials(Sampler::Grid, None, 7).unwrap());
        assert_ne!(a, s.trials(Sampler::Grid, None, 8).unwrap());
        // --trials keeps the first of the shuffled grid.
        assert_eq!(s.trials(Sampler::Grid, Some(4), 7).unwrap(), a[..4]);
        assert_eq!(a[0].to_string().split(' ').count(), 3);
        assert_eq!(Assignment::default().to_string(), "(defaults)");
        let huge = space(&["a=0..1:1000", "b=0..1:1000"]);
        assert_eq!(
            huge.trials(Sampler::Grid, None, 1).unwrap_err(),
            SpaceError::TooLarge
        );
        assert_eq!(
            SearchSpace::default()
                .trials(Sampler::Grid, None, 1)
                .unwrap_err(),
            SpaceError::Empty
        );
    }

    #[test]
    fn random_trials_are_seeded_and_distinct() {
        let s = space(&["lr=log:1e-3..1", "factors=5,10"]);
        let a = s.trials(Sampler::Random, Some(20), 1).unwrap();
        assert_eq!(a.len(), 20);
        assert_eq!(a.iter().collect::<BTreeSet<_>>().len(), 20);
        assert_eq!(a, s.trials(Sampler::Random, Some(20), 1).unwrap());
        assert_eq!(
            s.trials(Sampler::Random, None, 1).unwrap_err(),
            SpaceError::NoTrials
        );
        // A finite space smaller than the trials asked for: each point once.
        let small = space(&["factors=5,10", "optimizer=sgd,adam"]);
        assert_eq!(small.trials(Sampler::Random, Some(10), 1).unwrap().len(), 4);
    }

    #[test]
    fn toml_spaces() {
        let mut s = SearchSpace::default();
        s.push_toml(
            r#"
            lr = "log:1e-3..1:4"
            factors = [5, 10, 20]
            optimizer = ["momentum", "adam"]
            l2 = 0.001
            memory_mb = [512]
            "#,
        )
        .unwrap();
        let names: Vec<&str> = s.params.iter().map(|p| p.name.as_str()).collect();
        // TOML tables are read in key order.
        assert_eq!(names, ["factors", "l2", "lr", "memory-mb", "optimizer"]);
        assert_eq!(s.params[0].domain.grid(), ["5", "10", "20"]);
        assert_eq!(s.params[1].domain.grid(), ["0.001"]);
        assert_eq!(s.trials(Sampler::Grid, None, 1).unwrap().len(), 24);
        for bad in ["lr = [", "lr = []", "lr = [[1]]", "lr = \"log:0..1\""] {
            assert!(SearchSpace::default().push_toml(bad).is_err(), "{bad}");
        }
        let mut both = space(&["lr=1,2"]);
        assert!(both.push_toml("lr = [3]").is_err());
    }
}
