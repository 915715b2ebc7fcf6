//! Invalid UTF-8 in a trace's strings (the only place JSON lets it stand): counted where
//! the scanner meets text that is not ASCII, and left as it is. Each invalid sequence is
//! what a decoder replaces with one U+FFFD.

/// Invalid UTF-8 sequences found, and where the first is.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct InvalidUtf8 {
    pub count: u64,
    /// A byte offset: in the window while a cursor counts, in the (decompressed) input
    /// once the walk has taken them.
    pub first_at: Option<u64>,
}

impl InvalidUtf8 {
    /// Add what a later stretch of the input holds.
    pub fn add(&mut self, later: InvalidUtf8) {
        self.count += later.count;
        self.first_at = self.first_at.or(later.first_at);
    }

    /// Count the invalid sequences of `text`, whose first byte is at `at`: the text of a
    /// string up to a byte that ends it or interrupts it, so a sequence it cuts short
    /// is invalid too.
    pub fn check(&mut self, text: &[u8], at: usize) {
        let mut from = 0;
        while let Err(e) = std::str::from_utf8(&text[from..]) {
            let bad = from + e.valid_up_to();
            self.count += 1;
            self.first_at.get_or_insert((at + bad) as u64);
            match e.error_len() {
                Some(len) => from = bad + len,
                None => break,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// As a decoder counts them: one U+FFFD per invalid sequence.
    fn replacements(bytes: &[u8]) -> u64 {
        String::from_utf8_lossy(bytes).chars().filter(|&c| c == '\u{FFFD}').count() as u64
    }

    #[test]
    fn counts_what_a_decoder_replaces() {
        let cases: [&[u8]; 8] = [
            b"plain ascii",
            "caf\u{e9} \u{1F600} \u{4e2d}".as_bytes(),
            b"\xff\xfe",
            b"a\xe2\x82",
            b"\xe2\x82 b \xf0\x9f\x98 c \xc3",
            b"\xed\xa0\x80 surrogate",
            b"\xf4\x90\x80\x80 beyond U+10FFFF, \xc0\xaf overlong",
            b"\x80\x80\x80\x80\x80",
        ];
        for bytes in cases {
            let mut found = InvalidUtf8::default();
            found.check(bytes, 10);
            assert_eq!(found.count, replacements(bytes), "{bytes:?}");
        }
        let mut found = InvalidUtf8::default();
        found.check(b"ok \xff then \xfe", 100);
        assert_eq!(found, InvalidUtf8 { count: 2, first_at: Some(103) });
    }
}
