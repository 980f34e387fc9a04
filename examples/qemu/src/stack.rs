//! Stack painting: how deep one engine call goes below its call site.
//!
//! [`paint`] (inlined at the call site) reads SP there, fills every word
//! from the stack limit (`_stack_end`) up to [`MARGIN`] bytes below SP with
//! [`PATTERN`], and returns SP. After the engine call, [`used`] finds the
//! lowest word that no longer holds the pattern: the engine used `SP - that
//! address` bytes (its own frames, the closures it calls and the argument
//! spills below the call site), at least. Nothing else runs meanwhile: no
//! interrupt is enabled. If the lowest word itself was overwritten the
//! stack may have overflowed; that is reported as an overflow.
//!
//! A use smaller than the margin reads as the margin.

use core::arch::asm;
use core::ptr;

/// Fill value; unlikely to be a saved register or a local by chance.
pub const PATTERN: u32 = 0xC1A3_5EED;
/// Bytes left unpainted just below SP (the paint loop itself needs none,
/// it runs in the caller's frame; this is slack).
pub const MARGIN: usize = 64;

extern "C" {
    static mut _stack_end: u32;
    static mut _stack_start: u32;
}

/// Lowest address of the stack region.
#[inline(always)]
pub fn limit() -> usize {
    // A linker symbol; only its address is used.
    ptr::addr_of!(_stack_end) as usize
}

/// One past the highest address of the stack region.
#[inline(always)]
pub fn top() -> usize {
    // A linker symbol; only its address is used.
    ptr::addr_of!(_stack_start) as usize
}

/// SP here.
#[inline(always)]
pub fn sp() -> usize {
    let sp: usize;
    // SAFETY: reads a register.
    unsafe { asm!("mov {}, sp", out(reg) sp, options(nomem, nostack, preserves_flags)) };
    sp
}

/// Paints the free stack below the caller's SP; returns that SP.
#[inline(always)]
pub fn paint() -> usize {
    let sp = sp();
    let end = (sp - MARGIN) & !3;
    let mut p = limit();
    while p < end {
        // SAFETY: [limit, SP - MARGIN) is the free part of the stack region:
        // nothing lives there while the caller's frame is the deepest.
        unsafe { ptr::write_volatile(p as *mut u32, PATTERN) };
        p += 4;
    }
    sp
}

/// Bytes used below `sp` (from [`paint`]) since it was painted, and
/// whether the lowest word of the stack was overwritten (an overflow).
#[inline(always)]
pub fn used(sp: usize) -> (u32, bool) {
    let end = (sp - MARGIN) & !3;
    let start = limit();
    let mut p = start;
    // SAFETY: reads the stack region below the caller's frame.
    while p < end && unsafe { ptr::read_volatile(p as *const u32) } == PATTERN {
        p += 4;
    }
    ((sp - p) as u32, p == start && end > start)
}

/// Uses `N` bytes of stack in a frame of its own.
#[inline(never)]
fn burn<const N: usize>() -> u32 {
    let mut a = [0u32; N];
    for (i, w) in a.iter_mut().enumerate() {
        // SAFETY: a local; volatile so that the writes stay.
        unsafe { ptr::write_volatile(w, i as u32) };
    }
    // SAFETY: as above.
    unsafe { ptr::read_volatile(&a[N / 2]) }
}

/// Checks on the target that a known use (4 KiB of locals) measures as at
/// least 4 KiB and not much more.
pub fn selftest() -> Result<(), &'static str> {
    let sp = paint();
    let _ = burn::<1024>();
    let (used, overflow) = used(sp);
    if overflow || !(4096..4096 + 256).contains(&(used as usize)) {
        return Err("stack self-test: 4 KiB of locals did not measure as 4 KiB");
    }
    Ok(())
}
