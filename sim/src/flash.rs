//! The simulated NOR flash: contents, per-word program budgets, counters,
//! faults and backing storage.
//!
//! [`SimFlash`] works with a geometry chosen at run time. Its inherent
//! [`read`](SimFlash::read), [`program`](SimFlash::program) and
//! [`erase`](SimFlash::erase) follow NOR semantics: erase sets every byte of a
//! sector to 0xFF, programming ANDs bits so they only go from 1 to 0, and each
//! word may be programmed only as often as the model's [`WriteRule`] allows.
//! [`crate::Nor`] puts the `embedded-storage` traits on top.
//!
//! Sectors are reference counted and copied on write, so
//! [`snapshot`](SimFlash::snapshot) is cheap: a sweep over every cut point can
//! fork each run from a snapshot instead of replaying the workload.

use std::fmt;
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::Serialize;

use crate::fault::{CutPoint, InjectedError, OpKind, PowerCut, Tear};
use crate::model::{Model, WriteRule};

/// Why a simulated flash call failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SimError {
    /// Offset or length not aligned to the program or erase unit.
    NotAligned {
        /// The call.
        op: OpKind,
        /// Its offset.
        offset: u32,
        /// Its length in bytes.
        len: usize,
    },
    /// The call reaches past the end of the flash.
    OutOfBounds {
        /// The call.
        op: OpKind,
        /// Its offset.
        offset: u32,
        /// Its length in bytes.
        len: usize,
    },
    /// Power failed during this call; what landed depends on the tear mode.
    PowerCut(PowerCut),
    /// Power is off: every call fails until [`SimFlash::restore_power`].
    PowerOff,
    /// An injected error.
    Injected(InjectedError),
    /// The program would exceed the model's per-word write budget. Nothing was
    /// written.
    WriteBudget {
        /// Address of the first offending word.
        address: u32,
        /// Programs that word has had since its last erase.
        writes: u8,
        /// The model's rule.
        rule: WriteRule,
    },
    /// The backing file could not be read or written.
    Io(String),
}

impl fmt::Display for SimError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SimError::NotAligned { op, offset, len } => {
                write!(f, "{op} at 0x{offset:x} of {len} B is not aligned")
            }
            SimError::OutOfBounds { op, offset, len } => {
                write!(f, "{op} at 0x{offset:x} of {len} B is out of bounds")
            }
            SimError::PowerCut(cut) => write!(f, "power cut during the call ({cut})"),
            SimError::PowerOff => f.write_str("power is off"),
            SimError::Injected(e) => write!(f, "injected {e}"),
            SimError::WriteBudget {
                address,
                writes,
                rule,
            } => write!(
                f,
                "write-budget violation: word at 0x{address:x} already programmed {writes} time(s) since erase, rule {rule:?}"
            ),
            SimError::Io(e) => write!(f, "backing file: {e}"),
        }
    }
}

impl std::error::Error for SimError {}

impl embedded_storage::nor_flash::NorFlashError for SimError {
    fn kind(&self) -> embedded_storage::nor_flash::NorFlashErrorKind {
        use embedded_storage::nor_flash::NorFlashErrorKind as K;
        match self {
            SimError::NotAligned { .. } => K::NotAligned,
            SimError::OutOfBounds { .. } => K::OutOfBounds,
            _ => K::Other,
        }
    }
}

/// Counters of everything the flash did.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Stats {
    /// Read calls, including failed ones.
    pub read_calls: u64,
    /// Bytes returned by successful reads.
    pub read_bytes: u64,
    /// Program calls, including failed ones.
    pub program_calls: u64,
    /// Bytes programmed (torn calls count what landed).
    pub programmed_bytes: u64,
    /// Erase calls, including failed ones.
    pub erase_calls: u64,
    /// Sectors erased (torn erases count).
    pub erases: u64,
    /// Bytes erased (`erases` times the sector size).
    pub erased_bytes: u64,
    /// Programs refused because they exceeded the per-word write budget.
    pub write_budget_violations: u64,
    /// Calls that failed for lack of power or an injected error.
    pub failed_calls: u64,
    /// Power cuts that happened.
    pub power_cuts: u64,
    /// Modelled device time of all successful work, in microseconds.
    pub device_time_us: f64,
    /// Erase count of every sector, since the simulator was created or the
    /// image opened (wear is never reset by [`SimFlash::reset_counters`]).
    pub erase_counts: Vec<u64>,
}

impl Stats {
    /// The most-erased sector's erase count.
    pub fn erase_count_max(&self) -> u64 {
        self.erase_counts.iter().copied().max().unwrap_or(0)
    }

    /// Mean erase count over all sectors.
    pub fn erase_count_mean(&self) -> f64 {
        if self.erase_counts.is_empty() {
            return 0.0;
        }
        self.erase_counts.iter().sum::<u64>() as f64 / self.erase_counts.len() as f64
    }

    /// The counters as a JSON object, with `erase_count_max` and
    /// `erase_count_mean` added.
    pub fn to_json(&self) -> serde_json::Value {
        let mut v = serde_json::to_value(self).expect("stats serialize");
        if let Some(o) = v.as_object_mut() {
            o.insert("erase_count_max".into(), self.erase_count_max().into());
            o.insert("erase_count_mean".into(), self.erase_count_mean().into());
        }
        v
    }
}

#[derive(Clone)]
struct Sector {
    data: Vec<u8>,
    /// Programs per word since the last erase, saturating.
    writes: Vec<u8>,
}

#[derive(Clone, Debug, Default)]
struct Faults {
    cut: Option<PowerCut>,
    /// Program-or-erase calls seen since the cut was armed.
    cut_ops_seen: u64,
    /// Bytes programmed since the cut was armed.
    cut_bytes_seen: u64,
    errors: Vec<InjectedError>,
    /// Calls of each kind since errors were last injected or cleared.
    calls_seen: [u64; 3],
}

struct Backing {
    path: PathBuf,
    file: File,
}

/// A simulated NOR flash. See the [module docs](self).
pub struct SimFlash {
    model: Model,
    sectors: Vec<Arc<Sector>>,
    stats: Stats,
    faults: Faults,
    powered: bool,
    backing: Option<Backing>,
}

impl Clone for SimFlash {
    /// A snapshot: contents, write budgets, counters and armed faults are
    /// copied (sectors are shared until one side writes them). The copy is
    /// always RAM-backed.
    fn clone(&self) -> Self {
        Self {
            model: self.model.clone(),
            sectors: self.sectors.clone(),
            stats: self.stats.clone(),
            faults: self.faults.clone(),
            powered: self.powered,
            backing: None,
        }
    }
}

impl fmt::Debug for SimFlash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SimFlash")
            .field("model", &self.model.name)
            .field("geometry", &self.model.geometry)
            .field("powered", &self.powered)
            .field("backing", &self.backing.as_ref().map(|b| &b.path))
            .finish()
    }
}

fn io_err(path: &Path, e: std::io::Error) -> SimError {
    SimError::Io(format!("{}: {e}", path.display()))
}

impl SimFlash {
    /// A new, fully erased RAM flash.
    pub fn new(model: Model) -> Self {
        let g = model.geometry;
        let sector = Arc::new(Sector {
            data: vec![0xFF; g.erase_size],
            writes: vec![0; g.words_per_sector()],
        });
        Self {
            sectors: vec![sector; g.sector_count],
            stats: Stats {
                erase_counts: vec![0; g.sector_count],
                ..Stats::default()
            },
            model,
            faults: Faults::default(),
            powered: true,
            backing: None,
        }
    }

    /// A RAM flash holding `image`, for example an `esptool read_flash` dump.
    ///
    /// The image's length sets the sector count and must be a whole number of
    /// the model's sectors. Every word that is not all 0xFF counts as
    /// programmed once.
    pub fn from_image(model: &Model, image: &[u8]) -> Result<Self, SimError> {
        let model = model
            .with_capacity(image.len())
            .map_err(|e| SimError::Io(format!("image of {} B: {e}", image.len())))?;
        let mut flash = Self::new(model);
        let (erase, write) = (
            flash.model.geometry.erase_size,
            flash.model.geometry.write_size,
        );
        for (sector, chunk) in flash.sectors.iter_mut().zip(image.chunks(erase)) {
            let s = Arc::make_mut(sector);
            s.data.copy_from_slice(chunk);
            for (w, word) in s.writes.iter_mut().zip(chunk.chunks(write)) {
                *w = u8::from(word.iter().any(|b| *b != 0xFF));
            }
        }
        Ok(flash)
    }

    /// A new, fully erased flash backed by the file at `path`, which is
    /// created or truncated. Every change is written through to the file.
    pub fn create_file(model: Model, path: impl AsRef<Path>) -> Result<Self, SimError> {
        let path = path.as_ref();
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(path)
            .map_err(|e| io_err(path, e))?;
        let erased = vec![0xFF; model.geometry.erase_size];
        for _ in 0..model.geometry.sector_count {
            file.write_all(&erased).map_err(|e| io_err(path, e))?;
        }
        let mut flash = Self::new(model);
        flash.backing = Some(Backing {
            path: path.to_path_buf(),
            file,
        });
        Ok(flash)
    }

    /// A flash backed by the existing image file at `path` (a previous run's
    /// image or a device dump). The file's size sets the sector count; changes
    /// are written through to it.
    pub fn open_file(model: &Model, path: impl AsRef<Path>) -> Result<Self, SimError> {
        let path = path.as_ref();
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .map_err(|e| io_err(path, e))?;
        let mut image = Vec::new();
        file.read_to_end(&mut image).map_err(|e| io_err(path, e))?;
        let mut flash = Self::from_image(model, &image)
            .map_err(|e| SimError::Io(format!("{}: {e}", path.display())))?;
        flash.backing = Some(Backing {
            path: path.to_path_buf(),
            file,
        });
        Ok(flash)
    }

    /// The model this flash simulates.
    pub fn model(&self) -> &Model {
        &self.model
    }

    /// Total size in bytes.
    pub fn capacity(&self) -> usize {
        self.model.geometry.capacity()
    }

    /// The counters.
    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// Zeroes every counter except the per-sector erase counts (wear).
    pub fn reset_counters(&mut self) {
        let erase_counts = std::mem::take(&mut self.stats.erase_counts);
        self.stats = Stats {
            erase_counts,
            ..Stats::default()
        };
    }

    /// A cheap copy of the whole flash (see [`Clone`]).
    pub fn snapshot(&self) -> Self {
        self.clone()
    }

    /// Whether the flash has power.
    pub fn is_powered(&self) -> bool {
        self.powered
    }

    /// Cuts power now, between calls: nothing is torn.
    pub fn cut_power(&mut self) {
        if self.powered {
            self.powered = false;
            self.stats.power_cuts += 1;
        }
    }

    /// Powers the flash back on and disarms any pending power cut. Injected
    /// errors stay until [`clear_faults`](Self::clear_faults).
    pub fn restore_power(&mut self) {
        self.powered = true;
        self.faults.cut = None;
    }

    /// Arms a power cut, counted from now.
    pub fn arm_power_cut(&mut self, cut: PowerCut) {
        self.faults.cut = Some(cut);
        self.faults.cut_ops_seen = 0;
        self.faults.cut_bytes_seen = 0;
    }

    /// The armed power cut, if it has not happened yet.
    pub fn armed_power_cut(&self) -> Option<PowerCut> {
        self.faults.cut
    }

    /// Program and erase calls (that passed the alignment and bounds checks)
    /// seen since the last power cut was armed, or since creation: the number
    /// of cut points a workload offers. Counting stops while power is off.
    pub fn ops_since_arm(&self) -> u64 {
        self.faults.cut_ops_seen
    }

    /// Injects an error; call indices count from now.
    pub fn inject_error(&mut self, error: InjectedError) {
        self.faults.errors.push(error);
        self.faults.calls_seen = [0; 3];
    }

    /// Removes injected errors and the armed power cut.
    pub fn clear_faults(&mut self) {
        self.faults = Faults::default();
    }

    /// Flips one bit at rest, as retention loss would. Not a flash call: no
    /// counter moves.
    pub fn flip_bit(&mut self, address: usize, bit: u8) -> Result<(), SimError> {
        if address >= self.capacity() || bit >= 8 {
            return Err(SimError::OutOfBounds {
                op: OpKind::Program,
                offset: address as u32,
                len: 1,
            });
        }
        let erase = self.model.geometry.erase_size;
        let s = Arc::make_mut(&mut self.sectors[address / erase]);
        s.data[address % erase] ^= 1 << bit;
        self.persist(address, 1)
    }

    /// Flips `count` random bits at rest, chosen by `seed`; returns them as
    /// `(address, bit)`.
    pub fn flip_random_bits(
        &mut self,
        count: usize,
        seed: u64,
    ) -> Result<Vec<(usize, u8)>, SimError> {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mut flipped = Vec::with_capacity(count);
        for _ in 0..count {
            let address = rng.random_range(0..self.capacity());
            let bit = rng.random_range(0..8u8);
            self.flip_bit(address, bit)?;
            flipped.push((address, bit));
        }
        Ok(flipped)
    }

    /// The whole contents, without touching any counter.
    pub fn image(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.capacity());
        for s in &self.sectors {
            out.extend_from_slice(&s.data);
        }
        out
    }

    /// Whether `other` holds the same contents with the same write budgets
    /// left (counters, wear and faults aside): a flash that a mount, a read
    /// or a write cannot tell from `other`.
    pub fn same_contents(&self, other: &SimFlash) -> bool {
        self.sectors.len() == other.sectors.len()
            && self
                .sectors
                .iter()
                .zip(&other.sectors)
                .all(|(a, b)| Arc::ptr_eq(a, b) || a.data == b.data && a.writes == b.writes)
    }

    /// Copies contents into `buf` without touching any counter or fault.
    pub fn peek(&self, address: usize, buf: &mut [u8]) {
        let erase = self.model.geometry.erase_size;
        let mut done = 0;
        while done < buf.len() {
            let a = address + done;
            let (sector, within) = (a / erase, a % erase);
            let n = (erase - within).min(buf.len() - done);
            buf[done..done + n].copy_from_slice(&self.sectors[sector].data[within..within + n]);
            done += n;
        }
    }

    /// The first address where `needle` occurs, searching the whole image.
    pub fn find(&self, needle: &[u8]) -> Option<usize> {
        if needle.is_empty() {
            return Some(0);
        }
        self.image().windows(needle.len()).position(|w| w == needle)
    }

    /// Programs since the last erase of the word holding `address`.
    pub fn word_writes(&self, address: usize) -> u8 {
        let g = self.model.geometry;
        self.sectors[address / g.erase_size].writes[(address % g.erase_size) / g.write_size]
    }

    /// Writes the image to its backing file, if any (changes are written
    /// through already; this also flushes the file).
    pub fn flush(&mut self) -> Result<(), SimError> {
        if let Some(b) = &mut self.backing {
            b.file.flush().map_err(|e| io_err(&b.path, e))?;
            b.file.sync_data().map_err(|e| io_err(&b.path, e))?;
        }
        Ok(())
    }

    fn persist(&mut self, address: usize, len: usize) -> Result<(), SimError> {
        if self.backing.is_none() || len == 0 {
            return Ok(());
        }
        let mut bytes = vec![0; len];
        self.peek(address, &mut bytes);
        let b = self.backing.as_mut().expect("checked above");
        b.file
            .seek(SeekFrom::Start(address as u64))
            .and_then(|_| b.file.write_all(&bytes))
            .map_err(|e| io_err(&b.path, e))
    }

    /// Counts a call and applies power state and injected errors to it.
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
        let seen = self.faults.calls_seen[op.index()];
        self.faults.calls_seen[op.index()] += 1;
        let hit = self
            .faults
            .errors
            .iter()
            .find(|e| e.op == op && (seen == e.at_call || (e.persistent && seen > e.at_call)));
        if let Some(e) = hit.copied() {
            self.stats.failed_calls += 1;
            return Err(SimError::Injected(e));
        }
        Ok(())
    }

    fn check(&self, op: OpKind, offset: u32, len: usize, align: usize) -> Result<(), SimError> {
        if !(offset as usize).is_multiple_of(align) || !len.is_multiple_of(align) {
            return Err(SimError::NotAligned { op, offset, len });
        }
        if (offset as usize)
            .checked_add(len)
            .is_none_or(|end| end > self.capacity())
        {
            return Err(SimError::OutOfBounds { op, offset, len });
        }
        Ok(())
    }

    /// Reads `buf.len()` bytes at `offset` (no alignment needed).
    pub fn read(&mut self, offset: u32, buf: &mut [u8]) -> Result<(), SimError> {
        self.check(OpKind::Read, offset, buf.len(), 1)?;
        self.admit(OpKind::Read)?;
        self.peek(offset as usize, buf);
        self.stats.read_bytes += buf.len() as u64;
        self.stats.device_time_us +=
            (buf.len() as u64 * self.model.timings.read_ns_per_byte) as f64 / 1000.0;
        Ok(())
    }

    /// Programs `data` at `offset`: every bit becomes `old AND new`.
    ///
    /// Offset and length must be multiples of the write size. A program that
    /// would exceed any word's write budget is refused whole and counted. If
    /// an armed power cut hits this call, what lands follows its tear mode and
    /// the call returns [`SimError::PowerCut`].
    pub fn program(&mut self, offset: u32, data: &[u8]) -> Result<(), SimError> {
        let g = self.model.geometry;
        self.check(OpKind::Program, offset, data.len(), g.write_size)?;
        self.admit(OpKind::Program)?;
        let start = offset as usize;
        // The write budget is checked for the whole call before anything lands.
        for (i, word) in data.chunks(g.write_size).enumerate() {
            let address = start + i * g.write_size;
            let writes = self.word_writes(address);
            if !self.model.write_rule.permits(writes, word) {
                self.stats.write_budget_violations += 1;
                return Err(SimError::WriteBudget {
                    address: address as u32,
                    writes,
                    rule: self.model.write_rule,
                });
            }
        }
        let cut = self.cut_for_program(data.len());
        // How many bytes land, and whether the words in flight are scrambled.
        let (landed, scramble) = match cut {
            None => (data.len(), None),
            Some(PowerCut {
                at: CutPoint::Byte(n),
                ..
            }) => ((n - self.faults.cut_bytes_seen.min(n)) as usize, None),
            Some(PowerCut {
                tear: Tear::Prefix(k),
                ..
            }) => (k.min(data.len()), None),
            Some(c) => (
                data.len(),
                Some((c.tear, ChaCha8Rng::seed_from_u64(c.seed ^ 0x5eed_0001))),
            ),
        };
        let mut scramble = scramble;
        for (i, word) in data.chunks(g.write_size).enumerate() {
            let word_start = i * g.write_size;
            if word_start >= landed {
                break;
            }
            let address = start + word_start;
            let sector = Arc::make_mut(&mut self.sectors[address / g.erase_size]);
            let within = address % g.erase_size;
            let n = (landed - word_start).min(g.write_size);
            for (old, new) in sector.data[within..within + n].iter_mut().zip(word) {
                *old = match scramble.as_mut() {
                    None => *old & new,
                    // Only some of the intended 1-to-0 transitions land.
                    Some((Tear::Bits, rng)) => *old & !(*old & !new & rng.random::<u8>()),
                    Some((_, rng)) => rng.random::<u8>(),
                };
            }
            let w = &mut sector.writes[within / g.write_size];
            *w = w.saturating_add(1);
        }
        self.stats.programmed_bytes += landed as u64;
        let unit = self.model.timings.program_unit_bytes.max(1);
        if landed > 0 {
            let units = (start + landed).div_ceil(unit) - start / unit;
            self.stats.device_time_us += (units as u64 * self.model.timings.program_unit_us) as f64;
        }
        self.faults.cut_bytes_seen += landed as u64;
        self.persist(start, data.len())?;
        match cut {
            Some(c) => Err(self.power_fails(c)),
            None => Ok(()),
        }
    }

    /// Erases the sectors of `from..to` to 0xFF and resets their write budgets.
    ///
    /// Both ends must be multiples of the erase size. If an armed power cut
    /// hits this call, the sector in flight is left partly erased.
    pub fn erase(&mut self, from: u32, to: u32) -> Result<(), SimError> {
        let g = self.model.geometry;
        if to < from {
            return Err(SimError::OutOfBounds {
                op: OpKind::Erase,
                offset: from,
                len: 0,
            });
        }
        let len = (to - from) as usize;
        self.check(OpKind::Erase, from, len, g.erase_size)?;
        self.admit(OpKind::Erase)?;
        let first = from as usize / g.erase_size;
        let count = len / g.erase_size;
        let cut = self.cut_for_erase();
        // How far the call gets: sectors before `in_flight` are erased whole,
        // the one in flight is torn, later ones are untouched.
        let in_flight = match cut {
            None => count,
            Some(PowerCut {
                at: CutPoint::Byte(_),
                ..
            }) => 0,
            Some(PowerCut {
                tear: Tear::Prefix(k),
                ..
            }) => k.min(len) / g.erase_size,
            Some(c) => {
                ChaCha8Rng::seed_from_u64(c.seed ^ 0x5eed_0002).random_range(0..count.max(1))
            }
        };
        for i in 0..count.min(in_flight + 1) {
            let sector = first + i;
            let s = Arc::make_mut(&mut self.sectors[sector]);
            let touched = match cut {
                _ if i < in_flight => {
                    s.data.fill(0xFF);
                    s.writes.fill(0);
                    true
                }
                None
                | Some(PowerCut {
                    at: CutPoint::Byte(_),
                    ..
                }) => false,
                Some(PowerCut {
                    tear: Tear::Prefix(k),
                    ..
                }) => {
                    let erased = k.min(len) - i * g.erase_size;
                    s.data[..erased].fill(0xFF);
                    s.writes[..erased / g.write_size].fill(0);
                    erased > 0
                }
                Some(c) => {
                    // The erase pulse reached some cells: a random subset of
                    // the 0 bits returns to 1, and the words' program budget
                    // starts again.
                    let mut rng = ChaCha8Rng::seed_from_u64(c.seed ^ 0x5eed_0003 ^ sector as u64);
                    for b in s.data.iter_mut() {
                        *b |= rng.random::<u8>();
                    }
                    s.writes.fill(0);
                    true
                }
            };
            if touched {
                self.stats.erase_counts[sector] += 1;
                self.stats.erases += 1;
                self.stats.erased_bytes += g.erase_size as u64;
                self.stats.device_time_us += self.model.timings.erase_sector_us as f64;
                self.persist(sector * g.erase_size, g.erase_size)?;
            }
        }
        match cut {
            Some(c) => Err(self.power_fails(c)),
            None => Ok(()),
        }
    }

    /// Whether the armed cut hits the program call in flight of `len` bytes.
    fn cut_for_program(&mut self, len: usize) -> Option<PowerCut> {
        let index = self.faults.cut_ops_seen;
        self.faults.cut_ops_seen += 1;
        let cut = self.faults.cut?;
        match cut.at {
            CutPoint::Op(n) if n == index => Some(cut),
            CutPoint::Byte(n) if self.faults.cut_bytes_seen + len as u64 > n => Some(cut),
            _ => None,
        }
    }

    fn cut_for_erase(&mut self) -> Option<PowerCut> {
        let index = self.faults.cut_ops_seen;
        self.faults.cut_ops_seen += 1;
        let cut = self.faults.cut?;
        match cut.at {
            CutPoint::Op(n) if n == index => Some(cut),
            CutPoint::Byte(n) if self.faults.cut_bytes_seen >= n => Some(cut),
            _ => None,
        }
    }

    fn power_fails(&mut self, cut: PowerCut) -> SimError {
        self.faults.cut = None;
        self.powered = false;
        self.stats.power_cuts += 1;
        SimError::PowerCut(cut)
    }
}
