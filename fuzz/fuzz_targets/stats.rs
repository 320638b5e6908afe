#![no_main]
use libfuzzer_sys::fuzz_target;
use mlless_runtime::messages::{Message, StatsMessage};

mod common;

fuzz_target!(|data: &[u8]| {
    let _ = StatsMessage::decode(&common::framed(StatsMessage::MAGIC, data), || {
        "fuzz".to_string()
    });
});
