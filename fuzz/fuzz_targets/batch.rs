#![no_main]
use libfuzzer_sys::fuzz_target;

mod common;

fuzz_target!(|data: &[u8]| {
    let _ = mlless_data::decode_batch(&common::framed(mlless_data::BATCH_MAGIC, data));
});
