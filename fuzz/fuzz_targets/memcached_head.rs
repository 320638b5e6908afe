#![no_main]
use libfuzzer_sys::fuzz_target;

// The first byte picks the item flags (inline, chunked, other) and the chunk size; the rest is
// the item's value. Also parses it as the channel's index.
fuzz_target!(|data: &[u8]| {
    let Some((&first, value)) = data.split_first() else {
        return;
    };
    let chunk_size = 1024 << (first >> 4);
    let _ = mlless_store::memcached::fuzzing::decode_head(u32::from(first & 3), value, chunk_size);
    let _ = mlless_store::memcached::fuzzing::parse_index(value);
});
