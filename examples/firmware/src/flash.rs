//! An example `NorFlash` driver for the internal flash of an STM32L476-like
//! part (RM0351): 1 MiB in two banks of 512 KiB, 2 KiB pages, 64-bit
//! (double-word) programming with ECC.
//!
//! **An example, not a tested driver.** It is written from the reference
//! manual's register description and has never run on hardware; it exists so
//! that the firmware example links clawmem against a realistic flash type.
//! Check it against your part's reference manual before use.
//!
//! The partition is the whole of bank 2 (`0x0808_0000..0x0810_0000`), which
//! `memory.x` keeps out of the firmware image. Code runs from bank 1 while
//! bank 2 is programmed or erased (read-while-write between banks), so the
//! CPU is not stalled and no code needs to run from RAM. Interrupt handlers
//! that read bank 2 would stall; clawmem does not need interrupts.
//!
//! ECC means a double-word can be programmed once between erases: this type
//! implements [`NorFlash`] but not `MultiwriteNorFlash`, so
//! `Store::memory_forget_scrub_in_place` is not available and
//! `Store::memory_forget_scrub` (which erases) is used instead.
//!
//! All `unsafe` of the example is here: volatile accesses to the FLASH
//! registers and to the memory-mapped partition. clawmem itself is
//! `forbid(unsafe_code)`.

use core::ptr;
use core::sync::atomic::{AtomicBool, Ordering};

use embedded_storage::nor_flash::{
    check_erase, check_read, check_write, ErrorType, NorFlash, NorFlashError, NorFlashErrorKind,
    ReadNorFlash,
};

/// First byte of the partition: bank 2.
pub const PARTITION_BASE: usize = 0x0808_0000;
/// Partition size: all of bank 2.
pub const PARTITION_BYTES: usize = 512 * 1024;
/// Erase unit: one page.
pub const PAGE_BYTES: usize = 2048;
/// Program unit: one double-word.
pub const DOUBLE_WORD: usize = 8;

/// FLASH register block (RM0351 section 3.7).
const FLASH_BASE: usize = 0x4002_2000;
const ACR: *mut u32 = FLASH_BASE as *mut u32;
const KEYR: *mut u32 = (FLASH_BASE + 0x08) as *mut u32;
const SR: *mut u32 = (FLASH_BASE + 0x10) as *mut u32;
const CR: *mut u32 = (FLASH_BASE + 0x14) as *mut u32;

const KEY1: u32 = 0x4567_0123;
const KEY2: u32 = 0xCDEF_89AB;

// FLASH_ACR
const ACR_DCEN: u32 = 1 << 10;
const ACR_DCRST: u32 = 1 << 12;

// FLASH_SR
const SR_EOP: u32 = 1 << 0;
const SR_OPERR: u32 = 1 << 1;
const SR_PROGERR: u32 = 1 << 3;
const SR_WRPERR: u32 = 1 << 4;
const SR_PGAERR: u32 = 1 << 5;
const SR_SIZERR: u32 = 1 << 6;
const SR_PGSERR: u32 = 1 << 7;
const SR_MISERR: u32 = 1 << 8;
const SR_FASTERR: u32 = 1 << 9;
const SR_RDERR: u32 = 1 << 14;
const SR_OPTVERR: u32 = 1 << 15;
const SR_BSY: u32 = 1 << 16;
const SR_ERRORS: u32 = SR_OPERR
    | SR_PROGERR
    | SR_WRPERR
    | SR_PGAERR
    | SR_SIZERR
    | SR_PGSERR
    | SR_MISERR
    | SR_FASTERR
    | SR_RDERR
    | SR_OPTVERR;

// FLASH_CR
const CR_PG: u32 = 1 << 0;
const CR_PER: u32 = 1 << 1;
const CR_PNB_SHIFT: u32 = 3;
const CR_PNB_MASK: u32 = 0xFF << CR_PNB_SHIFT;
const CR_BKER: u32 = 1 << 11;
const CR_STRT: u32 = 1 << 16;
const CR_LOCK: u32 = 1 << 31;

/// What went wrong.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FlashError {
    /// Outside the partition.
    OutOfBounds,
    /// Not aligned to the program or erase unit.
    NotAligned,
    /// The controller reported errors: the FLASH_SR error bits.
    Controller(u32),
}

impl NorFlashError for FlashError {
    fn kind(&self) -> NorFlashErrorKind {
        match self {
            FlashError::OutOfBounds => NorFlashErrorKind::OutOfBounds,
            FlashError::NotAligned => NorFlashErrorKind::NotAligned,
            FlashError::Controller(_) => NorFlashErrorKind::Other,
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

static TAKEN: AtomicBool = AtomicBool::new(false);

/// Bank 2 of the internal flash, owned exclusively.
#[derive(Debug)]
pub struct InternalFlash {
    _owned: (),
}

impl InternalFlash {
    /// The partition, once: `None` if it was taken before.
    pub fn take() -> Option<Self> {
        if TAKEN.swap(true, Ordering::AcqRel) {
            None
        } else {
            Some(InternalFlash { _owned: () })
        }
    }

    /// The partition again, after the value [`take`](Self::take) returned
    /// was dropped (for example by a failed `Store::mount`, which consumes
    /// the flash).
    ///
    /// # Safety
    ///
    /// No other `InternalFlash` may exist.
    pub unsafe fn steal() -> Self {
        TAKEN.store(true, Ordering::Release);
        InternalFlash { _owned: () }
    }

    fn sr() -> u32 {
        // SAFETY: FLASH_SR is a readable register of the FLASH peripheral.
        unsafe { ptr::read_volatile(SR) }
    }

    fn cr() -> u32 {
        // SAFETY: FLASH_CR is a readable register of the FLASH peripheral.
        unsafe { ptr::read_volatile(CR) }
    }

    fn set_cr(value: u32) {
        // SAFETY: FLASH_CR is writable; `self` owns the controller.
        unsafe { ptr::write_volatile(CR, value) }
    }

    fn wait_idle() {
        while Self::sr() & SR_BSY != 0 {
            core::hint::spin_loop();
        }
    }

    /// Unlocks FLASH_CR and clears stale status flags.
    fn unlock(&mut self) {
        Self::wait_idle();
        if Self::cr() & CR_LOCK != 0 {
            // SAFETY: the documented unlock sequence on FLASH_KEYR.
            unsafe {
                ptr::write_volatile(KEYR, KEY1);
                ptr::write_volatile(KEYR, KEY2);
            }
        }
        // SAFETY: FLASH_SR flags are cleared by writing 1.
        unsafe { ptr::write_volatile(SR, SR_ERRORS | SR_EOP) };
    }

    /// Clears PG/PER, locks FLASH_CR again, and passes on `result`.
    fn lock(&mut self, result: Result<(), FlashError>) -> Result<(), FlashError> {
        Self::set_cr((Self::cr() & !(CR_PG | CR_PER | CR_PNB_MASK | CR_BKER)) | CR_LOCK);
        result
    }

    /// Waits for the operation to end and reports (and clears) its errors.
    fn finish_op() -> Result<(), FlashError> {
        Self::wait_idle();
        let sr = Self::sr();
        // SAFETY: FLASH_SR flags are cleared by writing 1.
        unsafe { ptr::write_volatile(SR, sr & (SR_ERRORS | SR_EOP)) };
        if sr & SR_ERRORS != 0 {
            Err(FlashError::Controller(sr & SR_ERRORS))
        } else {
            Ok(())
        }
    }

    /// Resets the data cache after an erase, so no stale line of an erased
    /// page is read (RM0351 3.3.3: DCRST only while DCEN is clear).
    fn reset_data_cache() {
        // SAFETY: FLASH_ACR read-modify-write of the cache bits only.
        unsafe {
            let acr = ptr::read_volatile(ACR);
            if acr & ACR_DCEN != 0 {
                ptr::write_volatile(ACR, acr & !ACR_DCEN);
                ptr::write_volatile(ACR, (acr & !ACR_DCEN) | ACR_DCRST);
                ptr::write_volatile(ACR, acr & !ACR_DCRST);
            }
        }
    }
}

impl ErrorType for InternalFlash {
    type Error = FlashError;
}

impl ReadNorFlash for InternalFlash {
    const READ_SIZE: usize = 1;

    fn read(&mut self, offset: u32, bytes: &mut [u8]) -> Result<(), FlashError> {
        check_read(self, offset, bytes.len())?;
        let base = PARTITION_BASE + offset as usize;
        for (i, b) in bytes.iter_mut().enumerate() {
            // SAFETY: in bounds of bank 2 (checked above), which is
            // memory-mapped and readable; volatile because programming
            // changes it behind the compiler's back.
            *b = unsafe { ptr::read_volatile((base + i) as *const u8) };
        }
        Ok(())
    }

    fn capacity(&self) -> usize {
        PARTITION_BYTES
    }
}

impl NorFlash for InternalFlash {
    const WRITE_SIZE: usize = DOUBLE_WORD;
    const ERASE_SIZE: usize = PAGE_BYTES;

    fn erase(&mut self, from: u32, to: u32) -> Result<(), FlashError> {
        check_erase(self, from, to)?;
        self.unlock();
        let mut result = Ok(());
        for page in (from as usize / PAGE_BYTES)..(to as usize / PAGE_BYTES) {
            // Page number within bank 2 (256 pages of 2 KiB).
            let pnb = (page as u32) << CR_PNB_SHIFT;
            let cr = Self::cr() & !(CR_PG | CR_PNB_MASK);
            Self::set_cr(cr | CR_PER | CR_BKER | pnb);
            Self::set_cr(cr | CR_PER | CR_BKER | pnb | CR_STRT);
            result = Self::finish_op();
            if result.is_err() {
                break;
            }
        }
        Self::reset_data_cache();
        self.lock(result)
    }

    fn write(&mut self, offset: u32, bytes: &[u8]) -> Result<(), FlashError> {
        check_write(self, offset, bytes.len())?;
        self.unlock();
        Self::set_cr((Self::cr() & !(CR_PER | CR_PNB_MASK | CR_BKER)) | CR_PG);
        let mut result = Ok(());
        let mut addr = PARTITION_BASE + offset as usize;
        for dw in bytes.chunks_exact(DOUBLE_WORD) {
            let lo = u32::from_le_bytes([dw[0], dw[1], dw[2], dw[3]]);
            let hi = u32::from_le_bytes([dw[4], dw[5], dw[6], dw[7]]);
            // SAFETY: a double-word of bank 2 inside the partition (checked
            // above), written as the two consecutive words of standard
            // double-word programming (RM0351 3.3.7) with PG set.
            unsafe {
                ptr::write_volatile(addr as *mut u32, lo);
                ptr::write_volatile((addr + 4) as *mut u32, hi);
            }
            result = Self::finish_op();
            if result.is_err() {
                break;
            }
            addr += DOUBLE_WORD;
        }
        self.lock(result)
    }
}
