#![no_main]
use libfuzzer_sys::fuzz_target;
use mlless_runtime::messages::{Message, StoredModel};

mod common;

fuzz_target!(|data: &[u8]| {
    let _ = StoredModel::decode(&common::framed(StoredModel::MAGIC, data), || {
        "fuzz".to_string()
    });
});
