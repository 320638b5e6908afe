//! MovieLens ratings.
//!
//! The variant is detected from the first non-blank line: `::` separators (`ratings.dat`,
//! MovieLens 1M/10M), tabs (`u.data`, MovieLens 100K) or commas (`ratings.csv`, MovieLens
//! 20M/25M/latest, whose header `userId,movieId,rating,timestamp` is skipped). Each line holds
//! user id, item id, rating and an optional timestamp, which is ignored. User and item ids are
//! remapped to dense ids `0..n` in ascending order of the original id.

use std::io::BufRead;

use mlless_core::RatingBatch;

use super::{Ctx, Lines, ParseError, Parsed, dense_remap_parts, parse_finite, quoted};
use crate::ids::IdMap;

/// The layout of a MovieLens file.
#[derive(Clone, Copy)]
pub(super) enum Variant {
    Dat,
    UData,
    Csv,
}

impl Variant {
    /// The field separator.
    pub(super) fn separator(self) -> &'static str {
        match self {
            Variant::Dat => "::",
            Variant::UData => "\t",
            Variant::Csv => ",",
        }
    }

    /// The layout, for messages.
    pub(super) fn layout(self) -> &'static str {
        match self {
            Variant::Dat => "user::item::rating::timestamp",
            Variant::UData => "user<TAB>item<TAB>rating<TAB>timestamp",
            Variant::Csv => "userId,movieId,rating,timestamp",
        }
    }
}

/// The variant of a file whose first non-blank line is `line`.
fn detect(line: &str) -> Option<Variant> {
    if line.contains("::") {
        Some(Variant::Dat)
    } else if line.contains('\t') {
        Some(Variant::UData)
    } else if line.contains(',') {
        Some(Variant::Csv)
    } else {
        None
    }
}

/// The error for a first line that is no MovieLens variant.
fn not_movielens(ctx: Ctx<'_>, no: u64, line: &str) -> ParseError {
    ctx.line(
        no,
        format!(
            "not a MovieLens ratings line: expected {}, {} or {}, found {}",
            Variant::UData.layout(),
            Variant::Dat.layout(),
            Variant::Csv.layout(),
            quoted(line)
        ),
    )
}

/// Whether the first line of a `ratings.csv` is its header (`userId,movieId,…`).
fn is_header(line: &str, v: Variant) -> bool {
    let first = line.split(v.separator()).next().unwrap_or("").trim_ascii();
    matches!(v, Variant::Csv) && first.parse::<u32>().is_err()
}

/// Splits `line` into at most `out.len()` fields (the last one holds the rest of the line);
/// returns how many.
fn split_fields<'a>(line: &'a str, v: Variant, out: &mut [&'a str; 5]) -> usize {
    fn fill<'a>(fields: impl Iterator<Item = &'a str>, out: &mut [&'a str; 5]) -> usize {
        let mut n = 0;
        for (slot, field) in out.iter_mut().zip(fields) {
            *slot = field;
            n += 1;
        }
        n
    }
    match v {
        Variant::Dat => fill(line.splitn(5, "::"), out),
        Variant::UData => fill(line.splitn(5, '\t'), out),
        Variant::Csv => fill(line.splitn(5, ','), out),
    }
}

/// Splits `line` (number `no`) into its fields, at most 5, in `parts`, the variant detected on
/// the first line that is not blank; `None` for a blank line and for the header.
fn fields_of<'l>(
    ctx: Ctx<'_>,
    no: u64,
    line: &'l str,
    variant: &mut Option<Variant>,
    parts: &mut [&'l str; 5],
) -> Result<Option<(Variant, usize)>, ParseError> {
    if line.trim_ascii().is_empty() {
        return Ok(None);
    }
    let v = match *variant {
        Some(v) => v,
        None => {
            let v = detect(line).ok_or_else(|| not_movielens(ctx, no, line))?;
            *variant = Some(v);
            if is_header(line, v) {
                return Ok(None);
            }
            v
        }
    };
    Ok(Some((v, split_fields(line, v, parts))))
}

/// Hands each data line of the input to `line`: its number, the variant (detected on the first
/// line that is not blank) and its fields, at most 5, trimmed. Blank lines and the header are
/// skipped.
pub(super) fn for_each_line<R: BufRead>(
    lines: &mut Lines<'_, '_, R>,
    mut line: impl FnMut(u64, Variant, &[&str]) -> Result<(), ParseError>,
) -> Result<(), ParseError> {
    let ctx = lines.ctx;
    let mut variant: Option<Variant> = None;
    while let Some((no, text)) = lines.next_line()? {
        let mut parts = [""; 5];
        if let Some((v, n)) = fields_of(ctx, no, text, &mut variant, &mut parts)? {
            let fields = &mut parts[..n];
            for field in fields.iter_mut() {
                *field = field.trim_ascii();
            }
            line(no, v, fields)?;
        }
    }
    Ok(())
}

/// The id `field` of line `no`, `what` it is for the error (e.g. "a user id").
pub(super) fn parse_id(ctx: Ctx<'_>, no: u64, what: &str, field: &str) -> Result<u32, ParseError> {
    field
        .parse()
        .map_err(|_| ctx.line(no, format!("expected {what}, found {}", quoted(field))))
}

/// The largest magnitude a rating may have. Rating scales run from a few stars to a few
/// hundred points; a rating beyond a million is a corrupt line, and one such rating makes
/// matrix factorisation diverge (its squared error overflows `f32`), which `train` could only
/// blame on the learning rate.
pub const MAX_RATING: f32 = 1e6;

/// The rating `field` of line `no`: a finite number of magnitude at most [`MAX_RATING`].
pub(super) fn parse_rating(ctx: Ctx<'_>, no: u64, field: &str) -> Result<f32, ParseError> {
    let rating = parse_finite(field)
        .ok_or_else(|| ctx.line(no, format!("expected a rating, found {}", quoted(field))))?;
    if rating.abs() > MAX_RATING {
        return Err(ctx.line(
            no,
            format!(
                "rating {} is outside the plausible range of ratings (-{MAX_RATING:e} to \
                 {MAX_RATING:e}): fix or remove the line, or rescale the ratings",
                quoted(field)
            ),
        ));
    }
    Ok(rating)
}

/// Reads ratings with their original ids.
pub(super) fn read<R: BufRead>(lines: &mut Lines<'_, '_, R>) -> Result<RatingBatch, ParseError> {
    let ctx = lines.ctx;
    let mut ratings = RatingBatch::default();
    for_each_line(lines, |no, v, fields| {
        let mut fields = fields.iter().copied();
        let mut next = |what: &str| {
            fields
                .next()
                .ok_or_else(|| ctx.line(no, format!("missing {what}: expected {}", v.layout())))
        };
        let user = parse_id(ctx, no, "a user id", next("user id")?)?;
        let item = parse_id(ctx, no, "an item id", next("item id")?)?;
        let rating = parse_rating(ctx, no, next("rating")?)?;
        let _timestamp = fields.next();
        if let Some(extra) = fields.next() {
            return Err(ctx.line(
                no,
                format!(
                    "unexpected field {}: expected {}",
                    quoted(extra),
                    v.layout()
                ),
            ));
        }
        ratings.push(user, item, rating);
        Ok(())
    })?;
    Ok(ratings)
}

/// Remaps user and item ids to dense ids over all inputs; returns the parts and the original
/// ids of the dense ones.
pub(super) fn finish(mut raws: Vec<(Ctx<'_>, RatingBatch)>) -> (Vec<Parsed>, IdMap) {
    let users = dense_remap_parts(
        &mut raws
            .iter_mut()
            .map(|(_, r)| &mut r.users)
            .collect::<Vec<_>>(),
    );
    let items = dense_remap_parts(
        &mut raws
            .iter_mut()
            .map(|(_, r)| &mut r.items)
            .collect::<Vec<_>>(),
    );
    let ids = IdMap { users, items };
    let (users, items) = (ids.users.len() as u32, ids.items.len() as u32);
    let parsed = raws
        .into_iter()
        .map(|(_, ratings)| Parsed::Ratings {
            ratings,
            users,
            items,
        })
        .collect();
    (parsed, ids)
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use crate::parse::{InputFormat, ParseOptions, parse_reader};

    use super::*;

    fn parse_str(text: &str) -> Result<Parsed, ParseError> {
        parse_reader(
            text.as_bytes(),
            Path::new("ratings"),
            InputFormat::Movielens,
            &ParseOptions::default(),
        )
    }

    fn expect(text: &str) {
        let Parsed::Ratings {
            ratings,
            users,
            items,
        } = parse_str(text).unwrap()
        else {
            panic!("expected ratings")
        };
        assert_eq!((users, items), (2, 3), "{text:?}");
        // users 7 -> 1, 3 -> 0; items 50 -> 2, 10 -> 0, 20 -> 1
        assert_eq!(ratings.users, vec![1, 0, 1, 0]);
        assert_eq!(ratings.items, vec![2, 0, 1, 2]);
        assert_eq!(ratings.ratings, vec![4.0, 3.5, 1.0, 5.0]);
    }

    #[test]
    fn all_three_variants() {
        expect("7\t50\t4\t881250949\n3\t10\t3.5\t891717742\n7\t20\t1\t0\n3\t50\t5\t0\n");
        expect("7::50::4::978300760\r\n3::10::3.5::978302109\r\n7::20::1::0\r\n3::50::5::0\r\n");
        expect("userId,movieId,rating,timestamp\n7,50,4,1\n3,10,3.5,1\n7,20,1,1\n\n3,50,5,1\n");
        // Without timestamps and without a header.
        expect("7,50,4\n3,10,3.5\n7,20,1\n3,50,5\n");
    }

    #[test]
    fn malformed_lines_name_file_and_line() {
        let cases = [
            (
                "1\t2\t3\t4\n1\tx\t3\t4\n",
                2,
                "expected an item id, found \"x\"",
            ),
            (
                "1::2::3::4\n1::2\n",
                2,
                "missing rating: expected user::item::rating::timestamp",
            ),
            (
                "userId,movieId,rating,timestamp\n1,2,3,4\n-1,2,3,4\n",
                3,
                "expected a user id, found \"-1\"",
            ),
            (
                "1,2,3,4\n1,2,good,4\n",
                2,
                "expected a rating, found \"good\"",
            ),
            ("1\t2\t3\t4\t5\n", 1, "unexpected field \"5\""),
            (
                "1\t2\t3\t4\n196\t242\t1e30\t881250949\n",
                2,
                "rating \"1e30\" is outside the plausible range of ratings (-1e6 to 1e6)",
            ),
            ("1,2,-2000000,4\n", 1, "rating \"-2000000\" is outside"),
            ("1 2 3 4\n", 1, "not a MovieLens ratings line"),
        ];
        for (text, line, message) in cases {
            let shown = parse_str(text).unwrap_err().to_string();
            assert!(
                shown.starts_with(&format!("ratings:{line}: {message}")),
                "{shown:?} for {text:?}"
            );
        }
        assert!(matches!(
            parse_str("userId,movieId,rating,timestamp\n"),
            Err(ParseError::Empty { .. })
        ));
    }
}
