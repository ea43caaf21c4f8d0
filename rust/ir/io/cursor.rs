//! The bounds-checked cursor the reader decodes with: primitive reads
//! (bytes, varints, counts, flags, string references) that check every length
//! against the bytes left before allocating, and the error context (section,
//! item) every message names.

use std::fmt::Display;

use super::envelope::decode_err;
use super::format::*;
use crate::error::{Error, Result};
use crate::ir::schema::{AliasInfo, ArgType};

/// A bounds-checked cursor over the checksummed bytes, with the context that
/// error messages name.
pub(super) struct Reader<'a> {
    pub(super) buf: &'a [u8],
    pub(super) pos: usize,
    /// End of the current section (never past `buf.len()`).
    pub(super) end: usize,
    pub(super) section: &'static str,
    pub(super) item: Option<(&'static str, usize)>,
    pub(super) strings: Vec<&'a str>,
    /// String bytes that may still be materialised.
    pub(super) budget: usize,
    /// The budget at the start, for the error message.
    pub(super) budget_total: usize,
    /// The last storage key decoded (storage keys are delta-coded).
    pub(super) prev_storage: u64,
    /// The file's format version (a tensor meta of version 1 is laid out
    /// otherwise).
    pub(super) version: u32,
}

impl<'a> Reader<'a> {
    pub(super) fn err_at(&self, offset: usize, detail: impl Display) -> Error {
        let detail = match self.item {
            Some((what, i)) => format!("{detail} in section '{}' at {what} {i}", self.section),
            None => format!("{detail} in section '{}'", self.section),
        };
        decode_err(offset, detail)
    }

    pub(super) fn truncated(&self, what: &str) -> Error {
        self.err_at(self.pos, format_args!("truncated (reading {what})"))
    }

    pub(super) fn remaining(&self) -> usize {
        self.end.saturating_sub(self.pos)
    }

    pub(super) fn u8(&mut self, what: &str) -> Result<u8> {
        match self.buf.get(self.pos) {
            Some(&b) if self.pos < self.end => {
                self.pos += 1;
                Ok(b)
            }
            _ => Err(self.truncated(what)),
        }
    }

    pub(super) fn bytes(&mut self, len: usize, what: &str) -> Result<&'a [u8]> {
        let end = self
            .pos
            .checked_add(len)
            .filter(|&e| e <= self.end)
            .ok_or_else(|| self.truncated(what))?;
        let b = self
            .buf
            .get(self.pos..end)
            .ok_or_else(|| self.truncated(what))?;
        self.pos = end;
        Ok(b)
    }

    /// An unsigned LEB128 varint, at most 10 bytes, canonical (no redundant
    /// trailing zero groups).
    pub(super) fn varint(&mut self, what: &str) -> Result<u64> {
        let start = self.pos;
        let mut value = 0u64;
        let mut shift = 0u32;
        loop {
            let byte = self.u8(what)?;
            let low = u64::from(byte & 0x7f);
            if shift == 63 && low > 1 {
                return Err(self.err_at(start, format_args!("varint overflows 64 bits ({what})")));
            }
            value |= low << shift;
            if byte & 0x80 == 0 {
                if byte == 0 && shift > 0 {
                    return Err(self.err_at(start, format_args!("non-canonical varint ({what})")));
                }
                return Ok(value);
            }
            shift += 7;
            if shift > 63 {
                return Err(
                    self.err_at(start, format_args!("varint longer than 10 bytes ({what})"))
                );
            }
        }
    }

    pub(super) fn signed(&mut self, what: &str) -> Result<i64> {
        self.varint(what).map(unzigzag)
    }

    pub(super) fn u32(&mut self, what: &str) -> Result<u32> {
        let start = self.pos;
        let v = self.varint(what)?;
        u32::try_from(v)
            .map_err(|_| self.err_at(start, format_args!("{what} {v} does not fit 32 bits")))
    }

    /// An element count, checked against the bytes left in the section given
    /// that each element takes at least `min_each` bytes.
    pub(super) fn count(&mut self, what: &str, min_each: usize) -> Result<usize> {
        let start = self.pos;
        let n = self.varint(what)?;
        let left = self.remaining();
        match usize::try_from(n) {
            Ok(c) if c.checked_mul(min_each).is_some_and(|b| b <= left) => Ok(c),
            _ => Err(self.err_at(
                start,
                format_args!("{what} {n} is impossible with only {left} bytes left"),
            )),
        }
    }

    pub(super) fn flags(&mut self, what: &str, known: u8) -> Result<u8> {
        let start = self.pos;
        let f = self.u8(what)?;
        if f & !known != 0 {
            return Err(self.err_at(
                start,
                format_args!("unknown bits {:#04x} in {what}", f & !known),
            ));
        }
        Ok(f)
    }

    pub(super) fn str_ref(&mut self, what: &str) -> Result<&'a str> {
        let start = self.pos;
        let i = self.varint(what)?;
        match usize::try_from(i).ok().and_then(|i| self.strings.get(i)) {
            Some(s) => Ok(*s),
            None => Err(self.err_at(
                start,
                format_args!(
                    "string index {i} out of range ({} strings) ({what})",
                    self.strings.len()
                ),
            )),
        }
    }

    pub(super) fn string(&mut self, what: &str) -> Result<String> {
        let start = self.pos;
        let s = self.str_ref(what)?;
        self.budget = self.budget.checked_sub(s.len()).ok_or_else(|| {
            self.err_at(
                start,
                format_args!(
                    "decoded strings exceed the budget of {} bytes ({MAX_STRING_EXPANSION} times the file size + {STRING_BUDGET_FLOOR}; hostile input?) ({what})",
                    self.budget_total
                ),
            )
        })?;
        Ok(s.to_owned())
    }

    pub(super) fn arg_type(&mut self, what: &str) -> Result<ArgType> {
        let start = self.pos;
        let c = self.u8(what)?;
        ArgType::from_code(c).ok_or_else(|| self.err_at(start, format_args!("bad {what} code {c}")))
    }

    pub(super) fn alias(&mut self, flags: u8) -> Result<Option<AliasInfo>> {
        if flags & ALIAS_PRESENT == 0 {
            if flags & ALIAS_WRITE != 0 {
                return Err(self.err_at(
                    self.pos.saturating_sub(1),
                    "write flag without an alias set",
                ));
            }
            return Ok(None);
        }
        Ok(Some(AliasInfo {
            set: self.string("alias set")?,
            is_write: flags & ALIAS_WRITE != 0,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::super::writer::{put_varint, varint_len};
    use super::*;

    #[test]
    fn varints_and_zigzag_round_trip() {
        for v in [0i64, 1, -1, 63, -64, 64, i64::MAX, i64::MIN] {
            assert_eq!(unzigzag(zigzag(v)), v);
        }
        for v in [0u64, 1, 127, 128, 16383, 16384, u64::MAX] {
            let mut out = Vec::new();
            put_varint(&mut out, v);
            assert_eq!(out.len(), varint_len(v));
            let mut r = Reader {
                buf: &out,
                pos: 0,
                end: out.len(),
                section: "t",
                item: None,
                strings: vec![],
                budget: 0,
                budget_total: 0,
                prev_storage: 0,
                version: 2,
            };
            assert_eq!(r.varint("v"), Ok(v));
        }
    }

    #[test]
    fn overlong_and_oversized_varints_are_refused() {
        for bad in [
            &[0x80u8, 0x00][..],
            &[0xff; 11][..],
            &[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02][..],
        ] {
            let mut r = Reader {
                buf: bad,
                pos: 0,
                end: bad.len(),
                section: "t",
                item: None,
                strings: vec![],
                budget: 0,
                budget_total: 0,
                prev_storage: 0,
                version: 2,
            };
            assert!(r.varint("v").is_err(), "{bad:?}");
        }
    }
}
