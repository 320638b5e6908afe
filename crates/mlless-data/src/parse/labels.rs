//! The labels seen while parsing: binary or not, their range, and the map that turns two
//! labels into 0 and 1.

use super::*;

/// The distinct label values seen, up to three, and the smallest, the largest and the first
/// fractional label with their lines.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub(super) struct LabelSet {
    pub(super) seen: [f32; 3],
    pub(super) count: usize,
    pub(super) min: Option<(f32, u64)>,
    pub(super) max: Option<(f32, u64)>,
    pub(super) fractional: Option<(f32, u64)>,
}

impl LabelSet {
    /// Counts `label`, read at line `line`.
    pub(super) fn observe(&mut self, label: f32, line: u64) {
        self.note_value(label);
        if self.min.is_none_or(|(min, _)| label < min) {
            self.min = Some((label, line));
        }
        if self.max.is_none_or(|(max, _)| label > max) {
            self.max = Some((label, line));
        }
        if self.fractional.is_none() && label.fract() != 0.0 {
            self.fractional = Some((label, line));
        }
    }

    /// Adds the values seen by another set (of a later part: its lines are not comparable).
    pub(super) fn merge(&mut self, other: &LabelSet) {
        for &label in &other.seen[..other.count] {
            self.note_value(label);
        }
    }

    /// Adds another set of the same input, read after this one's `before` lines (a later byte
    /// range): its lines count from there.
    pub(super) fn merge_later(&mut self, other: &LabelSet, before: u64) {
        self.merge(other);
        let shifted = |(label, line): (f32, u64)| (label, line + before);
        if let Some(min) = other
            .min
            .filter(|&(l, _)| self.min.is_none_or(|(m, _)| l < m))
        {
            self.min = Some(shifted(min));
        }
        if let Some(max) = other
            .max
            .filter(|&(l, _)| self.max.is_none_or(|(m, _)| l > m))
        {
            self.max = Some(shifted(max));
        }
        if self.fractional.is_none() {
            self.fractional = other.fractional.map(shifted);
        }
    }

    /// Counts `label` among the distinct values, while fewer than three were seen.
    pub(super) fn note_value(&mut self, label: f32) {
        if self.count < 3 && !self.seen[..self.count].contains(&label) {
            self.seen[self.count] = label;
            self.count += 1;
        }
    }

    /// The 0/1 mapping if exactly two values were seen (see the module doc).
    pub(super) fn binary_map(&self) -> Option<LabelMap> {
        if self.count != 2 {
            return None;
        }
        let (a, b) = (self.seen[0], self.seen[1]);
        Some(LabelMap {
            negative: a.min(b),
            positive: a.max(b),
        })
    }

    /// Maps two label values to 0/1 in place (see the module doc).
    #[cfg(test)]
    pub(super) fn map_binary(&self, labels: &mut [f32]) -> Option<LabelMap> {
        let map = self.binary_map();
        if let Some(map) = map {
            apply_label_map(map, labels);
        }
        map
    }
}

/// The range of the labels of `parts` (each a set with the input it was read from), after
/// `map`: `None` if they hold no label.
pub(super) fn label_range(
    parts: &[(&LabelSet, &Path)],
    map: Option<LabelMap>,
) -> Option<LabelRange> {
    let at = |(label, line): (f32, u64), path: &Path| LabelAt {
        label: match map {
            Some(map) if label == map.negative => 0.0,
            Some(_) => 1.0,
            None => label,
        },
        input: path.display().to_string(),
        line,
    };
    let mut range: Option<LabelRange> = None;
    for &(set, path) in parts {
        let (Some(min), Some(max)) = (set.min, set.max) else {
            continue;
        };
        let (min, max) = (at(min, path), at(max, path));
        // Mapped labels are 0 or 1: no fractional one is left.
        let fractional = set
            .fractional
            .filter(|_| map.is_none())
            .map(|f| at(f, path));
        let part = LabelRange {
            min,
            max,
            fractional,
        };
        match range.as_mut() {
            Some(range) => widen(range, part),
            None => range = Some(part),
        }
    }
    range
}

/// Widens `range` by the labels of a later part: of equal labels the earlier stays, and so
/// does the first fractional one.
pub(super) fn widen(range: &mut LabelRange, part: LabelRange) {
    if part.min.label < range.min.label {
        range.min = part.min;
    }
    if part.max.label > range.max.label {
        range.max = part.max;
    }
    if range.fractional.is_none() {
        range.fractional = part.fractional;
    }
}

/// Replaces `map.negative` by 0 and every other label by 1.
pub(super) fn apply_label_map(map: LabelMap, labels: &mut [f32]) {
    for l in labels {
        *l = if *l == map.negative { 0.0 } else { 1.0 };
    }
}
