#![no_main]
use libfuzzer_sys::fuzz_target;

mod common;

fuzz_target!(|data: &[u8]| {
    let _ = mlless_runtime::fuzzing::decode_supervisor_state(&common::framed(*b"MLLV", data));
});
