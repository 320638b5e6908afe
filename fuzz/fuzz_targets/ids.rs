#![no_main]
use libfuzzer_sys::fuzz_target;

mod common;

fuzz_target!(|data: &[u8]| {
    let _ = mlless_data::IdMap::decode(&common::framed(mlless_data::IDS_MAGIC, data));
});
