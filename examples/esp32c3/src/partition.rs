//! The clawmem partition: a [`NorFlash`] over esp-storage's
//! [`FlashStorage`], restricted to one data partition of the partition table
//! (found by its label, whatever its data sub-type).
//!
//! The table is read with esp-bootloader-esp-idf's reader, but the region is
//! not that crate's `FlashRegion`/`NorFlashRegion`, for two reasons:
//! `PartitionEntry::as_flash_region` calls `PartitionEntry::partition_type`,
//! which panics on a data sub-type the crate has no name for (such as
//! 0x99); and
//! `NorFlashRegion` borrows the `FlashRegion`, which borrows the
//! `FlashStorage`, where the store wants to own its flash for good (two more
//! `static mut`s). [`PartitionFlash`] owns the `FlashStorage` and checks
//! every access against the partition's bounds.

use core::fmt;

use embedded_storage::nor_flash::{
    ErrorType, NorFlash, NorFlashError, NorFlashErrorKind, ReadNorFlash,
};
use esp_bootloader_esp_idf::partitions::{self, PARTITION_TABLE_MAX_LEN};
use esp_storage::{FlashStorage, FlashStorageError};

/// The partition table's type of a data partition.
const DATA_TYPE: u8 = 1;

/// The SPI flash's program unit (a word) and erase unit (a sector).
const WRITE_BYTES: u32 = 4;
const SECTOR_BYTES: u32 = 4096;

// clawmem reads records at any byte offset: FlashStorage must take
// byte-granular reads (esp-storage's `bytewise-read` feature).
const _: () = assert!(FlashStorage::READ_SIZE == 1);
const _: () = assert!(FlashStorage::WRITE_SIZE == WRITE_BYTES as usize);
const _: () = assert!(FlashStorage::ERASE_SIZE == SECTOR_BYTES as usize);

/// One data partition of the SPI flash, addressed from its start.
pub struct PartitionFlash {
    flash: FlashStorage<'static>,
    /// The partition's offset on the flash.
    base: u32,
    /// Its length in bytes, a whole number of sectors.
    len: u32,
}

/// Why [`PartitionFlash::find`] found no usable partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FindError {
    /// The partition table could not be read or is invalid.
    Table(partitions::Error),
    /// No partition has the label.
    Missing,
    /// The partition with the label is not a data partition.
    NotData,
    /// The partition is marked read-only.
    ReadOnly,
    /// The partition is encrypted (clawmem needs the raw NOR flash).
    Encrypted,
    /// The partition does not start and end on a sector boundary.
    Misaligned,
}

impl fmt::Display for FindError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FindError::Table(e) => write!(f, "partition table: {e}"),
            FindError::Missing => f.write_str("no such partition"),
            FindError::NotData => f.write_str("not a data partition"),
            FindError::ReadOnly => f.write_str("read-only partition"),
            FindError::Encrypted => f.write_str("encrypted partition"),
            FindError::Misaligned => f.write_str("not sector-aligned"),
        }
    }
}

impl PartitionFlash {
    /// The data partition labelled `label`, from the partition table in
    /// `flash`.
    pub fn find(mut flash: FlashStorage<'static>, label: &str) -> Result<Self, FindError> {
        let mut table = [0u8; PARTITION_TABLE_MAX_LEN];
        let entry = partitions::read_partition_table(&mut flash, &mut table)
            .map_err(FindError::Table)?
            .iter()
            .find(|p| p.label_as_str() == label)
            .ok_or(FindError::Missing)?;
        // Raw type and flags only: `partition_type()` would panic on the
        // custom sub-type (see the module's doc).
        if entry.raw_type() != DATA_TYPE {
            return Err(FindError::NotData);
        }
        if entry.is_read_only() {
            return Err(FindError::ReadOnly);
        }
        if entry.is_encrypted() && esp_storage::flash_encryption() {
            return Err(FindError::Encrypted);
        }
        let (base, len) = (entry.offset(), entry.len());
        if !base.is_multiple_of(SECTOR_BYTES) || !len.is_multiple_of(SECTOR_BYTES) {
            return Err(FindError::Misaligned);
        }
        Ok(PartitionFlash { flash, base, len })
    }

    /// The partition's offset on the flash.
    pub fn base(&self) -> u32 {
        self.base
    }

    /// The flash address of `len` bytes at `offset` in the partition, if
    /// they lie inside it.
    fn address(&self, offset: u32, len: usize) -> Result<u32, PartitionError> {
        let len = u32::try_from(len).map_err(|_| PartitionError::OutOfBounds)?;
        match offset.checked_add(len) {
            Some(end) if end <= self.len => Ok(self.base + offset),
            _ => Err(PartitionError::OutOfBounds),
        }
    }
}

/// An access outside the partition, misaligned, or failed in the flash.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PartitionError {
    OutOfBounds,
    NotAligned,
    Flash(FlashStorageError),
}

impl NorFlashError for PartitionError {
    fn kind(&self) -> NorFlashErrorKind {
        match self {
            PartitionError::OutOfBounds | PartitionError::Flash(FlashStorageError::OutOfBounds) => {
                NorFlashErrorKind::OutOfBounds
            }
            PartitionError::NotAligned | PartitionError::Flash(FlashStorageError::NotAligned) => {
                NorFlashErrorKind::NotAligned
            }
            PartitionError::Flash(_) => NorFlashErrorKind::Other,
        }
    }
}

impl ErrorType for PartitionFlash {
    type Error = PartitionError;
}

impl ReadNorFlash for PartitionFlash {
    const READ_SIZE: usize = 1;

    fn read(&mut self, offset: u32, bytes: &mut [u8]) -> Result<(), Self::Error> {
        let address = self.address(offset, bytes.len())?;
        self.flash
            .read_nor(address, bytes)
            .map_err(PartitionError::Flash)
    }

    fn capacity(&self) -> usize {
        self.len as usize
    }
}

impl NorFlash for PartitionFlash {
    const WRITE_SIZE: usize = WRITE_BYTES as usize;
    const ERASE_SIZE: usize = SECTOR_BYTES as usize;

    fn erase(&mut self, from: u32, to: u32) -> Result<(), Self::Error> {
        if from > to {
            return Err(PartitionError::OutOfBounds);
        }
        if !from.is_multiple_of(SECTOR_BYTES) || !to.is_multiple_of(SECTOR_BYTES) {
            return Err(PartitionError::NotAligned);
        }
        let start = self.address(from, (to - from) as usize)?;
        self.flash
            .erase(start, start + (to - from))
            .map_err(PartitionError::Flash)
    }

    fn write(&mut self, offset: u32, bytes: &[u8]) -> Result<(), Self::Error> {
        if !offset.is_multiple_of(WRITE_BYTES) || !bytes.len().is_multiple_of(WRITE_BYTES as usize)
        {
            return Err(PartitionError::NotAligned);
        }
        let address = self.address(offset, bytes.len())?;
        self.flash
            .write_nor(address, bytes)
            .map_err(PartitionError::Flash)
    }
}
