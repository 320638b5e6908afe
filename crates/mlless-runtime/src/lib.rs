//! The runtime of mlless: the driver that a user's process runs, the worker and supervisor
//! functions, the one dispatch every function invocation goes through ([`run_function`]), and
//! the jobs built on them: the benchmarks, the hyperparameter search, prediction and export.
//!
//! Dependencies point one way: this crate uses the maths of `mlless-core`, the formats of
//! `mlless-data`, the backends behind the traits of `mlless-store` (object store, channel)
//! and `mlless-faas` (invoker), the payloads, messages and errors of `mlless-function`
//! (re-exported here as [`task`], [`messages`] and [`error`]) and the map tasks of
//! `mlless-prepare` (its entry points re-exported); it knows no backend by name.
//!
//! A training job, as [`driver::train`] runs it: the driver writes a
//! [`JobSpec`](mlless_job::JobSpec) (the job's plain data live in `mlless-job`), invokes one
//! supervisor and P workers with a [`Payload`] each, and polls the supervisor's progress; every
//! function calls [`run_function`] with its payload.

pub mod bench;
pub mod checkpoint;
pub mod context;
pub mod dataset;
pub mod driver;
mod exchange;
pub mod export;
pub mod fleet;
pub mod function;
pub mod job_id;
pub mod lease;
pub mod predict;
mod requests;
pub mod runs;
pub mod supervisor;
pub mod tune;
pub mod worker;

/// Entry points for the fuzz targets (`fuzz/` at the repository root) and the corruption tests:
/// decoders of the private checkpoint types, and valid samples of them to corrupt.
#[doc(hidden)]
pub mod fuzzing {
    pub use crate::supervisor::fuzzing::*;
    pub use crate::worker::fuzzing::*;

    #[cfg(test)]
    mod tests {
        use super::*;

        /// Flips every bit in turn: each must be an error, never a panic.
        fn assert_every_flip_fails(bytes: &[u8], decode: impl Fn(&[u8]) -> crate::Result<()>) {
            decode(bytes).expect("the sample decodes");
            for i in 0..bytes.len() {
                for bit in 0..8 {
                    let mut bad = bytes.to_vec();
                    bad[i] ^= 1 << bit;
                    assert!(decode(&bad).is_err(), "byte {i} bit {bit}");
                }
            }
        }

        #[test]
        fn every_flipped_bit_of_a_checkpoint_is_an_error() {
            assert_every_flip_fails(&sample_worker_checkpoint(6), decode_worker_checkpoint);
            assert_every_flip_fails(&sample_supervisor_state(), decode_supervisor_state);
        }

        #[test]
        fn a_checkpoint_declaring_2_pow_40_bytes_is_an_error() {
            for mut bytes in [sample_worker_checkpoint(6), sample_supervisor_state()] {
                bytes[8..16].copy_from_slice(&(1u64 << 40).to_le_bytes());
                assert!(decode_worker_checkpoint(&bytes).is_err());
                assert!(decode_supervisor_state(&bytes).is_err());
            }
        }
    }
}

pub use driver::{
    CANCEL_GRACE, Control, DEFAULT_PATIENCE, Defaults, Hyperparameters, LiveProgress,
    ResumeOptions, TrainOptions, ValidationOptions, resumable_step, resume, train,
};
pub use error::{
    InputError, Internal, Mismatch, NOT_RESUMABLE, NeedsValidation, Refusal, Result, RuntimeError,
};
pub use function::run_function;
pub use mlless_function::{error, messages, task};
pub use mlless_prepare::{
    MapRound, PrepareOptions, PrepareStage, TestSet, ValidationSet, prepare, prepare_with,
};
pub use task::{Payload, ShuffleReduceTask, SplitMapTask, Start};
