//! Tests of the library enums the command line takes as they are (`clap::ValueEnum`, derived
//! behind each crate's `clap` feature): the names the CLI gives their values are the ones the
//! library reads and writes, and their `ALL` lists are every value.

use std::fmt::Debug;

use clap::ValueEnum;
use mlless_core::{OptimizerKind, Schedule, SignificanceScale};
use mlless_data::InputFormat;
use mlless_job::Pattern;
use mlless_runtime::bench::cloud::CloudJob;
use mlless_tune::{RungUnit, Sampler};

/// The command-line names of `T`'s values, in `value_variants` order.
fn names<T: ValueEnum>() -> Vec<String> {
    T::value_variants()
        .iter()
        .map(|v| {
            let value = v.to_possible_value().expect("no value is skipped");
            value.get_name().to_owned()
        })
        .collect()
}

/// Asserts that every value of `T` is named on the command line as `own` names it, and that
/// `parse` reads that name back to it.
fn named_alike<T: ValueEnum + PartialEq + Debug>(
    own: impl Fn(&T) -> String,
    parse: impl Fn(&str) -> Option<T>,
) {
    for (value, name) in T::value_variants().iter().zip(names::<T>()) {
        assert_eq!(own(value), name, "{value:?}");
        assert_eq!(parse(&name).as_ref(), Some(value), "{name}");
    }
}

/// The value's serde name (a JSON string).
fn serde_name<T: serde::Serialize>(value: &T) -> String {
    match serde_json::to_value(value).expect("serialises") {
        serde_json::Value::String(name) => name,
        other => panic!("not a string: {other}"),
    }
}

/// `T` read from its serde name.
fn from_serde_name<T: serde::de::DeserializeOwned>(name: &str) -> Option<T> {
    serde_json::from_value(serde_json::Value::String(name.to_owned())).ok()
}

#[test]
fn every_value_round_trips_through_the_library_s_own_names() {
    named_alike::<OptimizerKind>(|k| k.as_str().to_owned(), |s| s.parse().ok());
    named_alike::<OptimizerKind>(ToString::to_string, |s| s.parse().ok());
    named_alike::<OptimizerKind>(serde_name, from_serde_name);
    named_alike::<Schedule>(|s| s.as_str().to_owned(), |s| s.parse().ok());
    named_alike::<Schedule>(ToString::to_string, |s| s.parse().ok());
    named_alike::<Schedule>(serde_name, from_serde_name);
    named_alike::<SignificanceScale>(serde_name, from_serde_name);
    named_alike::<InputFormat>(|f| f.name().to_owned(), |s| s.parse().ok());
    named_alike::<InputFormat>(ToString::to_string, |s| s.parse().ok());
    named_alike::<Sampler>(serde_name, from_serde_name);
    named_alike::<RungUnit>(serde_name, from_serde_name);
    // `--pattern` and `bench cloud --job` name them as `name()` does (the records spell
    // patterns `all_reduce`, by serde, as they always have).
    let pattern = |name: &str| Pattern::value_variants().iter().find(|p| p.name() == name);
    named_alike::<Pattern>(|p| p.name().to_owned(), |s| pattern(s).copied());
    let job = |name: &str| CloudJob::value_variants().iter().find(|j| j.name() == name);
    named_alike::<CloudJob>(|j| j.name().to_owned(), |s| job(s).copied());
}

#[test]
fn every_all_list_is_every_value() {
    // `value_variants` is derived from the enum, so a variant left out of `ALL` shows here.
    assert_eq!(OptimizerKind::ALL, OptimizerKind::value_variants());
    assert_eq!(InputFormat::ALL, InputFormat::value_variants());
    let names: Vec<&str> = InputFormat::NAMES.to_vec();
    assert_eq!(names, self::names::<InputFormat>());
}
