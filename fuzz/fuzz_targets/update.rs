#![no_main]
use libfuzzer_sys::fuzz_target;
use mlless_runtime::messages::{Message, UpdateMessage};

mod common;

fuzz_target!(|data: &[u8]| {
    let _ = UpdateMessage::decode(&common::framed(UpdateMessage::MAGIC, data), || {
        "fuzz".to_string()
    });
});
