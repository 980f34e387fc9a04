//! A RAM-backed NOR flash with the ESP32's geometry (4 KiB sectors, 4 B
//! write unit, the `esp32` preset of `sim/src/model.rs`) that enforces the
//! NOR rules instead of trusting the engine:
//!
//! - a write may only clear bits (1 to 0); one that would set a bit is
//!   refused;
//! - each 4 B word is written at most once between two erases (stricter
//!   than the ESP32's SPI NOR, which ANDs rewrites; so this type is not
//!   `MultiwriteNorFlash`, and the engine may not rely on rewrites);
//! - writes are aligned to 4 B, erases to 4 KiB, and everything stays
//!   inside the partition.
//!
//! A refused call writes nothing, returns an error and is counted in
//! [`Stats::violations`]. The partition lives in the board's PSRAM at
//! [`BASE`]; one bit per word (written since the last erase) and the erase
//! count of each sector live after it.

use core::ptr;

use embedded_storage::nor_flash::{
    check_erase, check_read, check_write, ErrorType, NorFlash, NorFlashError, NorFlashErrorKind,
    ReadNorFlash,
};

/// First byte of the partition: the mps2-an386's PSRAM.
pub const BASE: usize = 0x2100_0000;
/// Largest partition: 12 MiB of the 16 MiB PSRAM.
pub const MAX_BYTES: usize = 12 * 1024 * 1024;
/// Write unit.
pub const WORD: usize = 4;
/// Erase unit.
pub const SECTOR: usize = 4096;
/// One bit per word of the largest partition.
const WRITTEN: usize = BASE + MAX_BYTES;
const WRITTEN_WORDS: usize = MAX_BYTES / WORD / 32;
/// Erase count of each sector (u32), and the same at the end of the format.
const COUNTS: usize = WRITTEN + WRITTEN_WORDS * 4;
const MAX_SECTORS: usize = MAX_BYTES / SECTOR;
const COUNTS_AT_FORMAT: usize = COUNTS + MAX_SECTORS * 4;
const _: () = assert!(COUNTS_AT_FORMAT + MAX_SECTORS * 4 <= BASE + 16 * 1024 * 1024);

/// What went wrong.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FlashError {
    /// Outside the partition.
    OutOfBounds,
    /// Not aligned to the write or erase unit.
    NotAligned,
    /// A word written twice since its sector's last erase.
    Rewrite {
        /// Its offset.
        offset: u32,
    },
    /// A write that would turn a 0 bit into 1.
    SetsBit {
        /// Offset of the word.
        offset: u32,
    },
}

impl NorFlashError for FlashError {
    fn kind(&self) -> NorFlashErrorKind {
        match self {
            FlashError::OutOfBounds => NorFlashErrorKind::OutOfBounds,
            FlashError::NotAligned => NorFlashErrorKind::NotAligned,
            FlashError::Rewrite { .. } | FlashError::SetsBit { .. } => NorFlashErrorKind::Other,
        }
    }
}

impl From<NorFlashErrorKind> for FlashError {
    fn from(kind: NorFlashErrorKind) -> Self {
        match kind {
            NorFlashErrorKind::NotAligned => FlashError::NotAligned,
            _ => FlashError::OutOfBounds,
        }
    }
}

/// Counters of the whole run (they survive remounts).
#[derive(Debug, Clone, Copy, Default)]
pub struct Stats {
    /// Sector erases.
    pub erases: u32,
    /// Bytes programmed.
    pub programmed: u64,
    /// Bytes erased.
    pub erased: u64,
    /// Bytes read.
    pub read: u64,
    /// Calls refused by the rules above.
    pub violations: u32,
}

static mut STATS: Stats = Stats {
    erases: 0,
    programmed: 0,
    erased: 0,
    read: 0,
    violations: 0,
};
static mut SIZE: usize = 0;

/// The counters.
pub fn stats() -> Stats {
    // SAFETY: single core, no interrupts use it.
    unsafe { ptr::read(ptr::addr_of!(STATS)) }
}

fn stats_mut() -> &'static mut Stats {
    // SAFETY: single core, no interrupts; the reference never outlives a
    // flash call.
    unsafe { &mut *ptr::addr_of_mut!(STATS) }
}

fn counts(at: usize) -> &'static mut [u32] {
    // SAFETY: PSRAM reserved for these tables (see the addresses above);
    // single core, no interrupts, no reference outlives a call.
    unsafe { core::slice::from_raw_parts_mut(at as *mut u32, MAX_SECTORS) }
}

fn written() -> &'static mut [u32] {
    // SAFETY: as `counts`.
    unsafe { core::slice::from_raw_parts_mut(WRITTEN as *mut u32, WRITTEN_WORDS) }
}

fn data() -> &'static mut [u8] {
    // SAFETY: as `counts`; `SIZE` <= MAX_BYTES.
    unsafe { core::slice::from_raw_parts_mut(BASE as *mut u8, SIZE) }
}

/// Lays out a blank (all 0xFF, nothing written, never erased) partition of
/// `size` bytes, a multiple of [`SECTOR`] up to [`MAX_BYTES`].
pub fn init(size: usize) -> Result<(), &'static str> {
    if size == 0 || size % SECTOR != 0 || size > MAX_BYTES {
        return Err("partition size must be a non-zero multiple of 4 KiB, at most 12 MiB");
    }
    // SAFETY: single core, before any flash handle exists.
    unsafe {
        SIZE = size;
        *ptr::addr_of_mut!(STATS) = Stats::default();
    }
    data().fill(0xFF);
    written()[..size / WORD / 32].fill(0);
    counts(COUNTS)[..size / SECTOR].fill(0);
    Ok(())
}

/// Remembers the erase counts as they are (after the initial format).
pub fn mark_format_done() {
    let n = sectors();
    let (now, then) = (counts(COUNTS), counts(COUNTS_AT_FORMAT));
    then[..n].copy_from_slice(&now[..n]);
}

/// Sectors of the partition.
pub fn sectors() -> usize {
    // SAFETY: written once by `init`.
    unsafe { SIZE / SECTOR }
}

/// Erase count of sector `s`, and the part of it since the format.
pub fn erase_count(s: usize) -> (u32, u32) {
    let (now, then) = (counts(COUNTS)[s], counts(COUNTS_AT_FORMAT)[s]);
    (now, now - then)
}

/// A handle on the partition: what the engine gets. Only one is alive at a
/// time (the store owns it; a remount drops the store and takes a new one).
#[derive(Debug)]
pub struct RamFlash {
    _private: (),
}

impl RamFlash {
    /// A handle on the partition laid out by [`init`].
    pub fn take() -> Self {
        RamFlash { _private: () }
    }
}

fn refuse(e: FlashError) -> FlashError {
    stats_mut().violations += 1;
    e
}

impl ErrorType for RamFlash {
    type Error = FlashError;
}

impl ReadNorFlash for RamFlash {
    const READ_SIZE: usize = 1;

    fn read(&mut self, offset: u32, bytes: &mut [u8]) -> Result<(), Self::Error> {
        check_read(self, offset, bytes.len()).map_err(|k| refuse(k.into()))?;
        let at = offset as usize;
        bytes.copy_from_slice(&data()[at..at + bytes.len()]);
        stats_mut().read += bytes.len() as u64;
        Ok(())
    }

    fn capacity(&self) -> usize {
        data().len()
    }
}

impl NorFlash for RamFlash {
    const WRITE_SIZE: usize = WORD;
    const ERASE_SIZE: usize = SECTOR;

    fn erase(&mut self, from: u32, to: u32) -> Result<(), Self::Error> {
        check_erase(self, from, to).map_err(|k| refuse(k.into()))?;
        let (first, last) = (from as usize / SECTOR, to as usize / SECTOR);
        data()[from as usize..to as usize].fill(0xFF);
        let per_sector = SECTOR / WORD / 32;
        written()[first * per_sector..last * per_sector].fill(0);
        for c in &mut counts(COUNTS)[first..last] {
            *c += 1;
        }
        let s = stats_mut();
        s.erases += (last - first) as u32;
        s.erased += u64::from(to - from);
        Ok(())
    }

    fn write(&mut self, offset: u32, bytes: &[u8]) -> Result<(), Self::Error> {
        check_write(self, offset, bytes.len()).map_err(|k| refuse(k.into()))?;
        let start = offset as usize;
        let mem = data();
        let bits = written();
        // The whole call is checked before anything lands.
        for (i, new) in bytes.chunks_exact(WORD).enumerate() {
            let at = start + i * WORD;
            let w = at / WORD;
            if bits[w / 32] & (1 << (w % 32)) != 0 {
                return Err(refuse(FlashError::Rewrite { offset: at as u32 }));
            }
            if mem[at..at + WORD].iter().zip(new).any(|(o, n)| n & !o != 0) {
                return Err(refuse(FlashError::SetsBit { offset: at as u32 }));
            }
        }
        for (i, new) in bytes.chunks_exact(WORD).enumerate() {
            let at = start + i * WORD;
            for (o, n) in mem[at..at + WORD].iter_mut().zip(new) {
                *o &= n;
            }
            let w = at / WORD;
            bits[w / 32] |= 1 << (w % 32);
        }
        stats_mut().programmed += bytes.len() as u64;
        Ok(())
    }
}

/// Checks on the target that the rules above are enforced: a rewrite, a
/// misaligned or out-of-bounds write, read or erase is refused and counted;
/// an erase makes a word writable again. Leaves a partition to be laid out
/// again by [`init`].
pub fn selftest() -> Result<(), &'static str> {
    init(2 * SECTOR)?;
    let mut f = RamFlash::take();
    let word = [0x12, 0x34, 0x56, 0x78];
    let refused = [
        f.write(0, &word).is_ok() && f.write(0, &[0x02, 0x04, 0x06, 0x08]).is_err(),
        f.write(2, &word).is_err(),
        f.write(8, &word[..2]).is_err(),
        f.write((2 * SECTOR) as u32, &word).is_err(),
        f.read((2 * SECTOR - 1) as u32, &mut [0; 2]).is_err(),
        f.erase(0, 100).is_err(),
        f.erase(0, (3 * SECTOR) as u32).is_err(),
    ];
    if refused.iter().any(|ok| !ok) || stats().violations != 7 {
        return Err("flash self-test: a call that breaks the NOR rules was not refused");
    }
    let mut back = [0; 4];
    let again = f.erase(0, SECTOR as u32).is_ok()
        && f.read(0, &mut back).is_ok()
        && back == [0xFF; 4]
        && f.write(0, &word).is_ok()
        && f.read(0, &mut back).is_ok()
        && back == word
        && erase_count(0).0 == 1;
    if !again {
        return Err("flash self-test: an erased word could not be written again");
    }
    Ok(())
}
