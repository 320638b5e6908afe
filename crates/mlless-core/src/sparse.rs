//! Sparse vectors: the shape of every gradient and every update that crosses the channel.

mod wire;

use serde::Deserialize;

/// A sparse vector of `f32` values with strictly ascending `u32` indices.
///
/// Gradients, optimiser deltas and the updates that workers exchange are all `SparseVector`s over
/// the flat parameter vector of a model, so that every protocol (broadcast, significance filter,
/// compression) works on one type whatever the model.
///
/// A decoded vector (an update from the channel) always has as many values as indices,
/// ascending: checking its last index against a dimension ([`SparseVector::check_dim`]) then
/// bounds every index. Its binary form (postcard) is compact: the indices' gaps as varints and
/// the values as bytes; in JSON it is `{"indices": [...], "values": [...]}`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SparseVector {
    indices: Vec<u32>,
    values: Vec<f32>,
}

/// The form of a [`SparseVector`] in a format people read (JSON), checked by
/// [`SparseVector::from_parts`] before it becomes one.
#[derive(Deserialize)]
struct SparseParts {
    indices: Vec<u32>,
    values: Vec<f32>,
}

/// Why a pair of index and value arrays is not a valid [`SparseVector`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SparseError {
    /// The index and value arrays differ in length.
    #[error("sparse vector has {indices} indices but {values} values")]
    LengthMismatch {
        /// Number of indices.
        indices: usize,
        /// Number of values.
        values: usize,
    },
    /// An index is not greater than the one before it.
    #[error("sparse vector index {index} at position {position} is not ascending")]
    NotAscending {
        /// The offending index.
        index: u32,
        /// Its position in the array.
        position: usize,
    },
    /// An index is outside the dimension the vector is used with.
    #[error("sparse vector index {index} is out of bounds for dimension {dim}")]
    OutOfBounds {
        /// The offending index.
        index: u32,
        /// The dimension it was checked against.
        dim: usize,
    },
}

impl SparseVector {
    /// An empty vector.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty vector with room for `capacity` entries.
    pub fn with_capacity(capacity: usize) -> Self {
        Self {
            indices: Vec::with_capacity(capacity),
            values: Vec::with_capacity(capacity),
        }
    }

    /// Builds a vector from parts, checking that indices ascend strictly.
    pub fn from_parts(indices: Vec<u32>, values: Vec<f32>) -> Result<Self, SparseError> {
        if indices.len() != values.len() {
            return Err(SparseError::LengthMismatch {
                indices: indices.len(),
                values: values.len(),
            });
        }
        // One pass the compiler vectorises (every update from the channel goes through it);
        // only a vector that fails it is searched for its first offending index.
        let ascending = indices
            .windows(2)
            .fold(true, |ok, pair| ok & (pair[0] < pair[1]));
        if !ascending {
            for (position, pair) in indices.windows(2).enumerate() {
                if pair[1] <= pair[0] {
                    return Err(SparseError::NotAscending {
                        index: pair[1],
                        position: position + 1,
                    });
                }
            }
        }
        Ok(Self { indices, values })
    }

    /// Builds a vector from parts the caller guarantees valid (same length, strictly ascending).
    pub(crate) fn from_sorted_unchecked(indices: Vec<u32>, values: Vec<f32>) -> Self {
        debug_assert_eq!(indices.len(), values.len());
        debug_assert!(indices.windows(2).all(|w| w[0] < w[1]));
        Self { indices, values }
    }

    /// Builds a vector from unordered `(index, value)` pairs; values of repeated indices are summed.
    pub fn from_pairs(mut pairs: Vec<(u32, f32)>) -> Self {
        pairs.sort_unstable_by_key(|&(i, _)| i);
        let mut out = Self::with_capacity(pairs.len());
        for (i, v) in pairs {
            if out.indices.last() == Some(&i) {
                if let Some(last) = out.values.last_mut() {
                    *last += v;
                }
            } else {
                out.indices.push(i);
                out.values.push(v);
            }
        }
        out
    }

    /// Appends an entry; `index` must be greater than every index already present.
    ///
    /// # Panics
    /// Panics if `index` does not ascend: that is a programming error, not bad input.
    pub fn push(&mut self, index: u32, value: f32) {
        assert!(
            self.indices.last().is_none_or(|&last| index > last),
            "SparseVector::push: index {index} does not ascend"
        );
        self.indices.push(index);
        self.values.push(value);
    }

    /// `self + scale · other`, over the union of their indices.
    pub fn plus_scaled(&self, other: &SparseVector, scale: f32) -> SparseVector {
        let mut out = Self::with_capacity(self.nnz().max(other.nnz()));
        let (mut a, mut b) = (0, 0);
        while a < self.nnz() || b < other.nnz() {
            let ia = self.indices.get(a).copied().unwrap_or(u32::MAX);
            let ib = other.indices.get(b).copied().unwrap_or(u32::MAX);
            let take_a = a < self.nnz() && (b >= other.nnz() || ia <= ib);
            let take_b = b < other.nnz() && (a >= self.nnz() || ib <= ia);
            let mut value = 0.0;
            if take_a {
                value += self.values[a];
                a += 1;
            }
            if take_b {
                value += scale * other.values[b];
                b += 1;
            }
            out.indices.push(if take_a { ia } else { ib });
            out.values.push(value);
        }
        out
    }

    /// Cuts the vector at `bounds` (ascending, first 0, last at least the dimension): part `c`
    /// holds the entries with `bounds[c] <= index < bounds[c + 1]`. Entries at or beyond the
    /// last bound are dropped.
    pub fn split_at_bounds(&self, bounds: &[u64]) -> Vec<SparseVector> {
        bounds
            .windows(2)
            .map(|w| {
                let lo = self.indices.partition_point(|&i| u64::from(i) < w[0]);
                let hi = self.indices.partition_point(|&i| u64::from(i) < w[1]);
                Self::from_sorted_unchecked(
                    self.indices[lo..hi].to_vec(),
                    self.values[lo..hi].to_vec(),
                )
            })
            .collect()
    }

    /// Joins parts whose index ranges follow one another (as [`split_at_bounds`] cuts them);
    /// an error if an index of one part is not above every index of the parts before it.
    ///
    /// [`split_at_bounds`]: Self::split_at_bounds
    pub fn concat(parts: impl IntoIterator<Item = SparseVector>) -> Result<Self, SparseError> {
        let mut out = Self::new();
        for part in parts {
            if let (Some(&last), Some(&first)) = (out.indices.last(), part.indices.first())
                && first <= last
            {
                return Err(SparseError::NotAscending {
                    index: first,
                    position: out.indices.len(),
                });
            }
            out.indices.extend_from_slice(&part.indices);
            out.values.extend_from_slice(&part.values);
        }
        Ok(out)
    }

    /// Checks that every index is below `dim`.
    pub fn check_dim(&self, dim: usize) -> Result<(), SparseError> {
        match self.indices.last() {
            Some(&index) if index as usize >= dim => Err(SparseError::OutOfBounds { index, dim }),
            _ => Ok(()),
        }
    }

    /// Number of stored entries.
    pub fn nnz(&self) -> usize {
        self.indices.len()
    }

    /// Whether no entry is stored.
    pub fn is_empty(&self) -> bool {
        self.indices.is_empty()
    }

    /// The stored indices, ascending.
    pub fn indices(&self) -> &[u32] {
        &self.indices
    }

    /// The stored values, in the order of [`indices`](Self::indices).
    pub fn values(&self) -> &[f32] {
        &self.values
    }

    /// Mutable access to the stored values (the indices stay fixed).
    pub fn values_mut(&mut self) -> &mut [f32] {
        &mut self.values
    }

    /// Iterates over `(index, value)` pairs in ascending index order.
    pub fn iter(&self) -> impl Iterator<Item = (u32, f32)> + '_ {
        self.indices
            .iter()
            .copied()
            .zip(self.values.iter().copied())
    }

    /// Splits the vector into its index and value arrays.
    pub fn into_parts(self) -> (Vec<u32>, Vec<f32>) {
        (self.indices, self.values)
    }

    /// Adds `scale * self` into `dense`. Indices must be in bounds (see [`check_dim`](Self::check_dim)).
    pub fn scaled_add_to(&self, dense: &mut [f32], scale: f32) {
        for (&i, &v) in self.indices.iter().zip(&self.values) {
            dense[i as usize] += scale * v;
        }
    }

    /// Multiplies every stored value by `factor`.
    pub fn scale(&mut self, factor: f32) {
        self.values.iter_mut().for_each(|v| *v *= factor);
    }

    /// Sum of squares of the stored values.
    pub fn squared_norm(&self) -> f64 {
        self.values
            .iter()
            .map(|&v| f64::from(v) * f64::from(v))
            .sum()
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn plus_scaled_merges_indices() {
        let a = super::SparseVector::from_pairs(vec![(1, 1.0), (4, 2.0), (9, 3.0)]);
        let b = super::SparseVector::from_pairs(vec![(0, 1.0), (4, 1.0), (10, 2.0)]);
        let c = a.plus_scaled(&b, -0.5);
        assert_eq!(c.indices(), &[0, 1, 4, 9, 10]);
        assert_eq!(c.values(), &[-0.5, 1.0, 1.5, 3.0, -1.0]);
        assert_eq!(a.plus_scaled(&super::SparseVector::new(), 2.0), a);
    }

    use super::*;

    #[test]
    fn from_pairs_sorts_and_sums_duplicates() {
        let v = SparseVector::from_pairs(vec![(5, 1.0), (2, 2.0), (5, 0.5)]);
        assert_eq!(v.indices(), &[2, 5]);
        assert_eq!(v.values(), &[2.0, 1.5]);
    }

    #[test]
    fn from_parts_rejects_bad_input() {
        assert!(matches!(
            SparseVector::from_parts(vec![1, 1], vec![0.0, 0.0]),
            Err(SparseError::NotAscending {
                index: 1,
                position: 1
            })
        ));
        assert!(matches!(
            SparseVector::from_parts(vec![1], vec![]),
            Err(SparseError::LengthMismatch { .. })
        ));
        let v = SparseVector::from_parts(vec![0, 9], vec![1.0, 1.0]).unwrap();
        assert!(v.check_dim(10).is_ok());
        assert!(v.check_dim(9).is_err());
    }

    #[test]
    fn deserialisation_checks_the_parts() {
        let ok: SparseVector = serde_json::from_str(r#"{"indices":[1,9],"values":[1,2]}"#).unwrap();
        assert_eq!(ok.indices(), &[1, 9]);
        // A hostile update whose last index fits the model but an earlier one does not: it must
        // not decode, or `check_dim` would let index 4000000000 through.
        let err =
            serde_json::from_str::<SparseVector>(r#"{"indices":[4000000000,1],"values":[1,2]}"#)
                .unwrap_err();
        assert!(err.to_string().contains("not ascending"), "{err}");
        let err =
            serde_json::from_str::<SparseVector>(r#"{"indices":[1,2],"values":[1]}"#).unwrap_err();
        assert!(err.to_string().contains("2 indices but 1 values"), "{err}");
    }

    #[test]
    fn scaled_add_to_touches_only_stored_entries() {
        let v = SparseVector::from_parts(vec![0, 3], vec![1.0, -2.0]).unwrap();
        let mut dense = vec![1.0; 4];
        v.scaled_add_to(&mut dense, 0.5);
        assert_eq!(dense, vec![1.5, 1.0, 1.0, 0.0]);
    }
}
