//! Helpers shared by the unit tests (compiled for tests only).

extern crate std;

use std::vec::Vec;

/// Up to `max_len - 1` bytes drawn from `alphabet` by a xorshift64 stream
/// kept in `state`: the unit tests' "random documents that must never make a
/// parser panic".
pub(crate) fn random_bytes(state: &mut u64, alphabet: &[u8], max_len: u64) -> Vec<u8> {
    let mut out = Vec::new();
    for _ in 0..(*state % max_len) {
        *state ^= *state << 13;
        *state ^= *state >> 7;
        *state ^= *state << 17;
        out.push(alphabet[(*state % alphabet.len() as u64) as usize]);
    }
    out
}
