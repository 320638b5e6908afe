#![no_main]
use libfuzzer_sys::fuzz_target;
use mlless_runtime::messages::{Progress, Removal, StopRequest};

fuzz_target!(|data: &[u8]| {
    let _ = serde_json::from_slice::<Removal>(data);
    let _ = serde_json::from_slice::<StopRequest>(data);
    let _ = serde_json::from_slice::<Progress>(data);
});
