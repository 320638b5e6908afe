#![no_main]
use libfuzzer_sys::fuzz_target;
use mlless_core::WireDelta;

// The first two bytes give the model's dimension; the rest is a postcard `WireDelta`.
fuzz_target!(|data: &[u8]| {
    let [a, b, rest @ ..] = data else { return };
    let dim = usize::from(u16::from_le_bytes([*a, *b]));
    if let Ok(delta) = postcard::from_bytes::<WireDelta>(rest)
        && let Ok(sparse) = delta.into_sparse(dim)
    {
        // What a worker does with it: add it to its replica.
        let mut params = vec![0.0f32; dim];
        sparse.scaled_add_to(&mut params, 0.5);
    }
});
