//! The C caller's flash as a [`NorFlash`]: [`clawmem_flash_t`], a struct of
//! function pointers and geometry in the style of littlefs's `lfs_config`,
//! and [`CFlash`], the checked copy of it a store keeps.
//!
//! Owns: the calls into the C callbacks. Invariants: a [`CFlash`] exists
//! only for a geometry [`CFlash::new`] accepted; every call it makes is
//! inside the partition and aligned to the C side's units (reads narrower
//! than `read_size` go through a bounce buffer). The flash type says 1 for
//! every unit, so the store takes its real units from
//! `Config::flash_units`, which the API sets from this struct.
//!
//! Power loss: nothing here is stored; a callback that fails makes the
//! engine's operation fail with [`CFlashError`], as a cut would.

use core::ffi::{c_int, c_void};

use embedded_storage::nor_flash::{
    ErrorType, MultiwriteNorFlash, NorFlash, NorFlashError, NorFlashErrorKind, ReadNorFlash,
};

/// Reads `len` bytes at byte offset `off` of the partition into `buf`.
/// Returns 0, or a negative value on failure.
pub type clawmem_read_fn =
    Option<unsafe extern "C" fn(ctx: *mut c_void, off: u32, buf: *mut u8, len: u32) -> c_int>;
/// Programs `len` bytes at `off` (both multiples of `prog_size`); NOR rules:
/// bits only go from 1 to 0. Returns 0, or a negative value on failure.
pub type clawmem_prog_fn =
    Option<unsafe extern "C" fn(ctx: *mut c_void, off: u32, buf: *const u8, len: u32) -> c_int>;
/// Erases `len` bytes at `off` (both multiples of `erase_size`) to 0xFF.
/// Returns 0, or a negative value on failure.
pub type clawmem_erase_fn =
    Option<unsafe extern "C" fn(ctx: *mut c_void, off: u32, len: u32) -> c_int>;

/// The flash partition a store lives on. The callbacks and `ctx` must stay
/// valid while the store is mounted; offsets are from the partition's start.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct clawmem_flash_t {
    /// Passed to every callback.
    pub ctx: *mut c_void,
    /// Reads bytes.
    pub read: clawmem_read_fn,
    /// Programs bytes.
    pub prog: clawmem_prog_fn,
    /// Erases sectors.
    pub erase: clawmem_erase_fn,
    /// Smallest read, a power of two up to 32 (1 on ESP32 and most NOR).
    pub read_size: u32,
    /// Program unit, a power of two up to 32, each unit written once
    /// between erases (4 on ESP32, 16 with ESP32 flash encryption).
    pub prog_size: u32,
    /// Sector (erase unit), a power of two from 128 B to 128 KiB.
    pub erase_size: u32,
    /// Sectors in the partition, at least 4.
    pub sector_count: u32,
    /// Whether a unit may be programmed again before an erase, clearing
    /// more bits (true for plain SPI NOR, false with flash encryption or
    /// ECC). Only clawmem_memory_forget_scrub needs it.
    pub multiwrite: bool,
}

/// A callback's failure, or a call the adapter refused before making it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CFlashError {
    /// The callback returned this negative value.
    Callback(c_int),
    /// Outside the partition.
    OutOfBounds,
    /// Not aligned to the C side's units.
    NotAligned,
}

impl NorFlashError for CFlashError {
    fn kind(&self) -> NorFlashErrorKind {
        match self {
            CFlashError::Callback(_) => NorFlashErrorKind::Other,
            CFlashError::OutOfBounds => NorFlashErrorKind::OutOfBounds,
            CFlashError::NotAligned => NorFlashErrorKind::NotAligned,
        }
    }
}

/// The checked copy of a [`clawmem_flash_t`].
pub struct CFlash {
    ctx: *mut c_void,
    read: unsafe extern "C" fn(*mut c_void, u32, *mut u8, u32) -> c_int,
    prog: unsafe extern "C" fn(*mut c_void, u32, *const u8, u32) -> c_int,
    erase: unsafe extern "C" fn(*mut c_void, u32, u32) -> c_int,
    read_size: u32,
    prog_size: u32,
    erase_size: u32,
    capacity: u32,
    pub(crate) multiwrite: bool,
}

/// Largest `read_size` (the bounce buffer).
const READ_MAX: usize = 32;

impl CFlash {
    /// Checks `f` and copies it; why it cannot be used otherwise.
    pub fn new(f: &clawmem_flash_t) -> Result<CFlash, &'static str> {
        let (Some(read), Some(prog), Some(erase)) = (f.read, f.prog, f.erase) else {
            return Err("flash: read, prog and erase must all be set");
        };
        let pow2 = |n: u32, max: u32| n.is_power_of_two() && n <= max;
        if !pow2(f.read_size, READ_MAX as u32) {
            return Err("flash: read_size must be a power of two from 1 to 32");
        }
        if !pow2(f.prog_size, 32) {
            return Err("flash: prog_size must be a power of two from 1 to 32");
        }
        if !pow2(f.erase_size, 128 * 1024) || f.erase_size < 128 {
            return Err("flash: erase_size must be a power of two from 128 B to 128 KiB");
        }
        if f.sector_count < 4 {
            return Err("flash: sector_count must be at least 4");
        }
        let capacity = u64::from(f.erase_size) * u64::from(f.sector_count);
        if capacity >= u64::from(u32::MAX) {
            return Err("flash: the partition must be smaller than 4 GiB");
        }
        Ok(CFlash {
            ctx: f.ctx,
            read,
            prog,
            erase,
            read_size: f.read_size,
            prog_size: f.prog_size,
            erase_size: f.erase_size,
            capacity: capacity as u32,
            multiwrite: f.multiwrite,
        })
    }

    /// The units the store must use (`Config::flash_units`).
    pub fn units(&self) -> clawmem::FlashUnits {
        clawmem::FlashUnits {
            write_bytes: self.prog_size,
            erase_bytes: self.erase_size,
        }
    }

    fn in_bounds(&self, off: u32, len: usize) -> Result<(), CFlashError> {
        match u64::from(off) + len as u64 <= u64::from(self.capacity) {
            true => Ok(()),
            false => Err(CFlashError::OutOfBounds),
        }
    }

    fn call_read(&mut self, off: u32, buf: &mut [u8]) -> Result<(), CFlashError> {
        // SAFETY: `read` is the caller's callback, valid while the store is
        // mounted (clawmem_flash_t's contract); `buf` is a live, writable
        // slice of exactly `buf.len()` bytes, and `off..off + len` lies in
        // the partition (checked by the callers of this function).
        let r = unsafe { (self.read)(self.ctx, off, buf.as_mut_ptr(), buf.len() as u32) };
        match r {
            0.. => Ok(()),
            e => Err(CFlashError::Callback(e)),
        }
    }
}

impl ErrorType for CFlash {
    type Error = CFlashError;
}

impl ReadNorFlash for CFlash {
    const READ_SIZE: usize = 1;

    fn read(&mut self, offset: u32, bytes: &mut [u8]) -> Result<(), CFlashError> {
        self.in_bounds(offset, bytes.len())?;
        let rs = self.read_size as usize;
        let mut done = 0usize;
        while done < bytes.len() {
            let at = offset as usize + done;
            let skew = at % rs;
            let left = bytes.len() - done;
            if skew == 0 && left >= rs {
                let n = left / rs * rs;
                self.call_read(at as u32, &mut bytes[done..done + n])?;
                done += n;
            } else {
                // Narrower than a read unit: read the whole unit aside.
                let mut unit = [0u8; READ_MAX];
                self.call_read((at - skew) as u32, &mut unit[..rs])?;
                let n = (rs - skew).min(left);
                bytes[done..done + n].copy_from_slice(&unit[skew..skew + n]);
                done += n;
            }
        }
        Ok(())
    }

    fn capacity(&self) -> usize {
        self.capacity as usize
    }
}

impl NorFlash for CFlash {
    const WRITE_SIZE: usize = 1;
    const ERASE_SIZE: usize = 1;

    fn erase(&mut self, from: u32, to: u32) -> Result<(), CFlashError> {
        if to < from {
            return Err(CFlashError::OutOfBounds);
        }
        self.in_bounds(from, (to - from) as usize)?;
        if !from.is_multiple_of(self.erase_size) || !to.is_multiple_of(self.erase_size) {
            return Err(CFlashError::NotAligned);
        }
        // SAFETY: `erase` is the caller's callback, valid while the store is
        // mounted; the range is inside the partition and sector-aligned.
        match unsafe { (self.erase)(self.ctx, from, to - from) } {
            0.. => Ok(()),
            e => Err(CFlashError::Callback(e)),
        }
    }

    fn write(&mut self, offset: u32, bytes: &[u8]) -> Result<(), CFlashError> {
        self.in_bounds(offset, bytes.len())?;
        if !offset.is_multiple_of(self.prog_size)
            || !bytes.len().is_multiple_of(self.prog_size as usize)
        {
            return Err(CFlashError::NotAligned);
        }
        // SAFETY: `prog` is the caller's callback, valid while the store is
        // mounted; `bytes` is a live slice of `bytes.len()` bytes, inside
        // the partition and aligned to `prog_size`.
        match unsafe { (self.prog)(self.ctx, offset, bytes.as_ptr(), bytes.len() as u32) } {
            0.. => Ok(()),
            e => Err(CFlashError::Callback(e)),
        }
    }
}

/// The engine's scrub programs a unit twice; the API calls it only when the
/// C side set `multiwrite` (clawmem_memory_forget_scrub).
impl MultiwriteNorFlash for CFlash {}
