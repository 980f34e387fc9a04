//! `SimFlash` against a reference model of NOR flash.
//!
//! An [`Input`] picks a preset and a few sectors, then a sequence of [`Op`]s:
//! reads, programs and erases (straight on `SimFlash` or through the
//! `embedded-storage` traits of `Nor`), power cuts armed at an arbitrary
//! [`CutPoint`] with an arbitrary [`Tear`], power restores, injected errors,
//! bit flips at rest, counter resets, snapshots and rewinds to them.
//!
//! [`Reference`] is the model: the contents as a `Vec<u8>`, a program count
//! per word, the power and fault state, and the counters. It is written from
//! the simulator's documented rules; where they leave a choice open, it
//! follows the simulator's choice: argument checks come before the power
//! check and are not counted as calls, injected-error indices count only
//! powered calls, only calls that reach the cells count towards a cut (and
//! only while one is armed), and a `Byte` cut whose budget is spent fires on
//! the next erase but not on a program of 0 bytes. Every call is first
//! put to the model, which says what the flash must answer (the exact
//! `SimError`) and what must change; then to the flash; then the two are
//! compared: the answer, the whole image, the program counts of the words the
//! call touched, the counters, the power state and the armed cut.
//!
//! A call torn by a power cut is not predicted byte for byte where the
//! simulator draws random numbers. Its result is checked against the
//! documented envelope instead ([`check_torn_program`], [`check_torn_erase`]),
//! and the model then takes the flash's bytes, program counts and wear
//! counters for the range of the call.
//!
//! [`run`] never panics except through an assertion on a divergence, whose
//! message names the op index, the op and the geometry; the failing input
//! replays it. [`Sabotage`] breaks the model on purpose, so a test can prove
//! the harness catches a wrong flash.

use std::collections::BTreeMap;
use std::fmt;

use arbitrary::{Arbitrary, Unstructured};
use clawmem_sim::{
    CutPoint, InjectedError, Nor, OpKind, PowerCut, Preset, SimError, SimFlash, Stats, Tear,
    WriteRule,
};
use embedded_storage::nor_flash::{NorFlash, NorFlashError, NorFlashErrorKind, ReadNorFlash};

/// Ops past this many are ignored, to bound one run.
pub const OPS_MAX: usize = 256;
/// Snapshots kept for [`Op::Rewind`]; the oldest is dropped first.
pub const SNAPSHOTS_MAX: usize = 4;

/// The preset to simulate.
#[derive(Arbitrary, Clone, Copy, Debug, PartialEq, Eq)]
pub enum PresetChoice {
    /// 4 B words, 4 KiB sectors, unlimited rewrites.
    Esp32,
    /// 4 B words, 4 KiB sectors, two writes per word.
    Nrf52,
    /// 8 B words, 2 KiB sectors, a second write only of zeros.
    Stm32l4,
    /// 32 B words, 128 KiB sectors, one write per word.
    Stm32h7,
    /// ESP32 with flash encryption: 16 B blocks, 4 KiB sectors, one write
    /// per block.
    Esp32Encrypted,
    /// 1 B words, 4 KiB sectors, unlimited rewrites.
    Generic,
}

impl PresetChoice {
    /// The simulator's preset.
    pub fn preset(self) -> Preset {
        match self {
            PresetChoice::Esp32 => Preset::Esp32,
            PresetChoice::Nrf52 => Preset::Nrf52,
            PresetChoice::Stm32l4 => Preset::Stm32l4,
            PresetChoice::Stm32h7 => Preset::Stm32h7,
            PresetChoice::Esp32Encrypted => Preset::Esp32Encrypted,
            PresetChoice::Generic => Preset::Generic,
        }
    }

    /// Sector count for a raw input byte: 1 to 4 sectors (1 or 2 of the
    /// STM32H7's 128 KiB ones).
    pub fn sector_count(self, raw: u8) -> usize {
        match self {
            PresetChoice::Stm32h7 => 1 + usize::from(raw % 2),
            _ => 1 + usize::from(raw % 4),
        }
    }
}

/// A whole fuzz input.
#[derive(Clone, Debug)]
pub struct Input {
    /// The part.
    pub preset: PresetChoice,
    /// Raw sector count, see [`PresetChoice::sector_count`].
    pub sectors: u8,
    /// The calls, at most [`OPS_MAX`] of them are run.
    pub ops: Vec<Op>,
}

impl<'a> Arbitrary<'a> for Input {
    /// Ops are taken until the bytes run out (not one continuation bit per
    /// op, which gives random bytes about one op).
    fn arbitrary(u: &mut Unstructured<'a>) -> arbitrary::Result<Self> {
        let preset = u.arbitrary()?;
        let sectors = u.arbitrary()?;
        let mut ops = Vec::new();
        while !u.is_empty() && ops.len() < OPS_MAX {
            ops.push(u.arbitrary()?);
        }
        Ok(Self {
            preset,
            sectors,
            ops,
        })
    }
}

/// A weighted choice: the index of the band `u` falls in, out of bands of
/// the given weights (so that valid calls dominate random inputs).
fn weighted(u: &mut Unstructured, weights: &[u8]) -> arbitrary::Result<usize> {
    let total: u32 = weights.iter().map(|w| u32::from(*w)).sum();
    let mut pick = u.int_in_range(0..=total - 1)?;
    for (i, w) in weights.iter().enumerate() {
        if pick < u32::from(*w) {
            return Ok(i);
        }
        pick -= u32::from(*w);
    }
    Ok(weights.len() - 1)
}

/// An address for a read or a program.
#[derive(Clone, Copy, Debug)]
pub enum Addr {
    /// Word `word` modulo 64 of sector `sector` modulo the sector count, so
    /// that calls often meet on the same words.
    Near {
        /// Sector.
        sector: u8,
        /// Word within the sector.
        word: u8,
    },
    /// Word `i` modulo two words past the end (so sometimes out of bounds).
    Word(u16),
    /// Byte `b` modulo 16 bytes past the end (mostly misaligned).
    Byte(u32),
    /// Any 32-bit offset.
    Raw(u32),
}

impl<'a> Arbitrary<'a> for Addr {
    fn arbitrary(u: &mut Unstructured<'a>) -> arbitrary::Result<Self> {
        Ok(match weighted(u, &[60, 20, 12, 8])? {
            0 => Addr::Near {
                sector: u.arbitrary()?,
                word: u.arbitrary()?,
            },
            1 => Addr::Word(u.arbitrary()?),
            2 => Addr::Byte(u.arbitrary()?),
            _ => Addr::Raw(u.arbitrary()?),
        })
    }
}

/// A length for a read or a program.
#[derive(Clone, Copy, Debug)]
pub enum Len {
    /// `n` modulo 17 words.
    Few(u8),
    /// `n` words.
    Many(u8),
    /// `n` words modulo the flash's word count plus two.
    Span(u16),
    /// `n` bytes.
    Bytes(u16),
}

impl<'a> Arbitrary<'a> for Len {
    fn arbitrary(u: &mut Unstructured<'a>) -> arbitrary::Result<Self> {
        Ok(match weighted(u, &[60, 15, 15, 10])? {
            0 => Len::Few(u.arbitrary()?),
            1 => Len::Many(u.arbitrary()?),
            2 => Len::Span(u.arbitrary()?),
            _ => Len::Bytes(u.arbitrary()?),
        })
    }
}

/// The bytes of a program.
#[derive(Arbitrary, Clone, Debug)]
pub enum Fill {
    /// All zeros (the only second write STM32L4 allows).
    Zeros,
    /// All ones (changes no bit, still spends the word's budget).
    Ones,
    /// One byte repeated.
    Byte(u8),
    /// Pseudo-random bytes from a seed.
    Seeded(u64),
    /// These bytes, repeated.
    Bytes(Vec<u8>),
}

/// The start of an erase range.
#[derive(Clone, Copy, Debug)]
pub enum SectorAddr {
    /// Sector boundary `i` modulo two sectors past the end.
    Sector(u8),
    /// Any 32-bit offset.
    Raw(u32),
}

impl<'a> Arbitrary<'a> for SectorAddr {
    fn arbitrary(u: &mut Unstructured<'a>) -> arbitrary::Result<Self> {
        Ok(match weighted(u, &[90, 10])? {
            0 => SectorAddr::Sector(u.arbitrary()?),
            _ => SectorAddr::Raw(u.arbitrary()?),
        })
    }
}

/// The end of an erase range.
#[derive(Clone, Copy, Debug)]
pub enum EraseEnd {
    /// `n` modulo 3 sectors past the start.
    Sectors(u8),
    /// An address of its own (sometimes before the start).
    At(SectorAddr),
}

impl<'a> Arbitrary<'a> for EraseEnd {
    fn arbitrary(u: &mut Unstructured<'a>) -> arbitrary::Result<Self> {
        Ok(match weighted(u, &[80, 20])? {
            0 => EraseEnd::Sectors(u.arbitrary()?),
            _ => EraseEnd::At(u.arbitrary()?),
        })
    }
}

/// Where an armed power cut fires.
#[derive(Clone, Copy, Debug)]
pub enum Cut {
    /// [`CutPoint::Op`] `n` modulo 8.
    Op(u8),
    /// [`CutPoint::Byte`] `n` modulo 1024.
    Byte(u16),
    /// [`CutPoint::Op`] `n`.
    FarOp(u8),
    /// [`CutPoint::Byte`] `n` modulo 2^20.
    FarByte(u32),
}

impl<'a> Arbitrary<'a> for Cut {
    fn arbitrary(u: &mut Unstructured<'a>) -> arbitrary::Result<Self> {
        Ok(match weighted(u, &[45, 40, 5, 10])? {
            0 => Cut::Op(u.arbitrary()?),
            1 => Cut::Byte(u.arbitrary()?),
            2 => Cut::FarOp(u.arbitrary()?),
            _ => Cut::FarByte(u.arbitrary()?),
        })
    }
}

/// How the call in flight is torn.
#[derive(Clone, Copy, Debug)]
pub enum TearChoice {
    /// [`Tear::Prefix`] with a `k` below 256.
    Prefix(u8),
    /// [`Tear::Prefix`] with `k` modulo 2^20 (reaches into the second
    /// STM32H7 sector of an erase).
    PrefixFar(u32),
    /// [`Tear::Bits`].
    Bits,
    /// [`Tear::Random`].
    Random,
}

impl<'a> Arbitrary<'a> for TearChoice {
    fn arbitrary(u: &mut Unstructured<'a>) -> arbitrary::Result<Self> {
        Ok(match weighted(u, &[35, 15, 25, 25])? {
            0 => TearChoice::Prefix(u.arbitrary()?),
            1 => TearChoice::PrefixFar(u.arbitrary()?),
            2 => TearChoice::Bits,
            _ => TearChoice::Random,
        })
    }
}

/// A kind of flash call, for injected errors.
#[derive(Arbitrary, Clone, Copy, Debug)]
pub enum KindChoice {
    /// Reads.
    Read,
    /// Programs.
    Program,
    /// Erases.
    Erase,
}

/// One step of a run.
#[derive(Clone, Debug)]
pub enum Op {
    /// `read`.
    Read {
        /// Offset.
        at: Addr,
        /// Length.
        len: Len,
        /// Through `ReadNorFlash::read` instead of `SimFlash::read`.
        via_trait: bool,
    },
    /// `program`.
    Program {
        /// Offset.
        at: Addr,
        /// Length.
        len: Len,
        /// Data.
        fill: Fill,
        /// Through `NorFlash::write` instead of `SimFlash::program`.
        via_trait: bool,
    },
    /// `erase`.
    Erase {
        /// Start.
        from: SectorAddr,
        /// End (exclusive).
        to: EraseEnd,
        /// Through `NorFlash::erase` instead of `SimFlash::erase`.
        via_trait: bool,
    },
    /// `arm_power_cut`.
    ArmPowerCut {
        /// The cut's seed.
        seed: u64,
        /// When it fires.
        at: Cut,
        /// How it tears.
        tear: TearChoice,
    },
    /// `cut_power`, between calls.
    CutPower,
    /// `restore_power`.
    RestorePower,
    /// `inject_error`.
    InjectError {
        /// Kind of call that fails.
        op: KindChoice,
        /// Index of the first failing call, modulo 8.
        at_call: u8,
        /// Whether later calls fail too.
        persistent: bool,
    },
    /// `clear_faults`.
    ClearFaults,
    /// `flip_bit`, sometimes out of bounds or with a bad bit index.
    FlipBit {
        /// Address modulo 4 bytes past the end.
        address: u32,
        /// Bit modulo 9 (8 is refused).
        bit: u8,
    },
    /// `flip_random_bits` of 0 to 4 bits.
    FlipRandomBits {
        /// Bits to flip, modulo 5.
        count: u8,
        /// Their seed.
        seed: u64,
    },
    /// `reset_counters`.
    ResetCounters,
    /// Keep a `snapshot()` and the model at this point.
    Snapshot,
    /// Check a kept snapshot is still what it was, and go on from a
    /// snapshot of it.
    Rewind {
        /// Which kept snapshot, modulo their number.
        index: u8,
    },
    /// Go on with a `snapshot()` of the flash instead of the flash itself.
    Fork,
}

impl<'a> Arbitrary<'a> for Op {
    fn arbitrary(u: &mut Unstructured<'a>) -> arbitrary::Result<Self> {
        const WEIGHTS: [u8; 14] = [14, 30, 10, 9, 2, 9, 4, 3, 3, 2, 2, 5, 4, 3];
        Ok(match weighted(u, &WEIGHTS)? {
            0 => Op::Read {
                at: u.arbitrary()?,
                len: u.arbitrary()?,
                via_trait: u.arbitrary()?,
            },
            1 => Op::Program {
                at: u.arbitrary()?,
                len: u.arbitrary()?,
                fill: u.arbitrary()?,
                via_trait: u.arbitrary()?,
            },
            2 => Op::Erase {
                from: u.arbitrary()?,
                to: u.arbitrary()?,
                via_trait: u.arbitrary()?,
            },
            3 => Op::ArmPowerCut {
                seed: u.arbitrary()?,
                at: u.arbitrary()?,
                tear: u.arbitrary()?,
            },
            4 => Op::CutPower,
            5 => Op::RestorePower,
            6 => Op::InjectError {
                op: u.arbitrary()?,
                at_call: u.arbitrary()?,
                persistent: u.arbitrary()?,
            },
            7 => Op::ClearFaults,
            8 => Op::FlipBit {
                address: u.arbitrary()?,
                bit: u.arbitrary()?,
            },
            9 => Op::FlipRandomBits {
                count: u.arbitrary()?,
                seed: u.arbitrary()?,
            },
            10 => Op::ResetCounters,
            11 => Op::Snapshot,
            12 => Op::Rewind {
                index: u.arbitrary()?,
            },
            _ => Op::Fork,
        })
    }
}

/// A deliberate bug in the model, to prove the harness can fail.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sabotage {
    /// The model is right.
    None,
    /// The model's program overwrites instead of ANDing.
    ProgramOverwrites,
    /// The model ignores the write budget.
    BudgetIgnored,
    /// The model's erase leaves the program counts as they were.
    EraseKeepsBudget,
    /// The model's erase does not count wear.
    EraseNotCounted,
}

/// The counters of [`Stats`] the model predicts (all but device time).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    /// Read calls that passed the argument checks.
    pub read_calls: u64,
    /// Bytes of successful reads.
    pub read_bytes: u64,
    /// Program calls that passed the argument checks.
    pub program_calls: u64,
    /// Bytes programmed.
    pub programmed_bytes: u64,
    /// Erase calls that passed the argument checks.
    pub erase_calls: u64,
    /// Sectors erased.
    pub erases: u64,
    /// Bytes erased.
    pub erased_bytes: u64,
    /// Programs refused for the write budget.
    pub write_budget_violations: u64,
    /// Calls failed for lack of power or an injected error.
    pub failed_calls: u64,
    /// Power cuts.
    pub power_cuts: u64,
    /// Erases per sector.
    pub erase_counts: Vec<u64>,
}

impl From<&Stats> for Counters {
    fn from(s: &Stats) -> Self {
        Self {
            read_calls: s.read_calls,
            read_bytes: s.read_bytes,
            program_calls: s.program_calls,
            programmed_bytes: s.programmed_bytes,
            erase_calls: s.erase_calls,
            erases: s.erases,
            erased_bytes: s.erased_bytes,
            write_budget_violations: s.write_budget_violations,
            failed_calls: s.failed_calls,
            power_cuts: s.power_cuts,
            erase_counts: s.erase_counts.clone(),
        }
    }
}

/// What a flash call must answer and leave behind.
#[derive(Debug)]
pub enum Outcome {
    /// Exactly this result; the model already holds the contents after it.
    Done(Result<(), SimError>),
    /// A program torn by `cut`: checked with [`check_torn_program`].
    TornProgram {
        /// The cut that fired.
        cut: PowerCut,
        /// Offset of the call.
        offset: usize,
        /// Bytes that land, when the tear is a prefix (a `Prefix` tear or a
        /// `Byte` cut); `None` for `Bits` and `Random`.
        landed: Option<usize>,
    },
    /// An erase torn by `cut`: checked with [`check_torn_erase`].
    TornErase {
        /// The cut that fired.
        cut: PowerCut,
        /// First sector of the call.
        first: usize,
        /// Sectors in the call.
        count: usize,
        /// Bytes from the start of the range that read back 0xFF, when the
        /// tear is a prefix (`Prefix` tear or `Byte` cut, which erases
        /// nothing); `None` for `Bits` and `Random`.
        erased: Option<usize>,
    },
}

/// The reference model of a NOR flash and its faults.
#[derive(Clone, Debug)]
pub struct Reference {
    /// Program unit in bytes.
    pub write_size: usize,
    /// Erase unit in bytes.
    pub erase_size: usize,
    /// Program budget per word.
    pub rule: WriteRule,
    /// Contents.
    pub data: Vec<u8>,
    /// Programs per word since its last erase, saturating at 255.
    pub writes: Vec<u8>,
    /// Whether power is on.
    pub powered: bool,
    /// The armed cut, until it fires or is disarmed.
    pub cut: Option<PowerCut>,
    /// Program and erase calls that reached the cells since the cut was
    /// armed (counted only while a cut is armed).
    pub cut_ops: u64,
    /// Bytes programmed since the cut was armed.
    pub cut_bytes: u64,
    /// Injected errors, in the order they were injected.
    pub errors: Vec<InjectedError>,
    /// Powered calls of each kind (read, program, erase) since errors were
    /// last injected or cleared.
    pub calls_seen: [u64; 3],
    /// Counters.
    pub stats: Counters,
    /// Deliberate bug.
    pub sabotage: Sabotage,
}

fn kind_index(op: OpKind) -> usize {
    match op {
        OpKind::Read => 0,
        OpKind::Program => 1,
        OpKind::Erase => 2,
    }
}

/// Whether `rule` lets a word programmed `writes` times take `word` too.
fn budget_allows(rule: WriteRule, writes: u8, word: &[u8]) -> bool {
    match rule {
        WriteRule::Unlimited => true,
        WriteRule::AtMost(n) => writes < n,
        WriteRule::Once => writes == 0,
        WriteRule::SecondWriteZeros => writes == 0 || (writes == 1 && word.iter().all(|b| *b == 0)),
    }
}

impl Reference {
    /// An erased flash of `sector_count` sectors of the preset.
    pub fn new(preset: Preset, sector_count: usize, sabotage: Sabotage) -> Self {
        let model = preset.default_model();
        let (write_size, erase_size) = (model.geometry.write_size, model.geometry.erase_size);
        let capacity = erase_size * sector_count;
        Self {
            write_size,
            erase_size,
            rule: model.write_rule,
            data: vec![0xFF; capacity],
            writes: vec![0; capacity / write_size],
            powered: true,
            cut: None,
            cut_ops: 0,
            cut_bytes: 0,
            errors: Vec::new(),
            calls_seen: [0; 3],
            stats: Counters {
                erase_counts: vec![0; sector_count],
                ..Counters::default()
            },
            sabotage,
        }
    }

    /// Size in bytes.
    pub fn capacity(&self) -> usize {
        self.data.len()
    }

    /// Number of sectors.
    pub fn sector_count(&self) -> usize {
        self.data.len() / self.erase_size
    }

    /// Counts a call that passed its argument checks, then applies the power
    /// state and the injected errors to it.
    fn admit(&mut self, op: OpKind) -> Result<(), SimError> {
        match op {
            OpKind::Read => self.stats.read_calls += 1,
            OpKind::Program => self.stats.program_calls += 1,
            OpKind::Erase => self.stats.erase_calls += 1,
        }
        if !self.powered {
            self.stats.failed_calls += 1;
            return Err(SimError::PowerOff);
        }
        let seen = self.calls_seen[kind_index(op)];
        self.calls_seen[kind_index(op)] += 1;
        let hit = self
            .errors
            .iter()
            .find(|e| e.op == op && (e.at_call == seen || (e.persistent && seen > e.at_call)));
        if let Some(e) = hit {
            self.stats.failed_calls += 1;
            return Err(SimError::Injected(*e));
        }
        Ok(())
    }

    /// Power fails during a call.
    fn cut_fires(&mut self) {
        self.cut = None;
        self.powered = false;
        self.stats.power_cuts += 1;
    }

    /// `read`: the expected result, and the bytes on success.
    pub fn read(&mut self, offset: u32, len: usize) -> Result<Vec<u8>, SimError> {
        let start = offset as usize;
        if start as u64 + len as u64 > self.capacity() as u64 {
            return Err(SimError::OutOfBounds {
                op: OpKind::Read,
                offset,
                len,
            });
        }
        self.admit(OpKind::Read)?;
        self.stats.read_bytes += len as u64;
        Ok(self.data[start..start + len].to_vec())
    }

    /// `program`: the expected outcome; contents change unless torn.
    pub fn program(&mut self, offset: u32, bytes: &[u8]) -> Outcome {
        let (start, len, ws) = (offset as usize, bytes.len(), self.write_size);
        if !start.is_multiple_of(ws) || !len.is_multiple_of(ws) {
            return Outcome::Done(Err(SimError::NotAligned {
                op: OpKind::Program,
                offset,
                len,
            }));
        }
        if start as u64 + len as u64 > self.capacity() as u64 {
            return Outcome::Done(Err(SimError::OutOfBounds {
                op: OpKind::Program,
                offset,
                len,
            }));
        }
        if let Err(e) = self.admit(OpKind::Program) {
            return Outcome::Done(Err(e));
        }
        // Refused whole, before anything lands, if any word is spent.
        for (i, word) in bytes.chunks(ws).enumerate() {
            let address = start + i * ws;
            let writes = self.writes[address / ws];
            if self.sabotage != Sabotage::BudgetIgnored && !budget_allows(self.rule, writes, word) {
                self.stats.write_budget_violations += 1;
                return Outcome::Done(Err(SimError::WriteBudget {
                    address: address as u32,
                    writes,
                    rule: self.rule,
                }));
            }
        }
        // Only calls that reach the cells count towards a cut (armed or not).
        let index = self.cut_ops;
        self.cut_ops += 1;
        if let Some(cut) = self.cut {
            let fires = match cut.at {
                CutPoint::Op(n) => n == index,
                CutPoint::Byte(n) => self.cut_bytes + len as u64 > n,
            };
            if fires {
                self.cut_fires();
                let landed = match (cut.at, cut.tear) {
                    (CutPoint::Byte(n), _) => Some(n.saturating_sub(self.cut_bytes) as usize),
                    (CutPoint::Op(_), Tear::Prefix(k)) => Some(k.min(len)),
                    (CutPoint::Op(_), Tear::Bits | Tear::Random) => None,
                };
                return Outcome::TornProgram {
                    cut,
                    offset: start,
                    landed,
                };
            }
        }
        for (cell, new) in self.data[start..start + len].iter_mut().zip(bytes) {
            *cell = match self.sabotage {
                Sabotage::ProgramOverwrites => *new,
                _ => *cell & new,
            };
        }
        for w in &mut self.writes[start / ws..(start + len) / ws] {
            *w = w.saturating_add(1);
        }
        self.stats.programmed_bytes += len as u64;
        self.cut_bytes += len as u64;
        Outcome::Done(Ok(()))
    }

    /// `erase`: the expected outcome; contents change unless torn.
    pub fn erase(&mut self, from: u32, to: u32) -> Outcome {
        let oob = |len| {
            Outcome::Done(Err(SimError::OutOfBounds {
                op: OpKind::Erase,
                offset: from,
                len,
            }))
        };
        if to < from {
            return oob(0);
        }
        let (start, len, es) = (from as usize, (to - from) as usize, self.erase_size);
        if !start.is_multiple_of(es) || !len.is_multiple_of(es) {
            return Outcome::Done(Err(SimError::NotAligned {
                op: OpKind::Erase,
                offset: from,
                len,
            }));
        }
        if start + len > self.capacity() {
            return oob(len);
        }
        if let Err(e) = self.admit(OpKind::Erase) {
            return Outcome::Done(Err(e));
        }
        let (first, count) = (start / es, len / es);
        let index = self.cut_ops;
        self.cut_ops += 1;
        if let Some(cut) = self.cut {
            let fires = match cut.at {
                CutPoint::Op(n) => n == index,
                // Power is already gone when the byte budget is spent.
                CutPoint::Byte(n) => self.cut_bytes >= n,
            };
            if fires {
                self.cut_fires();
                let erased = match (cut.at, cut.tear) {
                    (CutPoint::Byte(_), _) => Some(0),
                    (CutPoint::Op(_), Tear::Prefix(k)) => Some(k.min(len)),
                    (CutPoint::Op(_), Tear::Bits | Tear::Random) => None,
                };
                return Outcome::TornErase {
                    cut,
                    first,
                    count,
                    erased,
                };
            }
        }
        self.data[start..start + len].fill(0xFF);
        if self.sabotage != Sabotage::EraseKeepsBudget {
            self.writes[start / self.write_size..(start + len) / self.write_size].fill(0);
        }
        if self.sabotage != Sabotage::EraseNotCounted {
            for c in &mut self.stats.erase_counts[first..first + count] {
                *c += 1;
            }
            self.stats.erases += count as u64;
            self.stats.erased_bytes += len as u64;
        }
        Outcome::Done(Ok(()))
    }

    /// `arm_power_cut`.
    pub fn arm_power_cut(&mut self, cut: PowerCut) {
        self.cut = Some(cut);
        self.cut_ops = 0;
        self.cut_bytes = 0;
    }

    /// `cut_power`.
    pub fn cut_power(&mut self) {
        if self.powered {
            self.powered = false;
            self.stats.power_cuts += 1;
        }
    }

    /// `restore_power`: power on, pending cut disarmed, errors kept.
    pub fn restore_power(&mut self) {
        self.powered = true;
        self.cut = None;
    }

    /// `inject_error`: call indices count from now, for every kind.
    pub fn inject_error(&mut self, e: InjectedError) {
        self.errors.push(e);
        self.calls_seen = [0; 3];
    }

    /// `clear_faults`: errors and the armed cut go; power stays as it is.
    pub fn clear_faults(&mut self) {
        self.errors.clear();
        self.calls_seen = [0; 3];
        self.cut = None;
        self.cut_ops = 0;
        self.cut_bytes = 0;
    }

    /// `reset_counters`: all but wear.
    pub fn reset_counters(&mut self) {
        self.stats = Counters {
            erase_counts: std::mem::take(&mut self.stats.erase_counts),
            ..Counters::default()
        };
    }
}

/// Where a divergence was found: printed by every assertion.
#[derive(Clone, Copy)]
pub struct Ctx<'a> {
    /// Index of the op in the input.
    pub index: usize,
    /// The op, or `None` for the checks at the end of the run.
    pub op: Option<&'a Op>,
    /// The part.
    pub preset: PresetChoice,
    /// Its sector count.
    pub sectors: usize,
}

impl fmt::Display for Ctx<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?} x{} sectors, ", self.preset, self.sectors)?;
        match self.op {
            Some(op) => write!(f, "op #{}: {op:?}", self.index),
            None => write!(f, "end of run after {} ops", self.index),
        }
    }
}

/// The `NorFlashErrorKind` an error must map to.
fn expected_kind(e: &SimError) -> NorFlashErrorKind {
    match e {
        SimError::NotAligned { .. } => NorFlashErrorKind::NotAligned,
        SimError::OutOfBounds { .. } => NorFlashErrorKind::OutOfBounds,
        _ => NorFlashErrorKind::Other,
    }
}

fn check_result(actual: &Result<(), SimError>, expected: &Result<(), SimError>, ctx: Ctx) {
    assert_eq!(actual, expected, "{ctx}: result");
    if let (Err(a), Err(e)) = (actual, expected) {
        assert_eq!(a.kind(), expected_kind(e), "{ctx}: error kind of {a}");
    }
}

/// A flash call, as the harness makes it.
enum Call<'a> {
    Read(u32, &'a mut [u8]),
    Program(u32, &'a [u8]),
    Erase(u32, u32),
}

fn call_direct(flash: &mut SimFlash, call: Call) -> Result<(), SimError> {
    match call {
        Call::Read(offset, buf) => flash.read(offset, buf),
        Call::Program(offset, data) => flash.program(offset, data),
        Call::Erase(from, to) => flash.erase(from, to),
    }
}

/// Makes the call through `Nor`'s `embedded-storage` traits, on a snapshot
/// that then replaces the flash (so the snapshot must carry everything).
fn call_nor<const W: usize, const E: usize, const M: bool>(
    flash: &mut SimFlash,
    call: Call,
) -> Result<(), SimError> {
    let mut nor = match Nor::<W, E, M>::new(flash.snapshot()) {
        Ok(nor) => nor,
        Err(e) => panic!("Nor<{W}, {E}, {M}> refused its own preset: {e}"),
    };
    assert_eq!(ReadNorFlash::capacity(&nor), flash.capacity());
    let result = match call {
        Call::Read(offset, buf) => ReadNorFlash::read(&mut nor, offset, buf),
        Call::Program(offset, data) => NorFlash::write(&mut nor, offset, data),
        Call::Erase(from, to) => NorFlash::erase(&mut nor, from, to),
    };
    *flash = nor.into_inner();
    result
}

fn call_flash(
    preset: PresetChoice,
    flash: &mut SimFlash,
    via_trait: bool,
    call: Call,
) -> Result<(), SimError> {
    if !via_trait {
        return call_direct(flash, call);
    }
    match preset {
        PresetChoice::Esp32 | PresetChoice::Nrf52 => call_nor::<4, 4096, true>(flash, call),
        PresetChoice::Stm32l4 => call_nor::<8, 2048, false>(flash, call),
        PresetChoice::Stm32h7 => call_nor::<32, { 128 * 1024 }, false>(flash, call),
        PresetChoice::Esp32Encrypted => call_nor::<16, 4096, false>(flash, call),
        PresetChoice::Generic => call_nor::<1, 4096, true>(flash, call),
    }
}

fn splitmix(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Pseudo-random bytes from a seed (16 B to 2 KiB), for tests that turn
/// seeds into inputs with `Input::arbitrary_take_rest`, so that a failure
/// replays from its seed.
pub fn seeded_bytes(seed: u64) -> Vec<u8> {
    let mut state = seed;
    let len = 16 + (splitmix(&mut state) % 2048) as usize;
    (0..len).map(|_| splitmix(&mut state) as u8).collect()
}

impl Fill {
    fn bytes(&self, len: usize) -> Vec<u8> {
        match self {
            Fill::Zeros => vec![0; len],
            Fill::Ones => vec![0xFF; len],
            Fill::Byte(b) => vec![*b; len],
            Fill::Seeded(seed) => {
                let mut state = *seed;
                (0..len).map(|_| splitmix(&mut state) as u8).collect()
            }
            Fill::Bytes(v) if v.is_empty() => vec![0; len],
            Fill::Bytes(v) => v.iter().copied().cycle().take(len).collect(),
        }
    }
}

impl Addr {
    fn resolve(self, m: &Reference) -> u32 {
        let (cap, ws) = (m.capacity(), m.write_size);
        let address = match self {
            Addr::Near { sector, word } => {
                let words = (m.erase_size / ws).min(64);
                (usize::from(sector) % m.sector_count()) * m.erase_size
                    + (usize::from(word) % words) * ws
            }
            Addr::Word(i) => (usize::from(i) % (cap / ws + 2)) * ws,
            Addr::Byte(b) => b as usize % (cap + 16),
            Addr::Raw(r) => return r,
        };
        address as u32
    }
}

impl Len {
    fn resolve(self, m: &Reference) -> usize {
        let ws = m.write_size;
        match self {
            Len::Few(n) => usize::from(n % 17) * ws,
            Len::Many(n) => usize::from(n) * ws,
            Len::Span(n) => (usize::from(n) % (m.capacity() / ws + 2)) * ws,
            Len::Bytes(n) => usize::from(n),
        }
    }
}

impl SectorAddr {
    fn resolve(self, m: &Reference) -> u32 {
        match self {
            SectorAddr::Sector(i) => {
                ((usize::from(i) % (m.sector_count() + 2)) * m.erase_size) as u32
            }
            SectorAddr::Raw(r) => r,
        }
    }
}

impl EraseEnd {
    fn resolve(self, from: u32, m: &Reference) -> u32 {
        match self {
            EraseEnd::Sectors(n) => from.wrapping_add(u32::from(n % 3) * m.erase_size as u32),
            EraseEnd::At(at) => at.resolve(m),
        }
    }
}

fn power_cut(seed: u64, at: Cut, tear: TearChoice) -> PowerCut {
    PowerCut {
        seed,
        at: match at {
            Cut::Op(n) => CutPoint::Op(u64::from(n % 8)),
            Cut::Byte(n) => CutPoint::Byte(u64::from(n % 1024)),
            Cut::FarOp(n) => CutPoint::Op(u64::from(n)),
            Cut::FarByte(n) => CutPoint::Byte(u64::from(n % (1 << 20))),
        },
        tear: match tear {
            TearChoice::Prefix(k) => Tear::Prefix(usize::from(k)),
            TearChoice::PrefixFar(k) => Tear::Prefix((k % (1 << 20)) as usize),
            TearChoice::Bits => Tear::Bits,
            TearChoice::Random => Tear::Random,
        },
    }
}

/// Checks a torn program against the documented envelope, then gives the
/// model the flash's bytes, program counts and byte counter for the call.
///
/// - Bytes outside the call: unchanged (checked by the whole-image compare
///   that follows).
/// - Prefix tear or `Byte` cut: exactly the first `landed` bytes became
///   `old AND new`, the rest is untouched; `landed` bytes are counted.
/// - `Bits`: every byte is between `old AND new` and `old` (only intended
///   1-to-0 transitions land); at most the call's length is counted.
/// - `Random`: any bytes in the call; at most its length is counted.
/// - Program counts: each word of the call gains at most one program; for a
///   prefix, words wholly inside it gain one and words wholly past it none.
pub fn check_torn_program(
    flash: &SimFlash,
    m: &mut Reference,
    offset: usize,
    data: &[u8],
    cut: PowerCut,
    landed: Option<usize>,
    ctx: Ctx,
) {
    let ws = m.write_size;
    let mut after = vec![0u8; data.len()];
    flash.peek(offset, &mut after);
    let old = &m.data[offset..offset + data.len()];
    for (i, ((&a, &o), &d)) in after.iter().zip(old).zip(data).enumerate() {
        let at = offset + i;
        match (landed, cut.tear) {
            (Some(k), _) => {
                let want = if i < k { o & d } else { o };
                assert_eq!(a, want, "{ctx}: torn program ({cut}) byte 0x{at:x}, old {o:#04x} new {d:#04x}, {k} B land");
            }
            (None, Tear::Bits) => {
                assert_eq!(
                    a & !o,
                    0,
                    "{ctx}: torn program ({cut}) set a bit at 0x{at:x}: old {o:#04x} now {a:#04x}"
                );
                assert_eq!(o & d & !a, 0, "{ctx}: torn program ({cut}) cleared a bit it should keep at 0x{at:x}: old {o:#04x} new {d:#04x} now {a:#04x}");
            }
            (None, _) => {}
        }
    }
    for word_start in (0..data.len()).step_by(ws) {
        let address = offset + word_start;
        let (o, a) = (m.writes[address / ws], flash.word_writes(address));
        let plus = o.saturating_add(1);
        let want: &[u8] = match landed {
            Some(k) if word_start + ws <= k => &[plus],
            Some(k) if word_start >= k => &[o],
            _ => &[o, plus],
        };
        assert!(
            want.contains(&a),
            "{ctx}: torn program ({cut}) left word 0x{address:x} with {a} programs, had {o}, expected one of {want:?}"
        );
        m.writes[address / ws] = a;
    }
    let counted = grew(
        flash.stats().programmed_bytes,
        m.stats.programmed_bytes,
        "programmed bytes",
        ctx,
    );
    match landed {
        Some(k) => assert_eq!(
            counted as usize, k,
            "{ctx}: torn program ({cut}) bytes counted"
        ),
        None => assert!(
            counted as usize <= data.len(),
            "{ctx}: torn program ({cut}) counted {counted} B of {}",
            data.len()
        ),
    }
    m.stats.programmed_bytes += counted;
    m.cut_bytes += counted;
    m.data[offset..offset + data.len()].copy_from_slice(&after);
}

/// Checks a torn erase against the documented envelope, then gives the model
/// the flash's bytes, program counts and wear counters for the call.
///
/// - Prefix tear: exactly the first `erased` bytes read 0xFF, the rest is
///   untouched; the sectors that prefix reaches are counted once each; words
///   wholly inside it have their budget back, words wholly past it do not.
/// - `Bits`/`Random`: the sectors of the call are, in order, some erased
///   whole, then at most one in flight whose bits only went from 0 to 1,
///   then untouched ones; the counted sectors are exactly the erased ones and
///   the one in flight; untouched sectors keep their program counts, erased
///   ones have none, the one in flight has each word's count kept or reset.
pub fn check_torn_erase(
    flash: &SimFlash,
    m: &mut Reference,
    first: usize,
    count: usize,
    cut: PowerCut,
    erased: Option<usize>,
    ctx: Ctx,
) {
    let (es, ws) = (m.erase_size, m.write_size);
    let start = first * es;
    let len = count * es;
    let mut after = vec![0u8; len];
    flash.peek(start, &mut after);
    let wear = &flash.stats().erase_counts;
    let deltas: Vec<u64> = (first..first + count)
        .map(|s| grew(wear[s], m.stats.erase_counts[s], "wear", ctx))
        .collect();
    match erased {
        Some(e) => {
            for (i, (&a, &o)) in after.iter().zip(&m.data[start..start + len]).enumerate() {
                let want = if i < e { 0xFF } else { o };
                assert_eq!(
                    a,
                    want,
                    "{ctx}: torn erase ({cut}) byte 0x{:x}, {e} B erased",
                    start + i
                );
            }
            for (r, &d) in deltas.iter().enumerate() {
                let want = u64::from(r * es < e);
                assert_eq!(
                    d,
                    want,
                    "{ctx}: torn erase ({cut}) wear of sector {}, {e} B erased",
                    first + r
                );
            }
            for word_start in (0..len).step_by(ws) {
                let address = start + word_start;
                let (o, a) = (m.writes[address / ws], flash.word_writes(address));
                let want: &[u8] = if word_start + ws <= e {
                    &[0]
                } else if word_start >= e {
                    &[o]
                } else {
                    &[o, 0]
                };
                assert!(want.contains(&a), "{ctx}: torn erase ({cut}) left word 0x{address:x} with {a} programs, had {o}, {e} B erased");
            }
        }
        None => {
            assert!(
                deltas.iter().all(|d| *d <= 1),
                "{ctx}: torn erase ({cut}) wear deltas {deltas:?}"
            );
            let touched = deltas.iter().take_while(|d| **d == 1).count();
            assert!(
                deltas[touched..].iter().all(|d| *d == 0),
                "{ctx}: torn erase ({cut}) counted sectors not a prefix: {deltas:?}"
            );
            for r in 0..count {
                let range = r * es..(r + 1) * es;
                let (now, was) = (
                    &after[range.clone()],
                    &m.data[start + range.start..start + range.end],
                );
                let sector = first + r;
                for (i, (&a, &o)) in now.iter().zip(was).enumerate() {
                    let at = start + range.start + i;
                    if r + 1 < touched {
                        assert_eq!(a, 0xFF, "{ctx}: torn erase ({cut}) sector {sector} before the one in flight not erased at 0x{at:x}");
                    } else if r + 1 == touched {
                        assert_eq!(a & o, o, "{ctx}: torn erase ({cut}) cleared a bit at 0x{at:x}: old {o:#04x} now {a:#04x}");
                    } else {
                        assert_eq!(a, o, "{ctx}: torn erase ({cut}) changed uncounted sector {sector} at 0x{at:x}");
                    }
                }
                for word_start in range.step_by(ws) {
                    let address = start + word_start;
                    let (o, a) = (m.writes[address / ws], flash.word_writes(address));
                    let ok = if r + 1 < touched {
                        a == 0
                    } else if r + 1 == touched {
                        a == 0 || a == o
                    } else {
                        a == o
                    };
                    assert!(ok, "{ctx}: torn erase ({cut}) left word 0x{address:x} of sector {sector} (touched {touched}) with {a} programs, had {o}");
                }
            }
        }
    }
    for word_start in (0..len).step_by(ws) {
        let address = start + word_start;
        m.writes[address / ws] = flash.word_writes(address);
    }
    let sectors: u64 = deltas.iter().sum();
    let s = flash.stats();
    let erases = grew(s.erases, m.stats.erases, "erases", ctx);
    assert_eq!(erases, sectors, "{ctx}: torn erase ({cut}) erases counter");
    let erased_bytes = grew(s.erased_bytes, m.stats.erased_bytes, "erased bytes", ctx);
    assert_eq!(
        erased_bytes,
        sectors * es as u64,
        "{ctx}: torn erase ({cut}) erased bytes"
    );
    m.stats.erases += sectors;
    m.stats.erased_bytes += sectors * es as u64;
    m.stats.erase_counts[first..first + count].copy_from_slice(&wear[first..first + count]);
    m.data[start..start + len].copy_from_slice(&after);
}

/// `now - was` for a counter that may only grow.
fn grew(now: u64, was: u64, what: &str, ctx: Ctx) -> u64 {
    assert!(now >= was, "{ctx}: {what} went back from {was} to {now}");
    now - was
}

/// Compares everything cheap to compare: the whole image, counters, power
/// state, the armed cut and the cut-point count.
fn check_state(flash: &SimFlash, m: &Reference, image: &mut [u8], ctx: Ctx) {
    flash.peek(0, image);
    if image != m.data.as_slice() {
        let at = image
            .iter()
            .zip(&m.data)
            .position(|(a, b)| a != b)
            .unwrap_or(0);
        panic!(
            "{ctx}: image differs first at 0x{at:x}: flash {:#04x}, model {:#04x}",
            image[at], m.data[at]
        );
    }
    assert_eq!(Counters::from(flash.stats()), m.stats, "{ctx}: counters");
    assert_eq!(flash.is_powered(), m.powered, "{ctx}: power");
    assert_eq!(flash.armed_power_cut(), m.cut, "{ctx}: armed cut");
    assert_eq!(flash.ops_since_arm(), m.cut_ops, "{ctx}: ops since arm");
}

/// Compares the program count of every word in `range`.
fn check_writes(flash: &SimFlash, m: &Reference, range: std::ops::Range<usize>, ctx: Ctx) {
    let ws = m.write_size;
    for address in range.step_by(ws) {
        assert_eq!(
            flash.word_writes(address),
            m.writes[address / ws],
            "{ctx}: program count of the word at 0x{address:x}"
        );
    }
}

/// What a run exercised, by outcome: tests check that their inputs reach
/// every case the harness knows.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Tally(pub BTreeMap<&'static str, u64>);

impl Tally {
    /// Every outcome a run can tally.
    pub const OUTCOMES: [&'static str; 19] = [
        "read ok",
        "program ok",
        "erase ok",
        "not aligned",
        "out of bounds",
        "power off",
        "injected",
        "write budget",
        "torn program prefix",
        "torn program byte cut",
        "torn program bits",
        "torn program random",
        "torn erase prefix",
        "torn erase byte cut",
        "torn erase bits",
        "torn erase random",
        "bit flip",
        "bit flip refused",
        "rewind",
    ];

    fn hit(&mut self, outcome: &'static str) {
        *self.0.entry(outcome).or_default() += 1;
    }

    fn result(&mut self, ok: &'static str, r: &Result<(), SimError>) {
        self.hit(match r {
            Ok(()) => ok,
            Err(SimError::NotAligned { .. }) => "not aligned",
            Err(SimError::OutOfBounds { .. }) => "out of bounds",
            Err(SimError::PowerOff) => "power off",
            Err(SimError::Injected(_)) => "injected",
            Err(SimError::WriteBudget { .. }) => "write budget",
            Err(SimError::PowerCut(_)) => "power cut",
            Err(SimError::Io(_)) => "io",
        });
    }

    fn torn(&mut self, call: &'static str, cut: PowerCut) {
        self.hit(match (call, cut.at, cut.tear) {
            ("program", CutPoint::Byte(_), _) => "torn program byte cut",
            ("program", _, Tear::Prefix(_)) => "torn program prefix",
            ("program", _, Tear::Bits) => "torn program bits",
            ("program", _, Tear::Random) => "torn program random",
            (_, CutPoint::Byte(_), _) => "torn erase byte cut",
            (_, _, Tear::Prefix(_)) => "torn erase prefix",
            (_, _, Tear::Bits) => "torn erase bits",
            (_, _, Tear::Random) => "torn erase random",
        });
    }

    /// Adds another run's tally.
    pub fn add(&mut self, other: &Tally) {
        for (k, v) in &other.0 {
            *self.0.entry(k).or_default() += v;
        }
    }

    /// Outcomes of [`Self::OUTCOMES`] never reached.
    pub fn missing(&self) -> Vec<&'static str> {
        Self::OUTCOMES
            .into_iter()
            .filter(|o| !self.0.contains_key(o))
            .collect()
    }
}

/// Runs one input with a correct model.
pub fn run(input: &Input) -> Tally {
    run_with(input, Sabotage::None)
}

/// Runs one input; panics on the first divergence between flash and model.
pub fn run_with(input: &Input, sabotage: Sabotage) -> Tally {
    let mut tally = Tally::default();
    let preset = input.preset;
    let sectors = preset.sector_count(input.sectors);
    let mut m = Reference::new(preset.preset(), sectors, sabotage);
    let model = match preset.preset().model(m.capacity()) {
        Ok(model) => model,
        Err(e) => panic!("{preset:?} x{sectors}: no model: {e}"),
    };
    let mut flash = SimFlash::new(model);
    let cap = m.capacity();
    assert_eq!(flash.capacity(), cap);
    let mut image = vec![0u8; cap];
    let mut snapshots: Vec<(SimFlash, Reference)> = Vec::new();
    let mut device_time_us = 0.0f64;

    for (index, op) in input.ops.iter().take(OPS_MAX).enumerate() {
        let ctx = Ctx {
            index,
            op: Some(op),
            preset,
            sectors,
        };
        // Whether device time may grow: only when the flash did work.
        let mut may_work = false;
        match op {
            Op::Read { at, len, via_trait } => {
                let (offset, len) = (at.resolve(&m), len.resolve(&m));
                let expected = m.read(offset, len);
                let mut buf = vec![0xA5u8; len];
                let actual =
                    call_flash(preset, &mut flash, *via_trait, Call::Read(offset, &mut buf));
                let expected_result = expected.as_ref().map(|_| ()).map_err(Clone::clone);
                check_result(&actual, &expected_result, ctx);
                tally.result("read ok", &expected_result);
                if let Ok(want) = expected {
                    assert!(
                        buf == want,
                        "{ctx}: read returned other bytes than the model holds"
                    );
                    may_work = true;
                }
            }
            Op::Program {
                at,
                len,
                fill,
                via_trait,
            } => {
                let (offset, len) = (at.resolve(&m), len.resolve(&m));
                let data = fill.bytes(len);
                let outcome = m.program(offset, &data);
                let actual =
                    call_flash(preset, &mut flash, *via_trait, Call::Program(offset, &data));
                match outcome {
                    Outcome::Done(expected) => {
                        check_result(&actual, &expected, ctx);
                        tally.result("program ok", &expected);
                        if expected.is_ok() {
                            may_work = true;
                            let start = offset as usize;
                            check_writes(&flash, &m, start..start + len, ctx);
                        }
                    }
                    Outcome::TornProgram {
                        cut,
                        offset,
                        landed,
                    } => {
                        check_result(&actual, &Err(SimError::PowerCut(cut)), ctx);
                        tally.torn("program", cut);
                        check_torn_program(&flash, &mut m, offset, &data, cut, landed, ctx);
                        may_work = true;
                    }
                    Outcome::TornErase { .. } => unreachable!("program returned an erase outcome"),
                }
            }
            Op::Erase {
                from,
                to,
                via_trait,
            } => {
                let from = from.resolve(&m);
                let to = to.resolve(from, &m);
                let outcome = m.erase(from, to);
                let actual = call_flash(preset, &mut flash, *via_trait, Call::Erase(from, to));
                match outcome {
                    Outcome::Done(expected) => {
                        check_result(&actual, &expected, ctx);
                        tally.result("erase ok", &expected);
                        if expected.is_ok() {
                            may_work = true;
                            check_writes(&flash, &m, from as usize..to as usize, ctx);
                        }
                    }
                    Outcome::TornErase {
                        cut,
                        first,
                        count,
                        erased,
                    } => {
                        check_result(&actual, &Err(SimError::PowerCut(cut)), ctx);
                        tally.torn("erase", cut);
                        check_torn_erase(&flash, &mut m, first, count, cut, erased, ctx);
                        may_work = true;
                    }
                    Outcome::TornProgram { .. } => unreachable!("erase returned a program outcome"),
                }
            }
            Op::ArmPowerCut { seed, at, tear } => {
                let cut = power_cut(*seed, *at, *tear);
                flash.arm_power_cut(cut);
                m.arm_power_cut(cut);
                let replay = cut.to_string();
                assert_eq!(
                    replay.parse::<PowerCut>().ok(),
                    Some(cut),
                    "{ctx}: replay string {replay}"
                );
            }
            Op::CutPower => {
                flash.cut_power();
                m.cut_power();
            }
            Op::RestorePower => {
                flash.restore_power();
                m.restore_power();
            }
            Op::InjectError {
                op,
                at_call,
                persistent,
            } => {
                let e = InjectedError {
                    op: match op {
                        KindChoice::Read => OpKind::Read,
                        KindChoice::Program => OpKind::Program,
                        KindChoice::Erase => OpKind::Erase,
                    },
                    at_call: u64::from(at_call % 8),
                    persistent: *persistent,
                };
                flash.inject_error(e);
                m.inject_error(e);
            }
            Op::ClearFaults => {
                flash.clear_faults();
                m.clear_faults();
            }
            Op::FlipBit { address, bit } => {
                let (address, bit) = (*address as usize % (cap + 4), bit % 9);
                let actual = flash.flip_bit(address, bit);
                if address < cap && bit < 8 {
                    check_result(&actual, &Ok(()), ctx);
                    tally.hit("bit flip");
                    m.data[address] ^= 1 << bit;
                } else {
                    let e = actual.err();
                    assert!(
                        matches!(e, Some(SimError::OutOfBounds { .. })),
                        "{ctx}: flip of bit {bit} at 0x{address:x}: {e:?}"
                    );
                    tally.hit("bit flip refused");
                }
            }
            Op::FlipRandomBits { count, seed } => {
                let count = usize::from(count % 5);
                match flash.flip_random_bits(count, *seed) {
                    Ok(flips) => {
                        assert_eq!(flips.len(), count, "{ctx}: flips returned");
                        for (address, bit) in flips {
                            assert!(
                                address < cap && bit < 8,
                                "{ctx}: flip of bit {bit} at 0x{address:x}"
                            );
                            m.data[address] ^= 1 << bit;
                        }
                    }
                    Err(e) => panic!("{ctx}: random flips failed: {e}"),
                }
            }
            Op::ResetCounters => {
                flash.reset_counters();
                m.reset_counters();
                device_time_us = 0.0;
            }
            Op::Snapshot => {
                if snapshots.len() == SNAPSHOTS_MAX {
                    snapshots.remove(0);
                }
                snapshots.push((flash.snapshot(), m.clone()));
            }
            Op::Rewind { index } => {
                if !snapshots.is_empty() {
                    let (snap, saved) = &snapshots[usize::from(*index) % snapshots.len()];
                    // The snapshot did not move while the flash went on.
                    check_state(snap, saved, &mut image, ctx);
                    check_writes(snap, saved, 0..cap, ctx);
                    flash = snap.snapshot();
                    m = saved.clone();
                    device_time_us = flash.stats().device_time_us;
                    tally.hit("rewind");
                }
            }
            Op::Fork => flash = flash.snapshot(),
        }
        check_state(&flash, &m, &mut image, ctx);
        let t = flash.stats().device_time_us;
        if may_work {
            assert!(
                t >= device_time_us,
                "{ctx}: device time went back from {device_time_us} to {t}"
            );
        } else {
            assert_eq!(t, device_time_us, "{ctx}: device time moved without work");
        }
        device_time_us = t;
    }
    let ctx = Ctx {
        index: input.ops.len().min(OPS_MAX),
        op: None,
        preset,
        sectors,
    };
    check_writes(&flash, &m, 0..cap, ctx);
    for (snap, saved) in &snapshots {
        check_state(snap, saved, &mut image, ctx);
        check_writes(snap, saved, 0..cap, ctx);
    }
    tally
}
