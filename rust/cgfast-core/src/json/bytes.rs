//! The scanner's searches of a byte window, shared by the cursor and the fast field
//! reader ([`crate::read::event_fields`]): where a string's plain text ends (sixteen
//! bytes at a time on x86-64), where white space ends, where a number ends.

use crate::json::{Scan, ScanError};

/// The offset of the first byte at or after `from` that ends or interrupts a string's
/// plain ASCII text: `"`, `\\`, a control character, or a byte that is not ASCII (which
/// the string's reader checks as UTF-8).
#[inline(always)]
pub(crate) fn special_byte(buf: &[u8], from: usize) -> Option<usize> {
    special_byte_of::<true>(buf, from)
}

/// [`special_byte`], passing over bytes that are not ASCII: the end of a stretch of
/// text to check as UTF-8.
#[inline]
pub(crate) fn special_ascii_byte(buf: &[u8], from: usize) -> Option<usize> {
    special_byte_of::<false>(buf, from)
}

#[inline(always)]
fn special_byte_of<const NON_ASCII: bool>(buf: &[u8], from: usize) -> Option<usize> {
    #[cfg(all(target_arch = "x86_64", not(cgfast_portable)))]
    let (from, found) = special_byte_sse2::<NON_ASCII>(buf, from);
    // `--cfg cgfast_portable` tests the portable path on x86-64 too (scripts/test)
    #[cfg(any(not(target_arch = "x86_64"), cgfast_portable))]
    let (from, found) = special_byte_words::<NON_ASCII>(buf, from);
    match found {
        Some(at) => Some(at),
        None => buf[from..].iter().position(|&b| is_special::<NON_ASCII>(b)).map(|k| from + k),
    }
}

#[inline]
fn is_special<const NON_ASCII: bool>(b: u8) -> bool {
    b == b'"' || b == b'\\' || b < 0x20 || (NON_ASCII && b >= 0x80)
}

/// Sixteen bytes at a time; what is left of the buffer after the last whole block is
/// the caller's (the offset returned first).
#[cfg(all(target_arch = "x86_64", not(cgfast_portable)))]
#[inline]
fn special_byte_sse2<const NON_ASCII: bool>(buf: &[u8], mut at: usize) -> (usize, Option<usize>) {
    use std::arch::x86_64::*;
    // SAFETY: SSE2 is part of every x86-64 processor, and each load reads the 16 bytes
    // `buf[at..at + 16]`, inside the slice.
    unsafe {
        let quote = _mm_set1_epi8(b'"' as i8);
        let backslash = _mm_set1_epi8(b'\\' as i8);
        let control_max = _mm_set1_epi8(0x1f);
        while at + 16 <= buf.len() {
            let v = _mm_loadu_si128(buf.as_ptr().add(at) as *const __m128i);
            let control = _mm_cmpeq_epi8(_mm_max_epu8(v, control_max), control_max);
            let mut hits =
                _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(v, quote), _mm_cmpeq_epi8(v, backslash)), control);
            if NON_ASCII {
                // a byte that is not ASCII has its top bit set, which the mask takes
                hits = _mm_or_si128(hits, v);
            }
            let mask = _mm_movemask_epi8(hits) as u32;
            if mask != 0 {
                return (at, Some(at + mask.trailing_zeros() as usize));
            }
            at += 16;
        }
    }
    (at, None)
}

/// Eight bytes at a time, in the bits of a word.
#[cfg(any(not(target_arch = "x86_64"), cgfast_portable))]
#[inline]
fn special_byte_words<const NON_ASCII: bool>(buf: &[u8], mut at: usize) -> (usize, Option<usize>) {
    const LO: u64 = 0x0101_0101_0101_0101;
    const HI: u64 = 0x8080_8080_8080_8080;
    // Nonzero where a byte equals `byte` (exact for the lowest such byte).
    let equal = |word: u64, byte: u8| {
        let x = word ^ (LO * byte as u64);
        x.wrapping_sub(LO) & !x & HI
    };
    while at + 8 <= buf.len() {
        let word = u64::from_le_bytes(buf[at..at + 8].try_into().expect("8 bytes"));
        let mut hits = equal(word, b'"') | equal(word, b'\\') | (word.wrapping_sub(LO * 0x20) & !word & HI);
        if NON_ASCII {
            hits |= word & HI;
        }
        if hits != 0 {
            return (at, Some(at + (hits.trailing_zeros() / 8) as usize));
        }
        at += 8;
    }
    (at, None)
}

#[inline]
fn is_ws(b: u8) -> bool {
    matches!(b, b' ' | b'\n' | b'\r' | b'\t')
}

/// The first byte at or after `i` that is not white space, and where it is; `None` where
/// `buf` ends first.
#[inline(always)]
pub(crate) fn after_ws(buf: &[u8], mut i: usize) -> Option<(usize, u8)> {
    let b = *buf.get(i)?;
    // white space is at most b' ': one comparison for the common case
    if b > b' ' {
        return Some((i, b));
    }
    // one space, as after the `:` and `,` of most traces
    if b == b' ' {
        let next = *buf.get(i + 1)?;
        if next > b' ' {
            return Some((i + 1, next));
        }
    }
    loop {
        let b = *buf.get(i)?;
        if !is_ws(b) {
            return Some((i, b));
        }
        i += 1;
    }
}

/// The closing quote of the string whose opening quote is at `quote`, where its text
/// is plain ASCII (no escape, no control character); `None` otherwise, or where `buf`
/// ends first.
#[inline(always)]
pub(crate) fn plain_string_end(buf: &[u8], quote: usize) -> Option<usize> {
    special_byte(buf, quote + 1).filter(|&at| buf[at] == b'"')
}

/// The end of the number at `start`, as JSON writes numbers (not `NaN` or the
/// infinities).
#[inline(always)]
pub(crate) fn number_end(buf: &[u8], start: usize) -> Scan<usize> {
    let at = |i: usize| buf.get(i).copied().ok_or(ScanError::Incomplete);
    let syntax = |at: usize, expected: &'static str| Err(ScanError::Syntax { at, expected });
    let mut i = start;
    if at(i)? == b'-' {
        i += 1;
    }
    match at(i)? {
        b'0' => i += 1,
        b'1'..=b'9' => {
            while at(i)?.is_ascii_digit() {
                i += 1;
            }
        }
        _ => return syntax(i, "a number"),
    }
    if at(i)? == b'.' {
        i += 1;
        if !at(i)?.is_ascii_digit() {
            return syntax(i, "a digit");
        }
        while at(i)?.is_ascii_digit() {
            i += 1;
        }
    }
    if matches!(at(i)?, b'e' | b'E') {
        i += 1;
        if matches!(at(i)?, b'+' | b'-') {
            i += 1;
        }
        if !at(i)?.is_ascii_digit() {
            return syntax(i, "a digit");
        }
        while at(i)?.is_ascii_digit() {
            i += 1;
        }
    }
    Ok(i)
}

/// The end of the flat array of small unsigned integers (`[1, 2, 3]`) at `start`;
/// `None` for any other value, even a valid one.
#[inline]
pub(crate) fn small_int_array_end(buf: &[u8], start: usize) -> Option<usize> {
    if buf.get(start) != Some(&b'[') {
        return None;
    }
    let mut i = start + 1;
    loop {
        let mut b = *buf.get(i)?;
        while is_ws(b) {
            i += 1;
            b = *buf.get(i)?;
        }
        let first = i;
        while b.is_ascii_digit() {
            i += 1;
            b = *buf.get(i)?;
        }
        if i == first || (i - first > 1 && buf[first] == b'0') {
            return None;
        }
        while is_ws(b) {
            i += 1;
            b = *buf.get(i)?;
        }
        match b {
            b',' => i += 1,
            b']' => return Some(i + 1),
            _ => return None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn special_bytes_are_found_wherever_they_are() {
        // every offset of a block, and the tail after the last whole one, on the path
        // this build takes (SSE2, or the words of `--cfg cgfast_portable`); bytes that
        // are not ASCII stop one search and not the other
        for len in 0..40 {
            for at in 0..=len {
                for special in [b'"', b'\\', 0x00, 0x1f, 0x80, 0xff] {
                    let mut buf = vec![b'a'; len];
                    buf.extend_from_slice(b" \x7f\xe9~");
                    let end = buf.len();
                    if at < end {
                        buf[at] = special;
                    }
                    for from in [0, at.min(3)] {
                        let want = buf[from..].iter().position(|&b| is_special::<true>(b)).map(|k| from + k);
                        assert_eq!(special_byte(&buf, from), want, "{len} {at} {special} {from}");
                        let want = buf[from..].iter().position(|&b| is_special::<false>(b)).map(|k| from + k);
                        assert_eq!(
                            special_ascii_byte(&buf, from),
                            want,
                            "ascii: {len} {at} {special} {from}"
                        );
                    }
                }
            }
        }
    }
}
