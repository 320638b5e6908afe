//! Shuffling sparse rows with bounded memory, whatever the input's size: an external sort.
//!
//! Each row of a shuffled input gets a key, a seeded hash of its position in the input: the
//! byte offset at which its line starts, so that whoever reads any part of the input can tell
//! (the SplitMix64 stream of the seed, at that offset). The shuffled order is the rows sorted
//! by key, so it depends only on the seed and the input, never on the memory budget or on how
//! the input is read: the same rows come out in the same order whether they fitted in memory or
//! went through disk. Keys are
//! uniform and independent, so the order is a uniformly random permutation (two equal keys keep
//! their input order; at 45 million rows the chance that any two are equal is 6·10⁻⁵).
//!
//! Rows are held in memory up to the budget. Then the largest held input is sorted and written
//! to a temporary file as a *run*, with the offset at which each of [`KEY_RANGES`] ranges of keys
//! (the top bits of the key) starts. Reading back takes consecutive key ranges together, as many
//! as the budget holds, reads those ranges from every run, sorts them and yields their rows: the
//! data goes to disk once and comes back once. An input that is not shuffled (a test file) is
//! set aside in its order and read back in it. Memory stays near the budget as long as one key
//! range of the whole input (1/16384 of it) fits in it: up to about 4 TB of rows for a 256 MB
//! budget.
//!
//! ```
//! use mlless_data::external_shuffle::ExternalShuffle;
//! use mlless_data::{RowSink, SparseBatch};
//!
//! let dir = tempfile::tempdir()?;
//! // A budget of 1 kB: the 1,000 rows go to disk in several runs.
//! let mut shuffle = ExternalShuffle::new(7, 1_000, dir.path(), vec![true]);
//! let mut rows = SparseBatch::new();
//! for i in 0..1_000u32 {
//!     rows.push_row(i as f32, &[i], &[1.0]);
//! }
//! let starts: Vec<u64> = (0..1_000).map(|i| 10 * i).collect(); // the lines' byte offsets
//! shuffle.take(0, &mut rows, &starts)?;
//! let mut shuffled = shuffle.finish()?;
//! let mut reader = shuffled.read(0);
//! let mut labels = Vec::new();
//! while let Some(row) = reader.next_row()? {
//!     labels.push(row.label as u32);
//! }
//! assert_ne!(labels, (0..1_000).collect::<Vec<_>>());
//! labels.sort();
//! assert_eq!(labels, (0..1_000).collect::<Vec<_>>());
//! # Ok::<(), std::io::Error>(())
//! ```

use std::fs::File;
use std::io::{self, BufReader, BufWriter, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use mlless_core::SparseBatch;

use crate::parse::RowSink;

/// Key ranges of a run: the top 14 bits of a key say which range it is in.
pub const KEY_RANGES: usize = 1 << 14;

/// Bytes of a row on disk besides its entries: key, label and number of entries.
const ROW_HEADER: usize = 8 + 4 + 4;

/// The shuffle key of the row at `position` (the byte offset of its line) of a shuffled input,
/// for `seed`.
pub fn row_key(seed: u64, position: u64) -> u64 {
    mix(mix(seed).wrapping_add(position.wrapping_mul(0x9E37_79B9_7F4A_7C15)))
}

/// The position of the row at byte `offset` of file `part` of an input of several files (the
/// parts of a prefix, in name order): `part · 2⁴⁰ + offset`, distinct for every row as long as
/// each file is under 1 TiB; the first file's positions are its offsets.
pub fn part_position(part: u32, offset: u64) -> u64 {
    (u64::from(part) << 40).wrapping_add(offset)
}

/// SplitMix64's output function: a bijection of `u64` that mixes every bit into every bit.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The key range of `key`.
fn key_range(key: u64) -> usize {
    (key >> (64 - KEY_RANGES.trailing_zeros())) as usize
}

/// Bytes a row of `entries` entries takes, held or on disk.
fn row_bytes(entries: usize) -> usize {
    ROW_HEADER + 8 * entries
}

/// Rows of one input held in memory, with their keys.
#[derive(Default)]
struct Held {
    rows: SparseBatch,
    keys: Vec<u64>,
}

impl Held {
    fn bytes(&self) -> usize {
        ROW_HEADER * self.keys.len() + 8 * self.rows.indices.len()
    }

    /// The order of the held rows: by key for a shuffled input (ties in input order), else as
    /// they came.
    fn order(&self, shuffled: bool) -> Vec<u32> {
        let mut order: Vec<u32> = (0..self.keys.len() as u32).collect();
        if shuffled {
            order.sort_by_key(|&r| self.keys[r as usize]);
        }
        order
    }

    fn clear(&mut self) {
        self.rows.labels.clear();
        self.rows.offsets.truncate(1);
        self.rows.indices.clear();
        self.rows.values.clear();
        self.keys.clear();
    }
}

/// A sorted run on disk: its file and where each key range starts in it (for an input that is
/// not shuffled, only where it ends).
struct Run {
    path: PathBuf,
    starts: Vec<u64>,
}

/// One input's rows: held, and on disk in runs.
struct Part {
    shuffled: bool,
    rows: u64,
    held: Held,
    runs: Vec<Run>,
}

/// A [`RowSink`] that shuffles the rows of some inputs and keeps the others in order, in bounded
/// memory, spilling to temporary files (see the module doc); [`finish`](Self::finish) it, then
/// read the rows back.
pub struct ExternalShuffle {
    seed: u64,
    budget: usize,
    parent: PathBuf,
    dir: Option<tempfile::TempDir>,
    parts: Vec<Part>,
}

impl ExternalShuffle {
    /// A shuffle that holds about `budget` bytes of rows in memory (at least one chunk of rows),
    /// writes its runs to a temporary directory in `dir` (removed when it is dropped), and
    /// shuffles input `i` with `seed` if `shuffled[i]`, else keeps its order.
    pub fn new(seed: u64, budget: usize, dir: &Path, shuffled: Vec<bool>) -> Self {
        let parts = shuffled
            .into_iter()
            .map(|shuffled| Part {
                shuffled,
                rows: 0,
                held: Held::default(),
                runs: Vec::new(),
            })
            .collect();
        Self {
            seed,
            budget,
            parent: dir.to_path_buf(),
            dir: None,
            parts,
        }
    }

    /// Bytes written to temporary files so far.
    pub fn spilled_bytes(&self) -> u64 {
        self.parts
            .iter()
            .flat_map(|p| &p.runs)
            .map(|r| r.starts.last().copied().unwrap_or(0))
            .sum()
    }

    fn held_bytes(&self) -> usize {
        self.parts.iter().map(|p| p.held.bytes()).sum()
    }

    /// Writes the held rows of input `part` as a run.
    fn spill(&mut self, part: usize) -> io::Result<()> {
        if self.dir.is_none() {
            let dir = tempfile::Builder::new()
                .prefix("mlless-shuffle-")
                .tempdir_in(&self.parent)
                .map_err(|e| {
                    io::Error::new(
                        e.kind(),
                        format!(
                            "creating a temporary directory in {}: {e}",
                            self.parent.display()
                        ),
                    )
                })?;
            self.dir = Some(dir);
        }
        let Some(dir) = self.dir.as_ref() else {
            unreachable!("created above")
        };
        let state = &mut self.parts[part];
        let path = dir
            .path()
            .join(format!("input{part}-run{}.rows", state.runs.len()));
        let order = state.held.order(state.shuffled);
        let mut out = BufWriter::with_capacity(1 << 20, File::create(&path)?);
        let mut starts = Vec::with_capacity(if state.shuffled { KEY_RANGES + 1 } else { 2 });
        starts.push(0);
        let mut offset = 0u64;
        let mut scratch = Vec::with_capacity(4096);
        for &r in &order {
            let key = state.held.keys[r as usize];
            if state.shuffled {
                // Every range up to this key's starts at or before this row.
                while starts.len() <= key_range(key) {
                    starts.push(offset);
                }
            }
            let (label, indices, values) = state.held.rows.row(r as usize);
            scratch.clear();
            scratch.extend_from_slice(&key.to_le_bytes());
            scratch.extend_from_slice(&label.to_le_bytes());
            scratch.extend_from_slice(&(indices.len() as u32).to_le_bytes());
            scratch.extend(indices.iter().flat_map(|i| i.to_le_bytes()));
            scratch.extend(values.iter().flat_map(|v| v.to_le_bytes()));
            out.write_all(&scratch)?;
            offset += row_bytes(indices.len()) as u64;
        }
        let target = if state.shuffled { KEY_RANGES + 1 } else { 2 };
        while starts.len() < target {
            starts.push(offset);
        }
        out.into_inner()
            .map_err(io::IntoInnerError::into_error)?
            .sync_data()?;
        state.runs.push(Run { path, starts });
        state.held.clear();
        Ok(())
    }

    /// Ends the input: every input with runs has its held rows written as a last run; the
    /// others stay in memory. Returns what reads the rows back.
    pub fn finish(mut self) -> io::Result<Shuffled> {
        for part in 0..self.parts.len() {
            if !self.parts[part].runs.is_empty() {
                if !self.parts[part].held.keys.is_empty() {
                    self.spill(part)?;
                }
                // The buffers' memory goes back before the runs are read.
                self.parts[part].held = Held::default();
            }
        }
        Ok(Shuffled {
            budget: self.budget,
            _dir: self.dir,
            parts: self.parts,
        })
    }
}

impl RowSink for ExternalShuffle {
    fn take(&mut self, part: usize, rows: &mut SparseBatch, starts: &[u64]) -> io::Result<()> {
        let Some(state) = self.parts.get_mut(part) else {
            return Err(io::Error::other(format!(
                "input {part} was not announced to the shuffle"
            )));
        };
        let seed = self.seed;
        for r in 0..rows.rows() {
            let (label, indices, values) = rows.row(r);
            state.held.rows.push_row(label, indices, values);
            let key = if state.shuffled {
                let position = starts.get(r).copied().ok_or_else(|| {
                    io::Error::other("a row was handed to the shuffle without its position")
                })?;
                row_key(seed, position)
            } else {
                state.rows
            };
            state.held.keys.push(key);
            state.rows += 1;
        }
        if self.held_bytes() >= self.budget {
            let largest = (0..self.parts.len())
                .max_by_key(|&p| self.parts[p].held.bytes())
                .unwrap_or(part);
            self.spill(largest)?;
        }
        Ok(())
    }
}

/// The rows of an [`ExternalShuffle`] once every input was read: [`read`](Self::read) each
/// input's rows in their final order. The temporary files go when this is dropped.
pub struct Shuffled {
    budget: usize,
    _dir: Option<tempfile::TempDir>,
    parts: Vec<Part>,
}

impl Shuffled {
    /// Rows of input `part`.
    pub fn samples(&self, part: usize) -> u64 {
        self.parts.get(part).map_or(0, |p| p.rows)
    }

    /// Whether some rows went to temporary files.
    pub fn spilled(&self) -> bool {
        self.parts.iter().any(|p| !p.runs.is_empty())
    }

    /// Reads the rows of input `part` in their final order (none for an input that does not
    /// exist).
    pub fn read(&mut self, part: usize) -> RowReader<'_> {
        let budget = self.budget;
        let Some(state) = self.parts.get_mut(part) else {
            return RowReader(Source::Held {
                held: None,
                order: Vec::new(),
                next: 0,
            });
        };
        if state.runs.is_empty() {
            let order = state.held.order(state.shuffled);
            return RowReader(Source::Held {
                held: Some(&state.held),
                order,
                next: 0,
            });
        }
        if !state.shuffled {
            return RowReader(Source::InOrder {
                runs: &state.runs,
                run: 0,
                file: None,
                row: DecodedRow::default(),
            });
        }
        RowReader(Source::Windows(Box::new(Windows {
            runs: &state.runs,
            budget,
            next_range: 0,
            bytes: Vec::new(),
            entries: Vec::new(),
            next: 0,
            row: DecodedRow::default(),
        })))
    }
}

/// One row read back.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Row<'a> {
    /// The label, as the sink received it.
    pub label: f32,
    /// The feature indices, ascending.
    pub indices: &'a [u32],
    /// The values of those features.
    pub values: &'a [f32],
}

/// A row decoded from disk into reused buffers.
#[derive(Default)]
struct DecodedRow {
    label: f32,
    indices: Vec<u32>,
    values: Vec<f32>,
}

impl DecodedRow {
    /// Decodes the row at the start of `bytes` (entries after the header); returns its size.
    fn decode(&mut self, bytes: &[u8]) -> io::Result<usize> {
        let corrupt = || io::Error::new(io::ErrorKind::InvalidData, "a run file is cut short");
        let header = bytes.get(..ROW_HEADER).ok_or_else(corrupt)?;
        self.label = f32::from_le_bytes(header[8..12].try_into().map_err(|_| corrupt())?);
        let entries = u32::from_le_bytes(header[12..16].try_into().map_err(|_| corrupt())?);
        let size = row_bytes(entries as usize);
        let body = bytes.get(ROW_HEADER..size).ok_or_else(corrupt)?;
        let (indices, values) = body.split_at(4 * entries as usize);
        self.indices.clear();
        self.indices.extend(
            indices
                .chunks_exact(4)
                .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])),
        );
        self.values.clear();
        self.values.extend(
            values
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])),
        );
        Ok(size)
    }

    fn row(&self) -> Row<'_> {
        Row {
            label: self.label,
            indices: &self.indices,
            values: &self.values,
        }
    }
}

/// Consecutive key ranges of every run of a shuffled input, read, sorted and yielded in turn.
struct Windows<'s> {
    runs: &'s [Run],
    budget: usize,
    next_range: usize,
    /// The rows of the current window, run after run.
    bytes: Vec<u8>,
    /// `(key, offset in bytes)` of each row of the window, sorted.
    entries: Vec<(u64, usize)>,
    next: usize,
    row: DecodedRow,
}

impl Windows<'_> {
    /// Reads the next window: key ranges from `next_range` while they fit in the budget (at
    /// least one). Returns `false` when every range was read.
    fn load(&mut self) -> io::Result<bool> {
        if self.next_range >= KEY_RANGES {
            return Ok(false);
        }
        let span = |range_end: usize, start: usize| -> u64 {
            self.runs
                .iter()
                .map(|r| r.starts[range_end] - r.starts[start])
                .sum()
        };
        let start = self.next_range;
        let mut end = start + 1;
        while end < KEY_RANGES && span(end + 1, start) <= self.budget as u64 {
            end += 1;
        }
        self.bytes.clear();
        self.bytes.reserve_exact(span(end, start) as usize);
        for run in self.runs {
            let (from, to) = (run.starts[start], run.starts[end]);
            if from == to {
                continue;
            }
            let mut file = File::open(&run.path)?;
            file.seek(SeekFrom::Start(from))?;
            let len = self.bytes.len();
            self.bytes.resize(len + (to - from) as usize, 0);
            file.read_exact(&mut self.bytes[len..])?;
        }
        self.entries.clear();
        let mut offset = 0;
        while offset < self.bytes.len() {
            let head = self.bytes.get(offset..offset + ROW_HEADER).ok_or_else(|| {
                io::Error::new(io::ErrorKind::InvalidData, "a run file is cut short")
            })?;
            let key = u64::from_le_bytes(head[..8].try_into().unwrap_or_default());
            let entries = u32::from_le_bytes(head[12..16].try_into().unwrap_or_default());
            self.entries.push((key, offset));
            offset += row_bytes(entries as usize);
        }
        // Stable: equal keys keep the order of the runs, which is the input's.
        self.entries.sort_by_key(|&(key, _)| key);
        self.next = 0;
        self.next_range = end;
        Ok(true)
    }
}

/// Reads the rows of one input of a [`Shuffled`] in their final order.
pub struct RowReader<'s>(Source<'s>);

/// Where a [`RowReader`] reads from.
enum Source<'s> {
    /// Rows that stayed in memory.
    Held {
        held: Option<&'s Held>,
        order: Vec<u32>,
        next: usize,
    },
    /// Runs of an input kept in order, read one after the other.
    InOrder {
        runs: &'s [Run],
        run: usize,
        file: Option<BufReader<File>>,
        row: DecodedRow,
    },
    /// Windows of key ranges of a shuffled input.
    Windows(Box<Windows<'s>>),
}

impl RowReader<'_> {
    /// The next row, `None` after the last.
    pub fn next_row(&mut self) -> io::Result<Option<Row<'_>>> {
        match &mut self.0 {
            Source::Held { held, order, next } => {
                let (Some(held), Some(&r)) = (held, order.get(*next)) else {
                    return Ok(None);
                };
                *next += 1;
                let (label, indices, values) = held.rows.row(r as usize);
                Ok(Some(Row {
                    label,
                    indices,
                    values,
                }))
            }
            Source::InOrder {
                runs,
                run,
                file,
                row,
            } => loop {
                if file.is_none() {
                    let Some(next) = runs.get(*run) else {
                        return Ok(None);
                    };
                    *file = Some(BufReader::with_capacity(1 << 20, File::open(&next.path)?));
                }
                let Some(reader) = file.as_mut() else {
                    unreachable!("opened above")
                };
                let mut header = [0u8; ROW_HEADER];
                match reader.read_exact(&mut header) {
                    Ok(()) => {}
                    Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => {
                        *file = None;
                        *run += 1;
                        continue;
                    }
                    Err(e) => return Err(e),
                }
                let entries = u32::from_le_bytes([header[12], header[13], header[14], header[15]]);
                let mut bytes = vec![0u8; row_bytes(entries as usize)];
                bytes[..ROW_HEADER].copy_from_slice(&header);
                reader.read_exact(&mut bytes[ROW_HEADER..])?;
                row.decode(&bytes)?;
                return Ok(Some(row.row()));
            },
            Source::Windows(windows) => {
                while windows.next >= windows.entries.len() {
                    if !windows.load()? {
                        return Ok(None);
                    }
                }
                let (_, offset) = windows.entries[windows.next];
                windows.next += 1;
                windows.row.decode(&windows.bytes[offset..])?;
                Ok(Some(windows.row.row()))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Rows `0..n` of one entry each, labelled by their input position.
    fn rows(n: u32) -> SparseBatch {
        let mut rows = SparseBatch::new();
        for i in 0..n {
            let entries: Vec<u32> = (0..i % 5).map(|k| i * 8 + k).collect();
            let values: Vec<f32> = entries.iter().map(|&e| e as f32 / 3.0).collect();
            rows.push_row(i as f32, &entries, &values);
        }
        rows
    }

    /// The rows of every input read back, after taking `n` rows in chunks of `chunk`.
    fn shuffle(
        n: u32,
        chunk: usize,
        budget: usize,
        shuffled: Vec<bool>,
    ) -> (Vec<Vec<SparseBatch>>, bool) {
        let dir = tempfile::tempdir().unwrap();
        let parts = shuffled.len();
        let mut shuffle = ExternalShuffle::new(11, budget, dir.path(), shuffled);
        let all = rows(n);
        for part in 0..parts {
            let mut start = 0;
            while start < all.rows() {
                let end = (start + chunk).min(all.rows());
                let mut piece = SparseBatch::new();
                for r in start..end {
                    let (l, i, v) = all.row(r);
                    piece.push_row(l, i, v);
                }
                let starts: Vec<u64> = (start as u64..end as u64).map(|r| 17 * r).collect();
                shuffle.take(part, &mut piece, &starts).unwrap();
                start = end;
            }
        }
        let mut shuffled = shuffle.finish().unwrap();
        let spilled = shuffled.spilled();
        let mut out = Vec::new();
        for part in 0..parts {
            assert_eq!(shuffled.samples(part), u64::from(n));
            let mut reader = shuffled.read(part);
            let mut back = SparseBatch::new();
            while let Some(row) = reader.next_row().unwrap() {
                back.push_row(row.label, row.indices, row.values);
            }
            out.push(vec![back]);
        }
        (out, spilled)
    }

    #[test]
    fn the_order_is_the_same_in_memory_and_through_disk() {
        let (in_memory, spilled) = shuffle(5_000, 300, usize::MAX, vec![true, false]);
        assert!(!spilled);
        let (on_disk, spilled) = shuffle(5_000, 300, 4_000, vec![true, false]);
        assert!(spilled);
        assert_eq!(in_memory, on_disk);

        // The shuffled input holds every row once, rows whole, not in input order; the other is
        // in input order.
        let original = rows(5_000);
        let shuffled = &in_memory[0][0];
        let mut labels: Vec<u32> = shuffled.labels.iter().map(|&l| l as u32).collect();
        assert_ne!(labels, (0..5_000).collect::<Vec<_>>());
        for r in 0..shuffled.rows() {
            let (label, indices, values) = shuffled.row(r);
            assert_eq!(original.row(label as usize), (label, indices, values));
        }
        labels.sort_unstable();
        assert_eq!(labels, (0..5_000).collect::<Vec<_>>());
        assert_eq!(&in_memory[1][0], &original);
    }

    #[test]
    fn positions_are_spread_evenly() {
        // Each input decile's rows are spread over the output deciles: a chi-square test on the
        // 10 × 10 table (81 degrees of freedom; 1% critical value 113.5).
        let n = 20_000u32;
        let (out, _) = shuffle(n, 1_000, 50_000, vec![true]);
        let mut table = [[0u32; 10]; 10];
        for (position, &label) in out[0][0].labels.iter().enumerate() {
            let from = (label as u32 * 10 / n) as usize;
            let to = position * 10 / n as usize;
            table[from][to] += 1;
        }
        let expected = f64::from(n) / 100.0;
        let chi2: f64 = table
            .iter()
            .flatten()
            .map(|&c| (f64::from(c) - expected).powi(2) / expected)
            .sum();
        assert!(chi2 < 113.5, "chi-square {chi2} over the position deciles");
    }

    #[test]
    fn a_cut_run_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let mut shuffle = ExternalShuffle::new(1, 100, dir.path(), vec![true]);
        let starts: Vec<u64> = (0..500).collect();
        shuffle.take(0, &mut rows(500), &starts).unwrap();
        let mut shuffled = shuffle.finish().unwrap();
        let run = &shuffled.parts[0].runs[0];
        let len = std::fs::metadata(&run.path).unwrap().len();
        std::fs::OpenOptions::new()
            .write(true)
            .open(&run.path)
            .unwrap()
            .set_len(len - 3)
            .unwrap();
        let mut reader = shuffled.read(0);
        let error = loop {
            match reader.next_row() {
                Ok(Some(_)) => {}
                Ok(None) => panic!("a cut run was read to its end"),
                Err(e) => break e,
            }
        };
        assert_eq!(error.kind(), io::ErrorKind::UnexpectedEof, "{error}");
    }
}
