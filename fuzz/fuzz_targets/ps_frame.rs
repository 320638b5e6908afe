#![no_main]
use libfuzzer_sys::fuzz_target;
use mlless_store::ps::wire::{Request, Response, decode_frame};

// The parameter server's frame decoder, on what a client (or a server) may send: a frame whose
// header, length, checksum or body is anything. Also with the checksum made right, so that the
// body's decoder is reached.
fuzz_target!(|data: &[u8]| {
    let _ = decode_frame::<Request>(data, 1 << 20);
    let _ = decode_frame::<Response>(data, 1 << 20);
    if data.len() >= 14 {
        let mut frame = data.to_vec();
        let body_len = u32::try_from(frame.len() - 14).unwrap_or(u32::MAX);
        frame[0..4].copy_from_slice(b"MLPS");
        frame[4..6].copy_from_slice(&1u16.to_le_bytes());
        frame[6..10].copy_from_slice(&body_len.to_le_bytes());
        let crc = crc32fast::hash(&frame[14..]);
        frame[10..14].copy_from_slice(&crc.to_le_bytes());
        let _ = decode_frame::<Request>(&frame, 1 << 20);
        let _ = decode_frame::<Response>(&frame, 1 << 20);
    }
});
