//! Operations on whole parameter vectors: averaging replicas, applying the mean of deltas.

use crate::sparse::{SparseError, SparseVector};

/// The element-wise mean of replicas of one model, accumulated in f64.
///
/// An empty slice gives an empty vector; one replica is returned unchanged.
///
/// # Panics
/// Panics if the replicas differ in length (they are not replicas of one model).
pub fn average(replicas: &[&[f32]]) -> Vec<f32> {
    let Some(first) = replicas.first() else {
        return Vec::new();
    };
    let dim = first.len();
    if let Some(bad) = replicas.iter().find(|r| r.len() != dim) {
        panic!(
            "average: replicas differ in length ({dim} and {})",
            bad.len()
        );
    }
    let mut sum: Vec<f64> = first.iter().map(|&x| f64::from(x)).collect();
    for replica in &replicas[1..] {
        for (s, &x) in sum.iter_mut().zip(replica.iter()) {
            *s += f64::from(x);
        }
    }
    let n = replicas.len() as f64;
    sum.into_iter().map(|s| (s / n) as f32).collect()
}

/// Adds the mean of `deltas`, `(1/n) Σ_k deltas[k]`, to `params`, with `n = deltas.len()`
/// (empty deltas count: a worker with nothing to send still took part in the step).
///
/// Deterministic: it adds [`mean_of`]`(deltas)`, so replicas that apply the same deltas in the
/// same order stay bit-identical, and adding a mean computed elsewhere (by an all-reduce
/// leader, or chunk by chunk in a scatter-reduce) gives the same bits. With one delta this is
/// bit-for-bit `params[j] += delta[j]`, the plain single-worker loop.
///
/// # Panics
/// Panics if an index is out of bounds; use [`try_apply_mean`] for updates received from
/// elsewhere.
pub fn apply_mean(params: &mut [f32], deltas: &[&SparseVector]) {
    match deltas {
        [] => {}
        [single] => single.scaled_add_to(params, 1.0),
        _ => mean_of(deltas).scaled_add_to(params, 1.0),
    }
}

/// The mean of `deltas`, `(1/n) Σ_k deltas[k]` with `n = deltas.len()`, over the union of their
/// indices.
///
/// Per coordinate the deltas are summed in f64 in the given order and divided by `n` once, so
/// the same deltas in the same order give the same bits wherever the mean is computed.
///
/// The deltas are sorted, so the index space is swept in blocks of 32K coordinates:
/// each delta's entries of the block (a contiguous run of it) are added into a small dense
/// scratch that stays in the L2 cache, whose touched coordinates a bitmap then gives back in
/// order. O(N + blocks visited · (n + 512)) for N stored entries, with no
/// allocation the size of the model and no hashing or heap; blocks no delta has an entry in
/// are skipped.
pub fn mean_of(deltas: &[&SparseVector]) -> SparseVector {
    let n = deltas.len() as f64;
    let total: usize = deltas.iter().map(|d| d.nnz()).sum();
    let mut indices = Vec::with_capacity(total);
    let mut values = Vec::with_capacity(total);
    // -0.0 is the additive identity of every f64 (-0.0 + x is x, -0.0 included): each sum has
    // the bits of the plain sum that starts from its first value.
    let mut sums = vec![-0.0_f64; MEAN_BLOCK];
    let mut touched = vec![0_u64; MEAN_BLOCK / 64];
    let mut cursors = vec![0_usize; deltas.len()];
    // Block by block, from the one of the lowest index not consumed yet.
    while let Some(next) = deltas
        .iter()
        .zip(&cursors)
        .filter_map(|(d, &c)| d.indices().get(c))
        .min()
    {
        let base = *next as usize & !(MEAN_BLOCK - 1);
        let end = base as u64 + MEAN_BLOCK as u64;
        for (delta, cursor) in deltas.iter().zip(cursors.iter_mut()) {
            let (idx, vals) = (&delta.indices()[*cursor..], &delta.values()[*cursor..]);
            let len = idx.partition_point(|&i| u64::from(i) < end);
            for (&i, &v) in idx[..len].iter().zip(&vals[..len]) {
                let k = i as usize - base;
                sums[k] += f64::from(v);
                touched[k / 64] |= 1 << (k % 64);
            }
            *cursor += len;
        }
        for (w, word) in touched.iter_mut().enumerate() {
            let mut bits = std::mem::take(word);
            while bits != 0 {
                let k = w * 64 + bits.trailing_zeros() as usize;
                bits &= bits - 1;
                // Below the largest index of a delta, so it fits a u32.
                indices.push((base + k) as u32);
                values.push((std::mem::replace(&mut sums[k], -0.0) / n) as f32);
            }
        }
    }
    SparseVector::from_sorted_unchecked(indices, values)
}

/// Coordinates per block of [`mean_of`]'s sweep: a 256 KB scratch of f64 sums, within the L2
/// cache (a power of two).
const MEAN_BLOCK: usize = 1 << 15;

/// The reference of [`mean_of`]: a k-way merge of `deltas` by (index, position in `deltas`),
/// so that equal indices pop in order, each sum starting from its first value.
#[cfg(test)]
fn merged_mean(deltas: &[&SparseVector]) -> SparseVector {
    use std::cmp::Reverse;
    use std::collections::BinaryHeap;
    let n = deltas.len() as f64;
    let mut out = SparseVector::with_capacity(deltas.iter().map(|d| d.nnz()).max().unwrap_or(0));
    let mut cursors = vec![0_usize; deltas.len()];
    let mut heap: BinaryHeap<Reverse<(u32, usize)>> = deltas
        .iter()
        .enumerate()
        .filter_map(|(k, d)| d.indices().first().map(|&i| Reverse((i, k))))
        .collect();
    let mut advance = |k: usize, heap: &mut BinaryHeap<Reverse<(u32, usize)>>| {
        let c = cursors[k];
        cursors[k] += 1;
        if let Some(&next) = deltas[k].indices().get(c + 1) {
            heap.push(Reverse((next, k)));
        }
        f64::from(deltas[k].values()[c])
    };
    while let Some(Reverse((index, k))) = heap.pop() {
        let mut sum = advance(k, &mut heap);
        while let Some(&Reverse((next, k2))) = heap.peek() {
            if next != index {
                break;
            }
            heap.pop();
            sum += advance(k2, &mut heap);
        }
        out.push(index, (sum / n) as f32);
    }
    out
}

/// [`apply_mean`] for untrusted deltas: checks every index first and leaves `params` unchanged
/// on error.
pub fn try_apply_mean(params: &mut [f32], deltas: &[&SparseVector]) -> Result<(), SparseError> {
    for d in deltas {
        d.check_dim(params.len())?;
    }
    apply_mean(params, deltas);
    Ok(())
}

#[cfg(test)]
mod tests {
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};

    use super::*;

    fn random_delta(rng: &mut StdRng, dim: u32, nnz: usize) -> SparseVector {
        SparseVector::from_pairs(
            (0..nnz)
                .map(|_| (rng.random_range(0..dim), rng.random_range(-1.0..1.0)))
                .collect(),
        )
    }

    #[test]
    fn average_is_elementwise_mean() {
        let a = [1.0_f32, 2.0, 3.0];
        let b = [3.0_f32, 2.0, -3.0];
        let c = [2.0_f32, 5.0, 0.0];
        assert_eq!(average(&[&a, &b, &c]), vec![2.0, 3.0, 0.0]);
        assert_eq!(average(&[&a]), a.to_vec());
        assert!(average(&[]).is_empty());
        // f64 accumulation: f32 would lose the small values next to the large ones.
        let big = [1.0e8_f32, 1.0];
        let small = [1.0_f32, 1.0];
        assert_eq!(
            average(&[&big, &small, &small, &small]),
            vec![25_000_000.75, 1.0]
        );
    }

    #[test]
    #[should_panic(expected = "differ in length")]
    fn average_rejects_mismatched_replicas() {
        average(&[&[1.0, 2.0], &[1.0]]);
    }

    #[test]
    fn mean_of_chunks_is_the_mean_of_the_whole() {
        let mut rng = StdRng::seed_from_u64(9);
        let deltas: Vec<SparseVector> = (0..5).map(|_| random_delta(&mut rng, 300, 80)).collect();
        let refs: Vec<&SparseVector> = deltas.iter().collect();
        let mut applied = vec![0.5_f32; 300];
        apply_mean(&mut applied, &refs);
        let whole = mean_of(&refs);
        let mut added = vec![0.5_f32; 300];
        whole.scaled_add_to(&mut added, 1.0);
        assert_eq!(applied, added);
        // Chunk by chunk, as a scatter-reduce computes it: the same bits.
        let bounds = [0, 7, 150, 151, 300];
        let split: Vec<Vec<SparseVector>> =
            deltas.iter().map(|d| d.split_at_bounds(&bounds)).collect();
        let chunks: Vec<SparseVector> = (0..4)
            .map(|c| mean_of(&split.iter().map(|s| &s[c]).collect::<Vec<_>>()))
            .collect();
        assert_eq!(SparseVector::concat(chunks).unwrap(), whole);
        assert!(mean_of(&[]).is_empty());
    }

    #[test]
    fn the_blocked_sum_and_the_merge_give_the_same_bits() {
        let mut rng = StdRng::seed_from_u64(12);
        // From one entry in a block to every coordinate of several blocks, 1 to 9 deltas, and
        // indices up to the top of the u32 range.
        for (dim, nnz) in [
            (100_000, 20),
            (5_000, 300),
            (1_000, 400),
            (200, 200),
            (300_000, 40_000),
            (u32::MAX, 50),
        ] {
            for n in [1, 2, 4, 9] {
                let mut deltas: Vec<SparseVector> =
                    (0..n).map(|_| random_delta(&mut rng, dim, nnz)).collect();
                // Signed zeros and magnitudes far apart, where the order of a sum shows.
                let (indices, mut values) = deltas[0].clone().into_parts();
                for (k, v) in values.iter_mut().enumerate() {
                    *v = match k % 4 {
                        0 => -0.0,
                        1 => 3.0e7,
                        _ => *v,
                    };
                }
                deltas[0] = SparseVector::from_parts(indices, values).expect("ascending");
                if n > 1 {
                    deltas[n - 1] = SparseVector::new();
                }
                let refs: Vec<&SparseVector> = deltas.iter().collect();
                let (blocked, merged) = (mean_of(&refs), merged_mean(&refs));
                assert_eq!(blocked.indices(), merged.indices(), "{dim} {nnz} {n}");
                let bits =
                    |v: &SparseVector| v.values().iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&blocked), bits(&merged), "{dim} {nnz} {n}");
            }
        }
        let top = SparseVector::from_parts(vec![0, u32::MAX], vec![1.0, 2.0]).unwrap();
        assert_eq!(mean_of(&[&top, &SparseVector::new()]).values(), &[0.5, 1.0]);
    }

    #[test]
    fn one_worker_is_bit_for_bit_the_plain_loop() {
        let mut rng = StdRng::seed_from_u64(4);
        let mut plain: Vec<f32> = (0..50).map(|_| rng.random_range(-1.0..1.0)).collect();
        plain[7] = -0.0;
        let mut mean = plain.clone();
        for _ in 0..100 {
            let mut d = random_delta(&mut rng, 50, 10);
            if d.indices().contains(&7) {
                let pos = d.indices().iter().position(|&i| i == 7).unwrap();
                d.values_mut()[pos] = -0.0;
            }
            for (i, v) in d.iter() {
                plain[i as usize] += v;
            }
            apply_mean(&mut mean, &[&d]);
        }
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&plain), bits(&mean));
    }

    #[test]
    fn several_workers_apply_the_ordered_f64_mean() {
        let mut rng = StdRng::seed_from_u64(8);
        let dim = 64;
        let deltas: Vec<SparseVector> = (0..5)
            .map(|k| random_delta(&mut rng, dim, 20 + 5 * k))
            .chain([SparseVector::new()])
            .collect();
        let refs: Vec<&SparseVector> = deltas.iter().collect();
        let start: Vec<f32> = (0..dim).map(|j| j as f32 * 0.1).collect();
        let mut params = start.clone();
        apply_mean(&mut params, &refs);

        let mut want = start.clone();
        for (j, w) in want.iter_mut().enumerate() {
            let mut sum: Option<f64> = None;
            for d in &deltas {
                if let Ok(pos) = d.indices().binary_search(&(j as u32)) {
                    let v = f64::from(d.values()[pos]);
                    sum = Some(sum.map_or(v, |s| s + v));
                }
            }
            if let Some(s) = sum {
                *w += (s / deltas.len() as f64) as f32;
            }
        }
        assert_eq!(params, want);

        // Replicas applying the same deltas stay identical; the result is the mean, not the sum.
        let mut again = start.clone();
        apply_mean(&mut again, &refs);
        assert_eq!(params, again);
        let one = SparseVector::from_pairs(vec![(3, 6.0)]);
        let mut p = vec![0.0; 4];
        apply_mean(&mut p, &[&one, &SparseVector::new(), &one]);
        assert_eq!(p, vec![0.0, 0.0, 0.0, 4.0]);
    }

    #[test]
    fn try_apply_mean_checks_bounds_first() {
        let ok = SparseVector::from_pairs(vec![(0, 1.0)]);
        let bad = SparseVector::from_pairs(vec![(1, 1.0), (4, 1.0)]);
        let mut params = vec![0.0; 4];
        assert!(try_apply_mean(&mut params, &[&ok, &bad]).is_err());
        assert_eq!(params, vec![0.0; 4]);
        try_apply_mean(&mut params, &[&ok, &ok]).unwrap();
        assert_eq!(params, vec![1.0, 0.0, 0.0, 0.0]);
    }
}
