#![no_main]
use libfuzzer_sys::fuzz_target;

use std::io::Cursor;
use std::path::Path;

use mlless_data::{CsvDialect, InputFormat, LabelMap, ScoringLayout, read_reader_for_scoring};

// The first byte picks the format (low 2 bits), the index base, a label map and the features.
fuzz_target!(|data: &[u8]| {
    let Some((&first, text)) = data.split_first() else {
        return;
    };
    let layout = ScoringLayout {
        format: InputFormat::ALL[usize::from(first & 3)],
        features: u32::from(first >> 4) * 8 + 14,
        zero_based: first & 4 != 0,
        csv_columns: None,
        // The label last when the index base bit is set (CSV has none).
        csv: CsvDialect {
            label_column: if first & 4 != 0 {
                u32::from(first >> 4) * 8 + 14
            } else {
                0
            },
            ..CsvDialect::default()
        },
        label_map: (first & 8 != 0).then_some(LabelMap {
            negative: -1.0,
            positive: 1.0,
        }),
    };
    let _ = read_reader_for_scoring(Cursor::new(text), Path::new("fuzz input"), &layout);
});
