//! Tests of the distributed preparation's tasks: byte ranges, buckets, the shuffle.

use super::*;

#[test]
fn segments_cover_every_byte_of_every_part_once_in_order() {
    let objects: Vec<(String, u64)> = [7u64, 1, 30, 2]
        .iter()
        .enumerate()
        .map(|(i, &size)| (format!("part-{i}"), size))
        .collect();
    for maps in [1, 2, 3, 5, 40] {
        let tasks = segments(&objects, maps);
        assert_eq!(tasks.len(), maps as usize);
        let mut covered: Vec<Vec<u64>> = vec![Vec::new(); objects.len()];
        for segment in tasks.iter().flatten() {
            assert!(segment.start < segment.end, "{maps}: an empty segment");
            assert_eq!(segment.key, objects[segment.part as usize].0);
            covered[segment.part as usize].extend(segment.start..segment.end);
        }
        for (part, bytes) in covered.iter().enumerate() {
            let all: Vec<u64> = (0..objects[part].1).collect();
            assert_eq!(bytes, &all, "{maps} tasks: part {part}");
        }
    }
}

#[test]
fn buckets_keep_the_order_of_keys() {
    let mut last = 0;
    for key in [0, 1, u64::MAX / 3, u64::MAX / 2, u64::MAX - 1, u64::MAX] {
        let b = bucket_of(key, 7);
        assert!(b >= last && b < 7, "{key}: {b}");
        last = b;
    }
    assert_eq!((bucket_of(0, 7), bucket_of(u64::MAX, 7)), (0, 6));
}

#[test]
fn a_dealer_writes_each_bucket_in_chunks_in_input_order() {
    let mut written: Vec<(usize, BucketChunk)> = Vec::new();
    let mut dealer = Dealer {
        seed: 3,
        base: 1_000,
        buckets: vec![BucketChunk::default(); 5],
        rows: vec![0; 5],
        held: 0,
        budget: 200,
        flush: |b, chunk| {
            written.push((b, chunk));
            Ok(())
        },
    };
    for part in 0..10u64 {
        let mut rows = SparseBatch::new();
        let mut starts = Vec::new();
        for r in 0..7u64 {
            rows.push_row(1.0, &[r as u32], &[1.0]);
            starts.push(100 * (part * 7 + r));
        }
        dealer.take(0, &mut rows, &starts).expect("dealt");
    }
    dealer.flush_all().expect("flushed");
    let Dealer { rows, .. } = dealer;
    assert_eq!(rows.iter().sum::<u64>(), 70);
    assert!(written.len() > 5, "several flushes: {}", written.len());
    let mut seen = Vec::new();
    for (b, &count) in rows.iter().enumerate() {
        let positions: Vec<u64> = written
            .iter()
            .filter(|(w, _)| *w == b)
            .flat_map(|(_, c)| c.positions.clone())
            .collect();
        assert_eq!(positions.len() as u64, count, "bucket {b}");
        assert!(positions.is_sorted(), "bucket {b} in input order");
        for &p in &positions {
            assert_eq!(bucket_of(row_key(3, p), 5), b);
        }
        seen.extend(positions);
    }
    seen.sort_unstable();
    assert_eq!(seen, (0..70).map(|i| 1_000 + 100 * i).collect::<Vec<_>>());
}

/// The cuts of rows `first..last` of 23 rows (train 10, validation 5, test 8), batches of 4.
fn cuts(first: u64, last: u64) -> Vec<(usize, usize, usize, bool)> {
    let task = ShuffleReduceTask {
        data_url: String::new(),
        seed: 0,
        budget: 0,
        buckets: Vec::new(),
        first_row: first,
        bounds: [10, 15, 23],
        batch_size: 4,
        label_map: None,
        one_based: false,
        prefix: String::new(),
        ranges: None,
        out_key: String::new(),
        stop_key: None,
    };
    let mut cutter = Cutter::new(&task);
    let mut out = Vec::new();
    for g in first..last {
        if let Some((s, i, rows, whole)) = cutter.push(g as f32, &[], &[]) {
            out.push((s, i, rows.rows(), whole));
        }
    }
    out.extend(
        cutter
            .finish()
            .map(|(s, i, rows, whole)| (s, i, rows.rows(), whole)),
    );
    out
}

#[test]
fn the_cuts_of_neighbouring_tasks_join_into_the_whole_ones() {
    let whole = cuts(0, 23);
    // Train 4+4+2, validation 4+1, test 4+4.
    assert_eq!(
        whole,
        [
            (0, 0, 4, true),
            (0, 1, 4, true),
            (0, 2, 2, true),
            (2, 0, 4, true),
            (2, 1, 1, true),
            (1, 0, 4, true),
            (1, 1, 4, true)
        ]
    );
    for split in [1, 6, 10, 13, 20] {
        let (a, b) = (cuts(0, split), cuts(split, 23));
        let mut joined: std::collections::BTreeMap<(usize, usize), (usize, usize)> =
            Default::default();
        for (s, i, n, w) in a.iter().chain(&b) {
            let e = joined.entry((*s, *i)).or_default();
            e.0 += n;
            e.1 += usize::from(!w);
        }
        for (s, i, n, _) in &whole {
            let (rows, fragments) = joined[&(*s, *i)];
            assert_eq!(rows, *n, "split at {split}: {s}/{i}");
            assert!(
                fragments == 0 || fragments == 2,
                "split at {split}: {s}/{i}"
            );
        }
        assert_eq!(joined.len(), whole.len(), "split at {split}");
    }
}
