//! The store: the [`Store`] type and its public facade.
//!
//! [`Store`] owns the flash, the ring ([`Log`]) and the RAM session table.
//! Every change is one batch appended at the head; RAM is updated only after
//! the batch commits, so after any failure the RAM state is the state of the
//! last acknowledged write, and a remount reads the same.
//!
//! Mount reads the sector headers, the head sector, the newest checkpoint and
//! the chunk headers written after it; it never reads the whole partition.
//! Garbage collection reclaims the tail sector: a session whose live bytes
//! reach into the tail is relocated first (its live records are copied into a
//! new base at the head), then the tail is released. Sectors are erased only
//! when they are opened again, so wear is spread evenly around the ring.
//!
//! `Store`'s methods are spread over the child modules, each owning one
//! structure or step (all of them `impl Store` blocks over the fields
//! declared here):
//!
//! - `config.rs`: [`Config`], [`MountMode`] and the reserves a configuration
//!   needs;
//! - `report.rs`: what the facade returns ([`Appended`], [`Gate`],
//!   [`SessionInfo`], [`Space`], [`WrittenBytes`], [`MountReport`],
//!   [`History`]);
//! - `mount.rs`: format, mount (the sector header pass, the head walk) and the
//!   scan of the chunks after the checkpoint;
//! - `replay.rs`: what mount does with each committed batch it meets, and the
//!   repairs of damage at rest it can make there;
//! - `checkpoint.rs`: full and delta checkpoints, written and read;
//! - `gc.rs`: room, the reserves, and garbage collection of the tail sector;
//! - `sessions.rs`: the session table, appends, compaction and deletes;
//! - `directory.rs`: the sessions the table does not hold, found in the
//!   checkpoints' directory, and the table as a working set over them;
//! - `history.rs`: history reads, whole or streamed;
//! - `base.rs`: writing a session base (compaction, consolidation,
//!   relocation);
//! - `objects.rs`: stored objects (small whole documents) on flash;
//! - `profiles.rs`: profile documents (feature `profiles`);
//! - `chats.rs`: chat session maps and `/session` commands (feature `chat`);
//! - `memory/`: long-term memory.
//!
//! This module keeps what belongs to no single step: the fields, the
//! accessors, [`Store::check`], and the verified reads the steps share.
//!
//! Power loss: each writing function says under "Power loss" what a cut
//! during it leaves; nothing here writes.

use core::borrow::BorrowMut;

use embedded_storage::nor_flash::NorFlash;
use heapless::Vec;

mod base;
#[cfg(feature = "chat")]
mod chat_list;
#[cfg(feature = "chat")]
mod chats;
mod checkpoint;
mod config;
#[cfg(feature = "sector-table")]
mod dead;
mod directory;
mod dry_run;
mod gc;
mod history;
mod memory;
mod mount;
#[cfg(feature = "sector-table")]
mod moves;
mod objects;
#[cfg(feature = "profiles")]
mod profiles;
mod replay;
mod report;
mod sessions;
mod work;

pub use crate::error::UnknownLabelError;
pub use config::{Config, FlashUnits, MountMode};
pub(crate) use gc::Priority;
pub use history::HistoryStream;
pub use memory::{MemoryConfig, Stored};
pub use objects::MAX_OBJECTS;
pub use report::{
    Appended, Gate, History, Maintenance, MountReport, SessionInfo, Space, WrittenBytes,
};
#[cfg(feature = "sector-table")]
pub use report::{Cleaning, DeadSpace};
pub use work::Work;

use checkpoint::DELETED_MAX;
use memory::MemState;
use objects::ObjectSlot;

use crate::cursor::{start_name, verify_batch, Records};
use crate::error::{fail, Error, Fail};
use crate::log::{Log, DELTA_CHECKPOINT_SLOT};
use crate::session::{Session, MAX_SESSION_ID_BYTES};

/// An agent memory store on a NOR flash partition.
///
/// `MAX_SESSIONS` sizes the session table held in RAM (36 bytes an
/// entry): a working set over the sessions on flash, not a limit on their
/// number (see `store/directory.rs`).
/// `W` is the engine's working RAM ([`Work`]): the store owns one by default
/// (on hosts: `Store::mount` and `Store::format`, with the `by-value`
/// feature); a firmware lends one, usually `&'static mut Work`, and builds
/// the store in place in a static ([`Store::mount_into`],
/// [`Store::format_into`]), so that neither the store nor the work area is
/// ever on the stack.
pub struct Store<F: NorFlash, const MAX_SESSIONS: usize = 64, W: BorrowMut<Work> = Work> {
    log: Log<F>,
    /// The sessions in RAM: a working set over the directory on flash.
    sessions: Vec<Session, MAX_SESSIONS>,
    /// Where the sessions the table does not hold are found.
    dir: directory::Dir,
    /// The session the operation in progress works on: the table never
    /// lets it go (`NO_ADDR`: none).
    pinned: u32,
    config: Config,
    next_uid: u32,
    /// Sector sequence of the sector holding the newest full checkpoint
    /// (the oldest checkpoint a mount may need).
    checkpoint_sector_seq: u32,
    /// The newest full checkpoint, which delta checkpoints build on.
    full_checkpoint: u32,
    /// Delta checkpoints written since it.
    deltas_since_full: u32,
    /// Sessions deleted since the newest full checkpoint.
    deleted_since_full: Vec<u32, DELETED_MAX>,
    /// How many of them the newest checkpoint carries: a delta carries
    /// those after (the deletions since the checkpoint before it).
    deleted_written: u8,
    bytes_since_checkpoint: u32,
    reserve_gc: u32,
    reserve_maintenance: u32,
    mount_report: MountReport,
    /// Set while garbage collection relocates: no nested collection.
    in_gc: bool,
    /// Bytes the caller's writes took since `maintain` last collected: it
    /// collects again only once they fill a sector, the rate appends would
    /// collect at (collection's own copies never earn it another).
    idle_credit: u32,
    /// Ring bytes the last mount found spent by a write that power cut
    /// (an uncommitted batch, a torn chunk, a sealed head's rest), and
    /// the sequence of the head sector then: until the tail passes that
    /// sector, the store uses the cut slack and collection is not held to
    /// the copy limit (`dry_run.rs`, `collectable`).
    cut_waste: u32,
    cut_waste_seq: u32,
    /// Where the newest version of each stored object is.
    objects: Vec<ObjectSlot, MAX_OBJECTS>,
    /// The long-term memory chain.
    mem: MemState,
    #[cfg(feature = "memory")]
    /// Memory records that failed their checksum and were skipped since
    /// the mount (damage at rest).
    mem_damaged: u32,
    /// Mount only: the newest chunk the scan left out for damage since the
    /// last memory record applied (`NO_ADDR`: none).
    scan_damaged: u32,
    /// Sessions garbage collection dropped for damage since the mount.
    sessions_dropped: u32,
    /// What collecting the tail cost since the mount.
    #[cfg(feature = "sector-table")]
    cleaning: report::Cleaning,
    #[cfg(feature = "memory")]
    /// Memory chain links repaired at mount: (record, the record before
    /// it), for records whose own link rotted. Cleared by the next index.
    mem_links: Vec<(u32, u32), MEM_LINKS>,
    /// Labels that memory writes touched since the caller's last
    /// [`memory_stage_begin`](Self::memory_stage_begin).
    #[cfg(feature = "memory")]
    stage: crate::memory::StageNote<STAGE_LABELS>,
    /// Working RAM for the operation in progress (owned, or lent by the
    /// caller: see [`Work`]).
    work: W,
}

#[cfg(feature = "memory")]
/// Most labels a stage note remembers.
pub const STAGE_LABELS: usize = 8;

#[cfg(feature = "memory")]
/// Memory chain links a mount can repair (see `Store::mem_lost_link`).
const MEM_LINKS: usize = 4;

impl<F: NorFlash, const MAX_SESSIONS: usize, W: BorrowMut<Work>> Store<F, MAX_SESSIONS, W> {
    /// Flash bytes written since mount, by what they hold: chunk headers,
    /// padding and skipped sector ends included (not sector headers).
    pub fn written_bytes(&self) -> WrittenBytes {
        use crate::layout::kind::{usage_slot, CHECKPOINT, ERASED_AHEAD};
        use crate::session::{SESSION_BASE, SESSION_BATCH, SESSION_BLOCK, SESSION_DELETE};
        use memory::{MEM_ACCESS, MEM_FORGET, MEM_INDEX, MEM_PUT};
        let w = self.log.written();
        let of = |k: u8| w[usage_slot(k)];
        WrittenBytes {
            // The log's own records: checkpoints and the chunks that say
            // which sectors are erased ahead.
            checkpoints: of(CHECKPOINT) + of(ERASED_AHEAD),
            delta_checkpoints: w[DELTA_CHECKPOINT_SLOT],
            session_batches: of(SESSION_BATCH),
            session_bases: of(SESSION_BASE),
            session_other: of(SESSION_DELETE) + of(SESSION_BLOCK),
            objects: of(objects::OBJECT),
            // Plain puts share the slot of puts (`usage_slot`).
            memory_items: of(MEM_PUT),
            memory_other: of(MEM_FORGET) + of(MEM_ACCESS) + of(MEM_INDEX),
        }
    }

    /// What the last mount did.
    pub fn mount_report(&self) -> MountReport {
        self.mount_report
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Space in the partition.
    pub fn space(&self) -> Space {
        Space {
            sectors: self.log.geo().count,
            used_sectors: self.log.used_sectors(),
            reserve_sectors: self.reserve_for(Priority::History),
            sector_bytes: self.log.geo().sector,
        }
    }

    /// Dead bytes the store has counted in the sectors in use (feature
    /// `sector-table`, stage 3 of format 10; `store/dead.rs`): what the
    /// mount took back from the full checkpoint it went from, and what
    /// died since; never more than is dead.
    #[cfg(feature = "sector-table")]
    pub fn dead_space(&self) -> DeadSpace {
        let geo = self.log.geo();
        let mut d = DeadSpace::default();
        for index in 0..geo.count {
            let dead = self.log.dead_bytes(index);
            d.dead_bytes += u64::from(dead);
            if 2 * dead >= geo.sector && self.log.seq_of_sector(index).is_some() {
                d.half_dead_sectors += 1;
                d.half_dead_bytes += u64::from(dead);
            }
        }
        let tail = self.log.tail_seq();
        let mut met = 0;
        for seq in tail..=self.log.head_seq() {
            if met == DeadSpace::TAIL_SECTORS {
                break;
            }
            if let Some(index) = self.log.sector_of_seq(seq) {
                d.tail_dead_bytes += u64::from(self.log.dead_bytes(index));
                met += 1;
            }
        }
        d
    }

    /// What collecting the tail cost since mount (feature `sector-table`):
    /// the sectors released, what lived in them, and what the relocations
    /// copied and indexed beside it. A simulator sets it against the
    /// cleaning cost their live fraction forces, `1 / (1 - live)`.
    #[cfg(feature = "sector-table")]
    pub fn cleaning(&self) -> report::Cleaning {
        self.cleaning
    }

    /// The flash, for inspection.
    pub fn flash(&self) -> &F {
        self.log.flash()
    }

    /// The flash, mutably (for a simulator's fault injection).
    pub fn flash_mut(&mut self) -> &mut F {
        self.log.flash_mut()
    }

    /// Unmounts and returns the flash. Nothing needs flushing: every
    /// acknowledged write is already on flash.
    pub fn into_flash(self) -> F {
        self.log.into_flash()
    }

    /// The public error of an engine result: what its [`Fail`] says, with
    /// what was parked for it (every public function returns through here).
    #[inline(always)]
    fn surface<T>(&mut self, r: Result<T, Fail>) -> Result<T, Error<F::Error>> {
        r.map_err(|f| self.public_error(f))
    }

    /// The public error of `f` (see [`surface`](Self::surface)): one
    /// function for every result type.
    #[inline(never)]
    fn public_error(&mut self, f: Fail) -> Error<F::Error> {
        self.log.parked().error(f)
    }

    /// Sessions dropped by garbage collection since the mount because damage
    /// at rest left them without a name or without a sound record.
    pub fn damaged_sessions_dropped(&self) -> u32 {
        self.sessions_dropped
    }

    /// Checks the store's structure against the flash: every session's chain
    /// and index, checksums, record counts and sizes, and the ring.
    /// Returns the number of records checked.
    pub fn check(&mut self) -> Result<u32, Error<F::Error>> {
        let r = self.check_inner();
        self.surface(r)
    }

    /// [`check`](Self::check) with the engine's error.
    pub(crate) fn check_inner(&mut self) -> Result<u32, Fail> {
        let geo = self.log.geo();
        let mut records = 0u32;
        // (Tail to head inclusive, by hand: an inclusive range's iterator
        // is a function of its own.)
        let mut seq = self.log.tail_seq();
        while seq <= self.log.head_seq() {
            // (From the tail up to the head; a hole, a sequence whose
            // sector was released out of order, is passed over.)
            if let Some(idx) = self.log.sector_of_seq(seq) {
                if !self.log.header_seq_is(idx, seq)? {
                    return Err(self.log.parked().at(
                        fail!(Corrupted, "a sector in use has a wrong or missing header"),
                        geo.sector_start(idx),
                    ));
                }
            }
            let Some(next) = seq.checked_add(1) else {
                break;
            };
            seq = next;
        }
        // The table's sessions, then the directory's others.
        let mut cold = directory::ColdCursor::new(&self.dir);
        let mut i = 0;
        while self.next_session_word(&mut i, &mut cold)? != 0 {
            let s = cold.cur;
            if s.oldest < self.log.tail_seq() || s.oldest > self.log.head_seq() {
                return Err(self.log.parked().at(
                    fail!(Corrupted, "a session's oldest sector is outside the ring"),
                    s.root,
                ));
            }
            let mut recs = Records::EMPTY;
            recs.start(&mut self.log.io(), &s, None)?;
            if recs.chain().len != s.chain as usize + 1 {
                return Err(self.log.parked().at(
                    fail!(
                        Corrupted,
                        "a session's chain length disagrees with the table"
                    ),
                    s.head,
                ));
            }
            let (mut n, mut size) = (0u32, 0u32);
            while let Some(r) = recs.next(&mut self.log.io())? {
                if r.damaged || recs.degraded() {
                    return Err(self.log.parked().at(
                        fail!(Corrupted, "a session's index or chain is damaged"),
                        s.root,
                    ));
                }
                n += 1;
                size += r.len + 1;
                let sector_seq = self.log.seq_of_sector(geo.sector_of(r.addr));
                if sector_seq.is_none_or(|q| q < s.oldest) {
                    return Err(self.log.parked().at(
                        fail!(
                            Corrupted,
                            "a record body lies outside the session's live sectors"
                        ),
                        r.addr,
                    ));
                }
            }
            if n != u32::from(s.records) || size != s.size {
                return Err(self.log.parked().at(
                    fail!(
                        Corrupted,
                        "a session's record count or size disagrees with the table"
                    ),
                    s.root,
                ));
            }
            for k in 0..recs.chain().len {
                let addr = recs.chain().addrs[k];
                if self.log.verify(addr)?.is_none() {
                    return Err(self.log.parked().at(
                        fail!(Corrupted, "a session record failed its checksum"),
                        addr,
                    ));
                }
            }
            records += n;
        }
        for k in 0..self.objects.len() {
            let o = self.objects[k];
            if self.object_len(o.addr)? != Some(o.len) || self.log.head_seq_of(o.addr) != o.seq {
                return Err(self.log.parked().at(
                    fail!(Corrupted, "a stored document disagrees with the table"),
                    o.addr,
                ));
            }
        }
        Ok(records)
    }
}

impl<F: NorFlash> Log<F> {
    /// Verifies the batch at `addr` (see [`verify_batch`]).
    #[inline(always)]
    fn verify(&mut self, addr: u32) -> Result<Option<u32>, Fail> {
        let n = self.verify_word(addr)?;
        Ok((n != u32::MAX).then_some(n))
    }
    /// [`Log::verify`] as a word, `u32::MAX` for `None` (no batch is that
    /// long): a `Result<u32, _>` comes back in registers.
    #[inline(never)]
    fn verify_word(&mut self, addr: u32) -> Result<u32, Fail> {
        let (mut io, buf) = self.io_buf();
        verify_batch(&mut io, addr, buf)
    }

    /// The name the session's first batch at `addr` carries, corrected
    /// when it can be (see [`start_name`]).
    fn start_name(
        &mut self,
        addr: u32,
        uid: Option<u32>,
        out: &mut [u8; MAX_SESSION_ID_BYTES],
    ) -> Result<Option<(u32, usize)>, Fail> {
        let (mut io, buf) = self.io_buf();
        start_name(&mut io, addr, uid, out, buf)
    }
}

#[cfg(all(test, feature = "sector-table"))]
mod copy_limit_tests;
#[cfg(all(test, feature = "sector-table"))]
mod dead_tests;
#[cfg(all(test, feature = "sector-table"))]
mod moves_tests;
#[cfg(test)]
mod scan_tests;
#[cfg(test)]
mod test_workload;
#[cfg(all(test, feature = "sector-table", feature = "memory"))]
mod tests;
