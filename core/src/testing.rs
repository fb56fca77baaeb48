//! Test support: a small mutation fuzzer for the parsers that read untrusted input (plugin
//! files' ELF headers, plugins' op text, device specs). Deterministic (a fixed seed per test),
//! so a failure reproduces; each target runs many thousands of inputs in the ordinary test run.

/// Mutates byte strings the way coverage-less fuzzers do: a few random edits per input, biased
/// towards the values that break length and offset arithmetic.
pub(crate) struct Mutator(u64);

/// Values that break bounds checks when they land in a length, count or offset field.
const INTERESTING: [u64; 12] = [
    0,
    1,
    0x7f,
    0x80,
    0xff,
    0x7fff,
    0xffff,
    0x7fff_ffff,
    0xffff_ffff,
    0x8000_0000_0000_0000,
    u64::MAX,
    4096,
];

impl Mutator {
    pub(crate) fn new(seed: u64) -> Mutator {
        Mutator(seed.max(1))
    }

    /// xorshift64*: fast, and good enough to pick edits.
    pub(crate) fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// A number in `0..n` (`n` > 0).
    pub(crate) fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    /// `input` with one to four random edits.
    pub(crate) fn mutate(&mut self, input: &[u8]) -> Vec<u8> {
        let mut v = input.to_vec();
        for _ in 0..1 + self.below(4) {
            self.edit(&mut v);
        }
        v
    }

    /// [`Mutator::mutate`] of a string, as text (invalid UTF-8 replaced).
    pub(crate) fn mutate_str(&mut self, input: &str) -> String {
        String::from_utf8_lossy(&self.mutate(input.as_bytes())).into_owned()
    }

    fn edit(&mut self, v: &mut Vec<u8>) {
        if v.is_empty() {
            v.push(self.next() as u8);
            return;
        }
        let at = self.below(v.len());
        match self.below(8) {
            0 => v[at] ^= 1 << self.below(8),
            1 => v[at] = INTERESTING[self.below(INTERESTING.len())] as u8,
            2 => {
                // An interesting integer of 2, 4 or 8 bytes, little- or big-endian.
                let width = [2, 4, 8][self.below(3)];
                let value = INTERESTING[self.below(INTERESTING.len())];
                // Its low `width` bytes, in either byte order.
                let bytes = if self.below(2) == 0 {
                    value.to_le_bytes()[..width].to_vec()
                } else {
                    value.to_be_bytes()[8 - width..].to_vec()
                };
                for (i, b) in bytes.iter().enumerate() {
                    if let Some(slot) = v.get_mut(at + i) {
                        *slot = *b;
                    }
                }
            }
            3 => v.truncate(at),
            4 => {
                let n = 1 + self.below(8);
                let junk: Vec<u8> = (0..n).map(|_| self.next() as u8).collect();
                v.splice(at..at, junk);
            }
            5 => {
                let end = (at + 1 + self.below(16)).min(v.len());
                v.drain(at..end);
            }
            6 => {
                // A piece of the input again somewhere else (repeats separators, brackets).
                let end = (at + 1 + self.below(16)).min(v.len());
                let piece = v[at..end].to_vec();
                let to = self.below(v.len() + 1);
                v.splice(to..to, piece);
            }
            _ => {
                // A byte the parsers treat specially.
                const SPECIAL: &[u8] = b":;,=@()[]{}\"\\/ \n\t\0.-_";
                v[at] = SPECIAL[self.below(SPECIAL.len())];
            }
        }
    }
}
