//! The checks on a file as a whole, before any section is decoded: magic,
//! format version, length field, checksum and header flags. Kept apart from
//! the section decoder because these failures mean "not a (whole) .fxir file",
//! and their messages diagnose the usual transfer accidents instead.

use super::crc::crc32;
use super::format::*;
use crate::error::{Error, Result};

/// A [`Error::Decode`] at byte `offset`; every reading error goes through here.
pub(super) fn decode_err(offset: usize, detail: impl Into<String>) -> Error {
    Error::Decode {
        offset: offset as u64,
        detail: detail.into(),
    }
}

pub(super) fn le_u32(bytes: &[u8], at: usize) -> Option<u32> {
    let b = bytes.get(at..at.checked_add(4)?)?;
    let mut a = [0u8; 4];
    a.copy_from_slice(b);
    Some(u32::from_le_bytes(a))
}

pub(super) fn le_u64(bytes: &[u8], at: usize) -> Option<u64> {
    let b = bytes.get(at..at.checked_add(8)?)?;
    let mut a = [0u8; 8];
    a.copy_from_slice(b);
    Some(u64::from_le_bytes(a))
}

/// Why the first bytes are not [`MAGIC`], with a hint for the usual accidents.
pub(super) fn bad_magic(bytes: &[u8]) -> Error {
    let detail = if bytes.starts_with(b"\x89FXIR\n\x1a") {
        "bad magic: CRLF was converted to LF (the file went through a text-mode transfer)"
    } else if bytes.starts_with(b"\x89FXIR\r\r\n") {
        "bad magic: LF was converted to CRLF (the file went through a text-mode transfer)"
    } else if bytes.starts_with(b"\x09FXIR") {
        "bad magic: the high bit of bytes was stripped (a 7-bit transfer)"
    } else if bytes.starts_with(b"\xef\xbf\xbdFXIR") {
        "bad magic: the file was decoded and re-encoded as text (UTF-8 replacement character)"
    } else {
        "bad magic: not a .fxir file"
    };
    decode_err(0, detail)
}

/// Checks the header, the length field and the checksum; returns the bytes
/// the checksum covers and the section count.
pub(super) fn envelope(bytes: &[u8]) -> Result<(&[u8], u32, u32)> {
    let n = bytes.len();
    match bytes.get(..MAGIC.len()) {
        Some(m) if m == MAGIC => {}
        None if MAGIC.starts_with(bytes) => {
            return Err(decode_err(
                n,
                format!("truncated in header: the file is only {n} bytes (reading magic)"),
            ))
        }
        _ => return Err(bad_magic(bytes)),
    }
    let version = le_u32(bytes, OFF_VERSION).ok_or_else(|| {
        decode_err(
            n,
            format!("truncated in header: the file is only {n} bytes (reading version)"),
        )
    })?;
    if !(OLDEST_READ_VERSION..=FORMAT_VERSION).contains(&version) {
        return Err(Error::Version {
            found: version,
            supported: FORMAT_VERSION,
        });
    }
    let file_len = le_u64(bytes, OFF_FILE_LEN)
        .filter(|_| n >= HEADER_LEN + CHECKSUM_LEN)
        .ok_or_else(|| {
            decode_err(
                n,
                format!(
                    "truncated in header: the file is only {n} bytes, a file has at least {}",
                    HEADER_LEN + CHECKSUM_LEN
                ),
            )
        })?;
    if file_len != n as u64 {
        let what = if file_len > n as u64 {
            "truncated"
        } else {
            "trailing bytes"
        };
        return Err(decode_err(
            n.min(usize::try_from(file_len).unwrap_or(usize::MAX)),
            format!("{what}: the header says the file is {file_len} bytes, it is {n}"),
        ));
    }
    let body_len = n - CHECKSUM_LEN;
    let (body, stored) = (bytes.get(..body_len), le_u32(bytes, body_len));
    let (Some(body), Some(stored)) = (body, stored) else {
        return Err(decode_err(n, "truncated (reading checksum)"));
    };
    let computed = crc32(body);
    if computed != stored {
        return Err(decode_err(
            body_len,
            format!(
                "bad checksum: stored {stored:#010x}, computed {computed:#010x} (the file is corrupt)"
            ),
        ));
    }
    let flags = le_u32(bytes, OFF_FLAGS).unwrap_or(0);
    if flags != 0 {
        return Err(decode_err(
            OFF_FLAGS,
            format!("unknown header flags {flags:#x} (this build knows none)"),
        ));
    }
    let sections = le_u32(bytes, OFF_SECTION_COUNT).unwrap_or(0);
    Ok((body, sections, version))
}
