#![no_main]
use libfuzzer_sys::fuzz_target;
use mlless_runtime::messages::{Message, ReplicaMessage};

mod common;

fuzz_target!(|data: &[u8]| {
    let _ = ReplicaMessage::decode(&common::framed(ReplicaMessage::MAGIC, data), || {
        "fuzz".to_string()
    });
});
