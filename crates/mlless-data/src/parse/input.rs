//! Opening an input: a file or standard input (`-`), decompressed when it is gzip or zstd.
//!
//! The compression is told by the input's first bytes (its magic number), not by its name: a
//! `.gz` that is plain text is read as text, and standard input may be compressed too.

use std::fs::File;
use std::io::{self, BufRead, BufReader, Cursor, Read};
use std::path::{Path, PathBuf};

use super::ParseError;

/// The path that names standard input (`mlless prepare --input -`).
pub const STDIN_PATH: &str = "-";

/// How standard input is named in errors and in the manifest.
pub const STDIN_NAME: &str = "<stdin>";

/// Bytes read per refill of an input's buffer.
const BUFFER: usize = 1 << 20;

/// How an input is compressed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compression {
    /// Plain bytes.
    None,
    /// gzip (RFC 1952), one member or several (as `cat a.gz b.gz` makes).
    Gzip,
    /// Zstandard, one frame or several.
    Zstd,
}

impl Compression {
    /// The compression whose magic number `head` (the input's first bytes, at least four
    /// unless the input is shorter) starts with.
    ///
    /// ```
    /// use mlless_data::Compression;
    /// assert_eq!(Compression::sniff(&[0x1f, 0x8b, 8, 0]), Compression::Gzip);
    /// assert_eq!(Compression::sniff(&[0x28, 0xb5, 0x2f, 0xfd]), Compression::Zstd);
    /// assert_eq!(Compression::sniff(b"1 3:1"), Compression::None);
    /// ```
    pub fn sniff(head: &[u8]) -> Compression {
        match head {
            [0x1f, 0x8b, ..] => Compression::Gzip,
            [0x28, 0xb5, 0x2f, 0xfd, ..] => Compression::Zstd,
            _ => Compression::None,
        }
    }
}

/// The name an input goes by in errors: its path, or [`STDIN_NAME`] for `-`.
pub fn input_name(path: &Path) -> PathBuf {
    if path == Path::new(STDIN_PATH) {
        PathBuf::from(STDIN_NAME)
    } else {
        path.to_path_buf()
    }
}

/// The lines of the input at `path` (`-`: standard input), decompressed when it is gzip or
/// zstd; errors name the input by [`input_name`].
pub fn open_input(path: &Path) -> Result<Box<dyn BufRead + Send>, ParseError> {
    let name = input_name(path);
    if path == Path::new(STDIN_PATH) {
        return decompressed(BufReader::with_capacity(BUFFER, io::stdin()), &name);
    }
    let file = File::open(path).map_err(|error| ParseError::Io {
        path: name.clone(),
        error,
    })?;
    decompressed(BufReader::with_capacity(BUFFER, file), &name)
}

/// `reader` decompressed when its first bytes say it is gzip or zstd, else as it is; `name`
/// names it in errors.
pub fn decompressed<R: BufRead + Send + 'static>(
    mut reader: R,
    name: &Path,
) -> Result<Box<dyn BufRead + Send>, ParseError> {
    let io_error = |error| ParseError::Io {
        path: name.to_path_buf(),
        error,
    };
    // The magic number, read whole even from a pipe that hands over a byte at a time, then put
    // back in front of the rest.
    let mut head = Vec::with_capacity(4);
    (&mut reader)
        .take(4)
        .read_to_end(&mut head)
        .map_err(io_error)?;
    let compression = Compression::sniff(&head);
    let whole = Cursor::new(head).chain(reader);
    Ok(match compression {
        Compression::None => Box::new(whole),
        Compression::Gzip => Box::new(BufReader::with_capacity(
            BUFFER,
            flate2::bufread::MultiGzDecoder::new(whole),
        )),
        Compression::Zstd => Box::new(BufReader::with_capacity(
            BUFFER,
            zstd::stream::read::Decoder::with_buffer(whole).map_err(io_error)?,
        )),
    })
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;

    const TEXT: &str = "1 3:1\n0 2:0.5\n";

    fn read(bytes: Vec<u8>) -> String {
        let mut out = String::new();
        decompressed(Cursor::new(bytes), Path::new("in"))
            .unwrap()
            .read_to_string(&mut out)
            .unwrap();
        out
    }

    fn gzip(text: &str) -> Vec<u8> {
        let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        encoder.write_all(text.as_bytes()).unwrap();
        encoder.finish().unwrap()
    }

    #[test]
    fn plain_gzip_and_zstd_read_the_same_lines() {
        assert_eq!(read(TEXT.as_bytes().to_vec()), TEXT);
        assert_eq!(read(gzip(TEXT)), TEXT);
        assert_eq!(read(zstd::encode_all(TEXT.as_bytes(), 1).unwrap()), TEXT);
        // Concatenated members and frames are read to the end.
        let mut two = gzip("1 1:1\n");
        two.extend(gzip("0 2:1\n"));
        assert_eq!(read(two), "1 1:1\n0 2:1\n");
        let mut two = zstd::encode_all(&b"1 1:1\n"[..], 1).unwrap();
        two.extend(zstd::encode_all(&b"0 2:1\n"[..], 1).unwrap());
        assert_eq!(read(two), "1 1:1\n0 2:1\n");
        // Inputs shorter than a magic number.
        assert_eq!(read(b"1\n".to_vec()), "1\n");
        assert_eq!(read(Vec::new()), "");
    }

    /// A pipe that hands over one byte per read.
    struct Trickle(Cursor<Vec<u8>>);

    impl Read for Trickle {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            let n = buf.len().min(1);
            self.0.read(&mut buf[..n])
        }
    }

    #[test]
    fn the_magic_number_is_read_whole_from_a_trickling_pipe() {
        let reader = BufReader::with_capacity(1, Trickle(Cursor::new(gzip(TEXT))));
        let mut out = String::new();
        decompressed(reader, Path::new("pipe"))
            .unwrap()
            .read_to_string(&mut out)
            .unwrap();
        assert_eq!(out, TEXT);
    }

    #[test]
    fn a_cut_stream_is_an_error_naming_the_input() {
        let mut bytes = gzip(TEXT);
        bytes.truncate(bytes.len() / 2);
        let name = Path::new("cut.gz");
        let reader = decompressed(Cursor::new(bytes), name).unwrap();
        let options = super::super::ParseOptions::default();
        let error =
            super::super::parse_reader(reader, name, super::super::InputFormat::Libsvm, &options)
                .unwrap_err();
        assert!(error.to_string().starts_with("cut.gz: "), "{error}");
    }
}
