#![no_main]
use libfuzzer_sys::fuzz_target;

mod common;

fuzz_target!(|data: &[u8]| {
    let _ = mlless_runtime::fuzzing::decode_worker_checkpoint(&common::framed(*b"MLLW", data));
});
