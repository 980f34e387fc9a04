//! Invariants checked:
//!
//! - Erased bytes read 0xFF: a new flash, and every sector after an erase.
//! - A program ANDs: every bit becomes `old AND new`, and reads return
//!   exactly what the reference model holds.
//! - Write budgets: a program that would exceed any word's budget under the
//!   preset's rule (unlimited, at most 2, second write only of zeros, once) is
//!   refused whole with `WriteBudget { address, writes, rule }` of the first
//!   spent word, changes nothing and is counted; an erase gives the budget
//!   back. Program counts per word match the model.
//! - Misaligned and out-of-bounds reads, programs, erases (`to < from`
//!   included) and bit flips are refused with the exact error and the right
//!   `NorFlashErrorKind`, and change nothing.
//! - While power is off every call fails (`PowerOff`, after the argument
//!   checks) and changes nothing; `restore_power` disarms a pending cut and
//!   keeps injected errors; `clear_faults` keeps the power state.
//! - A power cut fires at exactly the armed `Op(n)` or `Byte(n)`, counting
//!   only calls that reach the cells, returns `PowerCut(cut)` and leaves power
//!   off. A `Prefix(k)` tear or `Byte` cut lands exactly the first bytes and
//!   counts them; a `Bits` program tear leaves every byte between
//!   `old AND new` and `old`; a `Random` one changes nothing outside the call;
//!   a torn erase erases whole sectors, then one in flight whose bits only go
//!   from 0 to 1, then leaves the rest, and counts exactly the sectors it
//!   touched. The model then takes the flash's bytes for the call.
//! - Injected errors hit the right call of their kind, once or from then on.
//! - Bit flips at rest change exactly the flipped bits and no counter.
//! - Counters (calls, bytes, erases, per-sector erase counts, budget
//!   violations, failed calls, power cuts) match the model; device time only
//!   grows, and only when the flash did work; `reset_counters` keeps wear.
//! - `embedded-storage` calls through `Nor` behave as the inherent calls, on
//!   a snapshot that then replaces the flash.
//! - `snapshot()` copies everything (contents, budgets, counters, faults,
//!   power) and stays unchanged while the flash goes on; rewinding to it
//!   resumes exactly there.
//!
//! The shared logic is in `clawmem_fuzz::sim_flash_ops`, which
//! `cargo test` here also runs on random inputs.
#![no_main]

use clawmem_fuzz::sim_flash_ops::{run, Input};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: Input| {
    run(&input);
});
