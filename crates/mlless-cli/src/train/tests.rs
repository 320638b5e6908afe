//! Tests of the train command's option parsing.

use super::*;
use clap::{FromArgMatches, ValueEnum};

/// `mlless train --data d` with `extra` arguments.
fn parse(extra: &[&str]) -> TrainArgs {
    let command = <TrainArgs as Args>::augment_args(clap::Command::new("train"));
    let matches = command
        .try_get_matches_from(["train", "--data", "d"].iter().chain(extra))
        .expect("the arguments parse");
    TrainArgs::from_arg_matches(&matches).expect("the arguments are train's")
}

#[test]
fn every_sync_mode_has_its_value_of_sync() {
    // Exhaustive: a new `SyncMode` does not compile here until `--sync` can name it.
    let value = |mode: SyncMode| match mode {
        SyncMode::Bsp => Sync::Bsp,
        SyncMode::Isp { .. } => Sync::Isp,
        SyncMode::Ssp { .. } => Sync::Ssp,
        SyncMode::Asp => Sync::Asp,
    };
    for sync in Sync::value_variants() {
        let name = sync.to_possible_value().expect("no value is skipped");
        let mode = parse(&["--model", "lr", "--sync", name.get_name()])
            .training()
            .sync;
        assert_eq!(value(mode), *sync);
        assert_eq!(mode.name(), name.get_name());
    }
}

#[test]
fn every_model_is_a_value_of_model() {
    for model in ModelChoice::ALL {
        assert_eq!(parse(&["--model", model.name()]).model, model);
    }
    let command = <TrainArgs as Args>::augment_args(clap::Command::new("train"));
    assert!(
        command
            .try_get_matches_from(["train", "--data", "d", "--model", "LR"])
            .is_err()
    );
}

#[test]
fn every_option_is_taken_or_refused_by_resume() {
    // The compiler sees that every field is sorted; this, that the fields are the options.
    let command = <TrainArgs as Args>::augment_args(clap::Command::new("train"));
    let mut options: Vec<&str> = command
        .get_arguments()
        .map(|arg| arg.get_id().as_str())
        .collect();
    options.sort_unstable();
    let mut sorted: Vec<&str> = RESUMABLE.iter().chain(REFUSED).copied().collect();
    sorted.sort_unstable();
    assert_eq!(sorted, options);
}
