//! The `embedded-storage` face of the simulator.
//!
//! `embedded-storage` fixes the program and erase units as associated
//! constants, while [`SimFlash`] takes its geometry at run time. [`Nor`] binds
//! the two: it carries the units as const parameters and refuses a flash whose
//! model disagrees. `MULTI = true` adds `MultiwriteNorFlash`, and is refused
//! for models that do not allow a word to be programmed again.

use embedded_storage::nor_flash::{ErrorType, MultiwriteNorFlash, NorFlash, ReadNorFlash};

use crate::flash::{SimError, SimFlash};
use crate::model::ModelError;

/// A [`SimFlash`] seen through the `embedded-storage` traits, with program
/// unit `WRITE` and erase unit `ERASE` bytes.
#[derive(Clone, Debug)]
pub struct Nor<const WRITE: usize, const ERASE: usize, const MULTI: bool = false> {
    flash: SimFlash,
}

/// ESP32 + SPI NOR: 4 B words, 4 KiB sectors, multiwrite.
pub type Esp32Flash = Nor<4, 4096, true>;
/// nRF52: 4 B words, 4 KiB pages, two writes per word.
pub type Nrf52Flash = Nor<4, 4096, true>;
/// STM32L4: 8 B double words, 2 KiB pages, second write only of zeros.
pub type Stm32l4Flash = Nor<8, 2048>;
/// STM32H7: 32 B flash words, 128 KiB sectors, write once.
pub type Stm32h7Flash = Nor<32, { 128 * 1024 }>;
/// ESP32 with flash encryption: 16 B blocks, 4 KiB sectors, write once.
pub type Esp32EncryptedFlash = Nor<16, 4096>;
/// Generic: 1 B writes, 4 KiB sectors, multiwrite.
pub type GenericFlash = Nor<1, 4096, true>;

impl<const WRITE: usize, const ERASE: usize, const MULTI: bool> Nor<WRITE, ERASE, MULTI> {
    /// Wraps `flash` if its model has exactly these units (and allows
    /// rewrites when `MULTI` is true).
    pub fn new(flash: SimFlash) -> Result<Self, ModelError> {
        let m = flash.model();
        let g = m.geometry;
        if g.write_size != WRITE || g.erase_size != ERASE {
            return Err(ModelError(format!(
                "model {} has {} B words and {} B sectors, this type expects {WRITE} B and {ERASE} B",
                m.name, g.write_size, g.erase_size
            )));
        }
        if MULTI && !m.write_rule.allows_rewrite() {
            return Err(ModelError(format!(
                "model {} ({:?}) does not allow rewrites, so it cannot be MultiwriteNorFlash",
                m.name, m.write_rule
            )));
        }
        Ok(Self { flash })
    }

    /// The simulator underneath.
    pub fn flash(&self) -> &SimFlash {
        &self.flash
    }

    /// The simulator underneath, for faults and counters.
    pub fn flash_mut(&mut self) -> &mut SimFlash {
        &mut self.flash
    }

    /// Unwraps the simulator.
    pub fn into_inner(self) -> SimFlash {
        self.flash
    }
}

impl<const WRITE: usize, const ERASE: usize, const MULTI: bool> ErrorType
    for Nor<WRITE, ERASE, MULTI>
{
    type Error = SimError;
}

impl<const WRITE: usize, const ERASE: usize, const MULTI: bool> ReadNorFlash
    for Nor<WRITE, ERASE, MULTI>
{
    const READ_SIZE: usize = 1;

    fn read(&mut self, offset: u32, bytes: &mut [u8]) -> Result<(), Self::Error> {
        self.flash.read(offset, bytes)
    }

    fn capacity(&self) -> usize {
        self.flash.capacity()
    }
}

impl<const WRITE: usize, const ERASE: usize, const MULTI: bool> NorFlash
    for Nor<WRITE, ERASE, MULTI>
{
    const WRITE_SIZE: usize = WRITE;
    const ERASE_SIZE: usize = ERASE;

    fn erase(&mut self, from: u32, to: u32) -> Result<(), Self::Error> {
        self.flash.erase(from, to)
    }

    fn write(&mut self, offset: u32, bytes: &[u8]) -> Result<(), Self::Error> {
        self.flash.program(offset, bytes)
    }
}

impl<const WRITE: usize, const ERASE: usize> MultiwriteNorFlash for Nor<WRITE, ERASE, true> {}
