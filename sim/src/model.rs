//! Flash models: geometry, the per-word write rule, timings and endurance.
//!
//! A [`Model`] describes one NOR part completely enough to simulate it: how big
//! a program unit and an erase unit are, how often a word may be programmed
//! between erases, what each operation costs in device time, and how many erase
//! cycles a sector survives. [`Preset`] names the real parts clawmem targets.

use core::fmt;
use core::str::FromStr;

use serde::Serialize;

/// Program unit sizes the simulator accepts, in bytes.
pub const WRITE_SIZES: [usize; 6] = [1, 2, 4, 8, 16, 32];
/// Smallest erase unit the simulator accepts, in bytes.
pub const ERASE_SIZE_MIN: usize = 128;
/// Largest erase unit the simulator accepts, in bytes.
pub const ERASE_SIZE_MAX: usize = 128 * 1024;

/// A model or geometry that the simulator cannot represent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModelError(pub String);

impl fmt::Display for ModelError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ModelError {}

/// Sizes of the flash: program unit, erase unit and number of erase units.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Geometry {
    /// Program unit ("word") in bytes: writes must be aligned to it.
    pub write_size: usize,
    /// Erase unit ("sector") in bytes.
    pub erase_size: usize,
    /// Number of sectors.
    pub sector_count: usize,
}

impl Geometry {
    /// Checks and builds a geometry.
    ///
    /// The write size must be one of [`WRITE_SIZES`]; the erase size a power of
    /// two from [`ERASE_SIZE_MIN`] to [`ERASE_SIZE_MAX`]; at least one sector.
    pub fn new(
        write_size: usize,
        erase_size: usize,
        sector_count: usize,
    ) -> Result<Self, ModelError> {
        if !WRITE_SIZES.contains(&write_size) {
            return Err(ModelError(format!(
                "write size {write_size} B is not supported (use one of {WRITE_SIZES:?})"
            )));
        }
        if !erase_size.is_power_of_two() || !(ERASE_SIZE_MIN..=ERASE_SIZE_MAX).contains(&erase_size)
        {
            return Err(ModelError(format!(
                "erase size {erase_size} B is not a power of two from {ERASE_SIZE_MIN} B to {ERASE_SIZE_MAX} B"
            )));
        }
        if sector_count == 0 {
            return Err(ModelError("a flash needs at least one sector".into()));
        }
        if erase_size
            .checked_mul(sector_count)
            .is_none_or(|c| c > u32::MAX as usize)
        {
            return Err(ModelError(format!(
                "{sector_count} sectors of {erase_size} B exceed the 4 GiB address space"
            )));
        }
        Ok(Self {
            write_size,
            erase_size,
            sector_count,
        })
    }

    /// Total size in bytes.
    pub fn capacity(&self) -> usize {
        self.erase_size * self.sector_count
    }

    /// Number of program units in one sector.
    pub fn words_per_sector(&self) -> usize {
        self.erase_size / self.write_size
    }
}

/// How often one program unit may be programmed between two erases.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum WriteRule {
    /// Any number of programs; each one ANDs into the word (SPI NOR, ESP32).
    Unlimited,
    /// At most this many programs per word (nRF52: 2).
    AtMost(u8),
    /// One program, then at most one more that writes all zeros (STM32L4/G4).
    SecondWriteZeros,
    /// Exactly one program per word (ECC flash such as STM32H7).
    Once,
}

impl WriteRule {
    /// Whether a word may be programmed again with arbitrary data, the contract
    /// of `embedded_storage::nor_flash::MultiwriteNorFlash`.
    pub fn allows_rewrite(self) -> bool {
        match self {
            WriteRule::Unlimited => true,
            WriteRule::AtMost(n) => n >= 2,
            WriteRule::SecondWriteZeros | WriteRule::Once => false,
        }
    }

    /// Whether one more program of `data` is allowed on a word already
    /// programmed `writes` times since its last erase.
    pub fn permits(self, writes: u8, data: &[u8]) -> bool {
        match self {
            WriteRule::Unlimited => true,
            WriteRule::AtMost(n) => writes < n,
            WriteRule::Once => writes == 0,
            WriteRule::SecondWriteZeros => {
                writes == 0 || (writes == 1 && data.iter().all(|b| *b == 0))
            }
        }
    }
}

/// Device timings and endurance, used to model device time and lifetime.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Timings {
    /// Time to read one byte, in nanoseconds.
    pub read_ns_per_byte: u64,
    /// The unit the chip programs in one operation (a 256 B page on SPI NOR,
    /// one word on internal flash), in bytes.
    pub program_unit_bytes: usize,
    /// Typical time of one program operation, in microseconds.
    pub program_unit_us: u64,
    /// Typical time to erase one sector, in microseconds.
    pub erase_sector_us: u64,
    /// Erase cycles a sector is rated for.
    pub endurance_cycles: u64,
}

/// A complete flash model.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Model {
    /// Name of the preset, or `custom`.
    pub name: String,
    /// Sizes.
    pub geometry: Geometry,
    /// Program budget per word.
    pub write_rule: WriteRule,
    /// Timings and endurance.
    pub timings: Timings,
}

impl Model {
    /// A model with a custom geometry, rule and timings.
    pub fn custom(geometry: Geometry, write_rule: WriteRule, timings: Timings) -> Self {
        Self {
            name: "custom".into(),
            geometry,
            write_rule,
            timings,
        }
    }

    /// The same model with a different number of sectors.
    pub fn with_sector_count(&self, sector_count: usize) -> Result<Self, ModelError> {
        let geometry = Geometry::new(
            self.geometry.write_size,
            self.geometry.erase_size,
            sector_count,
        )?;
        Ok(Self {
            geometry,
            ..self.clone()
        })
    }

    /// The same model resized to `capacity_bytes`, which must be a whole number
    /// of sectors.
    pub fn with_capacity(&self, capacity_bytes: usize) -> Result<Self, ModelError> {
        let erase = self.geometry.erase_size;
        if capacity_bytes == 0 || !capacity_bytes.is_multiple_of(erase) {
            return Err(ModelError(format!(
                "{capacity_bytes} B is not a whole number of {erase} B sectors"
            )));
        }
        self.with_sector_count(capacity_bytes / erase)
    }
}

/// Named models of the parts clawmem targets.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Preset {
    /// ESP32 with external SPI NOR (W25Q class): 4 B words through
    /// `esp-storage`, 4 KiB sectors, rewrites allowed, 256 B page program in
    /// 0.4 ms, 4 KiB erase in 45 ms, 100k cycles.
    Esp32,
    /// nRF52 internal flash: 4 B words, 4 KiB pages, at most 2 writes per word,
    /// 41 us per word, 85 ms page erase, 10k cycles.
    Nrf52,
    /// STM32L4/G4 internal flash: 8 B double words, 2 KiB pages, a second write
    /// only of all zeros, 82 us per double word, 22 ms page erase, 10k cycles.
    Stm32l4,
    /// STM32H7 internal flash: 32 B flash words with ECC, 128 KiB sectors, one
    /// write per word, 16 us per flash word, 2 s sector erase, 10k cycles.
    Stm32h7,
    /// ESP32 with flash encryption on (esp-idf#14810): the same SPI NOR and
    /// timings as [`Preset::Esp32`], but written through the encryption
    /// engine in 16 B blocks, each programmed once between erases (a second
    /// program would leave ciphertext that decrypts to garbage).
    Esp32Encrypted,
    /// A permissive reference part: 1 B writes, 4 KiB sectors, unlimited
    /// rewrites, SPI NOR timings.
    Generic,
}

impl Preset {
    /// Every preset.
    pub const ALL: [Preset; 6] = [
        Preset::Esp32,
        Preset::Nrf52,
        Preset::Stm32l4,
        Preset::Stm32h7,
        Preset::Esp32Encrypted,
        Preset::Generic,
    ];

    /// Lower-case name, as the CLI spells it.
    pub fn name(self) -> &'static str {
        match self {
            Preset::Esp32 => "esp32",
            Preset::Nrf52 => "nrf52",
            Preset::Stm32l4 => "stm32l4",
            Preset::Stm32h7 => "stm32h7",
            Preset::Esp32Encrypted => "esp32-encrypted",
            Preset::Generic => "generic",
        }
    }

    /// The partition size used when none is given: 1 MiB, or 8 sectors for
    /// parts whose sectors are larger than 128 KiB / 8.
    pub fn default_capacity(self) -> usize {
        let (_, erase, _) = self.parameters();
        (1024 * 1024).max(erase * 8)
    }

    fn parameters(self) -> (usize, usize, WriteRule) {
        match self {
            Preset::Esp32 => (4, 4096, WriteRule::Unlimited),
            Preset::Nrf52 => (4, 4096, WriteRule::AtMost(2)),
            Preset::Stm32l4 => (8, 2048, WriteRule::SecondWriteZeros),
            Preset::Stm32h7 => (32, 128 * 1024, WriteRule::Once),
            Preset::Esp32Encrypted => (16, 4096, WriteRule::Once),
            Preset::Generic => (1, 4096, WriteRule::Unlimited),
        }
    }

    fn timings(self) -> Timings {
        match self {
            Preset::Esp32 | Preset::Esp32Encrypted | Preset::Generic => Timings {
                read_ns_per_byte: 25,
                program_unit_bytes: 256,
                program_unit_us: 400,
                erase_sector_us: 45_000,
                endurance_cycles: 100_000,
            },
            Preset::Nrf52 => Timings {
                read_ns_per_byte: 2,
                program_unit_bytes: 4,
                program_unit_us: 41,
                erase_sector_us: 85_000,
                endurance_cycles: 10_000,
            },
            Preset::Stm32l4 => Timings {
                read_ns_per_byte: 2,
                program_unit_bytes: 8,
                program_unit_us: 82,
                erase_sector_us: 22_000,
                endurance_cycles: 10_000,
            },
            Preset::Stm32h7 => Timings {
                read_ns_per_byte: 2,
                program_unit_bytes: 32,
                program_unit_us: 16,
                erase_sector_us: 2_000_000,
                endurance_cycles: 10_000,
            },
        }
    }

    /// The preset's model with a partition of `capacity_bytes`.
    pub fn model(self, capacity_bytes: usize) -> Result<Model, ModelError> {
        let (write_size, erase_size, write_rule) = self.parameters();
        if capacity_bytes == 0 || !capacity_bytes.is_multiple_of(erase_size) {
            return Err(ModelError(format!(
                "{capacity_bytes} B is not a whole number of {}'s {erase_size} B sectors",
                self.name()
            )));
        }
        Ok(Model {
            name: self.name().into(),
            geometry: Geometry::new(write_size, erase_size, capacity_bytes / erase_size)?,
            write_rule,
            timings: self.timings(),
        })
    }

    /// The preset's model with its default partition size.
    pub fn default_model(self) -> Model {
        self.model(self.default_capacity())
            .expect("preset default capacity is a whole number of sectors")
    }
}

impl fmt::Display for Preset {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Preset {
    type Err = ModelError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Preset::ALL
            .into_iter()
            .find(|p| p.name().eq_ignore_ascii_case(s))
            .ok_or_else(|| {
                let names: Vec<_> = Preset::ALL.iter().map(|p| p.name()).collect();
                ModelError(format!(
                    "unknown preset {s:?} (known: {})",
                    names.join(", ")
                ))
            })
    }
}
