//! Invalid UTF-8 in a trace's strings (the only place JSON lets it stand): counted as
//! the trace is read, and copied through as it is. Each invalid sequence is what a
//! decoder would replace with one U+FFFD.

/// Invalid UTF-8 sequences found, and where the first is.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct InvalidUtf8 {
    pub(crate) count: u64,
    /// A byte offset in the (decompressed) input.
    pub(crate) first_at: Option<u64>,
}

impl InvalidUtf8 {
    /// Add what a later stretch of the input holds.
    pub(crate) fn add(&mut self, later: InvalidUtf8) {
        self.count += later.count;
        self.first_at = self.first_at.or(later.first_at);
    }

    fn found(&mut self, at: u64) {
        self.count += 1;
        self.first_at.get_or_insert(at);
    }
}

/// Checks the input as it is read, piece after piece, up to an offset: a sequence cut
/// by the end of one piece is finished with the next.
#[derive(Debug)]
pub(crate) struct Utf8Check {
    found: InvalidUtf8,
    /// The start of a sequence the last piece ended in, and where it is.
    pending: ([u8; 4], usize),
    pending_at: u64,
    /// Bytes from here on are another's to check.
    until: u64,
}

impl Utf8Check {
    /// A check of the input's bytes before `until` (all of it for `None`).
    pub(crate) fn new(until: Option<u64>) -> Utf8Check {
        Utf8Check {
            found: InvalidUtf8::default(),
            pending: ([0; 4], 0),
            pending_at: 0,
            until: until.unwrap_or(u64::MAX),
        }
    }

    /// Check `bytes`, the input from offset `at` on (right after what was checked before).
    pub(crate) fn feed(&mut self, bytes: &[u8], at: u64) {
        let bytes = &bytes[..bytes.len().min(self.until.saturating_sub(at) as usize)];
        let (mut bytes, mut at) = (bytes, at);
        let (held, held_len) = self.pending;
        if held_len > 0 {
            // the pending sequence and enough bytes to finish it (a sequence takes at most 4)
            let take = bytes.len().min(3);
            let mut joined = [0u8; 7];
            joined[..held_len].copy_from_slice(&held[..held_len]);
            joined[held_len..held_len + take].copy_from_slice(&bytes[..take]);
            let joined = &joined[..held_len + take];
            let tail = self.check(joined, self.pending_at);
            let checked = joined.len() - tail;
            if checked < held_len {
                // still cut short: `bytes` was shorter than the rest of the sequence
                self.hold(&joined[checked..], self.pending_at + checked as u64);
                return;
            }
            self.pending.1 = 0;
            // what the joined check took of `bytes`; an unfinished tail is checked again
            let used = checked - held_len;
            bytes = &bytes[used..];
            at += used as u64;
        }
        let tail = self.check(bytes, at);
        let checked = bytes.len() - tail;
        if tail > 0 {
            self.hold(&bytes[checked..], at + checked as u64);
        }
    }

    /// What was found; an input that ends inside a sequence ends in an invalid one.
    pub(crate) fn finish(mut self) -> InvalidUtf8 {
        if self.pending.1 > 0 {
            self.found.found(self.pending_at);
        }
        self.found
    }

    /// Count the invalid sequences of `bytes` (at input offset `at`); how many bytes at
    /// its end start a sequence it cuts short.
    fn check(&mut self, bytes: &[u8], at: u64) -> usize {
        let mut from = 0;
        loop {
            match std::str::from_utf8(&bytes[from..]) {
                Ok(_) => return 0,
                Err(e) => {
                    let bad = from + e.valid_up_to();
                    match e.error_len() {
                        Some(len) => {
                            self.found.found(at + bad as u64);
                            from = bad + len;
                        }
                        None => return bytes.len() - bad,
                    }
                }
            }
        }
    }

    fn hold(&mut self, start: &[u8], at: u64) {
        self.pending.0[..start.len()].copy_from_slice(start);
        self.pending.1 = start.len();
        self.pending_at = at;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a check finds in `bytes` fed in pieces of `size`.
    fn in_pieces(bytes: &[u8], size: usize, until: Option<u64>) -> InvalidUtf8 {
        let mut check = Utf8Check::new(until);
        for (i, piece) in bytes.chunks(size.max(1)).enumerate() {
            check.feed(piece, (i * size) as u64);
        }
        check.finish()
    }

    /// As a decoder counts them: one U+FFFD per invalid sequence.
    fn replacements(bytes: &[u8]) -> u64 {
        String::from_utf8_lossy(bytes).chars().filter(|&c| c == '\u{FFFD}').count() as u64
    }

    #[test]
    fn counts_what_a_decoder_replaces_however_the_input_is_cut() {
        let cases: [&[u8]; 8] = [
            b"plain ascii",
            "caf\u{e9} \u{1F600} \u{4e2d}".as_bytes(),
            b"\"\xff\xfe\"",
            b"a\xe2\x82",
            b"\xe2\x82 b \xf0\x9f\x98 c \xc3",
            b"\xed\xa0\x80 surrogate",
            b"\xf4\x90\x80\x80 beyond U+10FFFF, \xc0\xaf overlong",
            b"\x80\x80\x80\x80\x80",
        ];
        for bytes in cases {
            let whole = in_pieces(bytes, bytes.len(), None);
            assert_eq!(whole.count, replacements(bytes), "{bytes:?}");
            for size in 1..=5 {
                assert_eq!(in_pieces(bytes, size, None), whole, "{bytes:?} in pieces of {size}");
            }
        }
        let found = in_pieces(b"ok \xff then \xfe", 4, None);
        assert_eq!(found, InvalidUtf8 { count: 2, first_at: Some(3) });
    }

    #[test]
    fn checks_only_up_to_its_end() {
        let bytes = b"a\xffb{\xfe";
        assert_eq!(in_pieces(bytes, 2, Some(3)), InvalidUtf8 { count: 1, first_at: Some(1) });
        assert_eq!(in_pieces(bytes, 2, None).count, 2);
        let mut first = in_pieces(bytes, 2, Some(3));
        first.add(InvalidUtf8 { count: 1, first_at: Some(4) });
        assert_eq!(first, in_pieces(bytes, 2, None));
    }
}
