// Shared by the targets (included with `mod common`).
#![allow(dead_code)]

use std::io::Cursor;
use std::path::Path;

use mlless_data::{
    CsvHeader, CsvOptions, FORMAT_VERSION, InputFormat, LabelColumn, ParseOptions, parse_reader,
};

/// Parses `data` as `format`; the first byte picks the `--features` option (0: none).
pub fn parse(format: InputFormat, data: &[u8]) {
    let Some((&first, text)) = data.split_first() else {
        return;
    };
    let options = ParseOptions {
        features: (first != 0).then_some(u32::from(first) * 4),
        ..ParseOptions::default()
    };
    let _ = parse_reader(Cursor::new(text), Path::new("fuzz input"), format, &options);
}

/// Parses `data` as CSV; the first byte picks the delimiter (`,`, `;`, tab or space), the
/// header rule and the label column (an index from 0 to 3, or the name `y`).
pub fn parse_csv(data: &[u8]) {
    let Some((&first, text)) = data.split_first() else {
        return;
    };
    let options = ParseOptions {
        features: None,
        csv: CsvOptions {
            delimiter: [b',', b';', b'\t', b' '][usize::from(first & 3)],
            header: [CsvHeader::Auto, CsvHeader::Present, CsvHeader::Absent, CsvHeader::Auto]
                [usize::from((first >> 2) & 3)],
            label_column: match first >> 4 {
                n @ 0..=3 => LabelColumn::Index(u32::from(n)),
                _ => LabelColumn::Name("y".into()),
            },
        },
    };
    let _ = parse_reader(Cursor::new(text), Path::new("fuzz input"), InputFormat::Csv, &options);
}

/// The bytes a framed decoder gets: with an odd first byte, the rest wrapped in a valid frame
/// of `magic` (so the fuzzer reaches the payload decoder behind the checksum); else the input as
/// it is (header checks).
pub fn framed(magic: [u8; 4], data: &[u8]) -> Vec<u8> {
    match data.split_first() {
        Some((&first, payload)) if first & 1 == 1 => {
            let mut out = Vec::with_capacity(20 + payload.len());
            out.extend_from_slice(&magic);
            out.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
            out.extend_from_slice(&[0, 0]);
            out.extend_from_slice(&(payload.len() as u64).to_le_bytes());
            out.extend_from_slice(&crc32fast::hash(payload).to_le_bytes());
            out.extend_from_slice(payload);
            out
        }
        _ => data.to_vec(),
    }
}
