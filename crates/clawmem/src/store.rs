//! The store: mount, sessions, garbage collection and checkpoints.
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

use core::fmt;

use embedded_storage::nor_flash::NorFlash;

mod memory;
mod work;

use heapless::Vec;
use memory::{MemState, MEM_STATE_ENCODED};
pub use memory::{MemoryConfig, Stored, UnknownLabelError};
pub use work::Work;

use crate::chat::{ChatKey, ChatSessions, SessionCommand, SessionError, SessionReply};
use crate::chdx::{self, BackendFormat, RecordType, CHDX_ENTRY_SIZE, CHDX_HEADER_SIZE};
use crate::cursor::{
    read_base, read_id, start_name, verify_batch, BatchMeta, RecordInfo, Records, RingView,
    VerifiedReader,
};
use crate::error::Error;
use crate::layout::{
    geometry, kind, u16_at, u32_at, ChunkHeader, SectorHeader, CHUNK_HEADER_LEN, CRC, NO_ADDR,
};
use crate::log::{copy_from_parts, Io, Log, Payload, Slices, Slot, STAGE};
use crate::naming::fnv1a32;
use crate::profile::ProfileDoc;
use crate::session::{
    encode_batch_meta, BaseFixed, Record, Session, BASE_FIXED, BATCH_META_MAX,
    BATCH_TURN_COMPLETED, CHAIN_MAX, FLAG_BLOCKED, MAX_RECORDS_PER_APPEND, MAX_SESSION_ID_BYTES,
    SESSION_ENCODED,
};
use crate::turns::{PlanBuilder, SummaryCutFinder, TurnCursor, SESSION_BLOCKED_WARNING};

/// Tunables of a store. [`Config::default`] follows ESP-Claw.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Config {
    /// A session whose ESP-Claw `.log` size (bodies plus one newline each)
    /// exceeds this after a completed turn is compacted; if it is still over,
    /// it is blocked. ESP-Claw: 150 KiB.
    pub session_size_limit_bytes: u32,
    /// Longest session id, at most [`MAX_SESSION_ID_BYTES`].
    pub max_session_id_bytes: usize,
    /// Payload bytes between two checkpoints (at least 24 checkpoints' worth
    /// is used). Mount reads the chunk headers written since the newest
    /// checkpoint, so this bounds mount cost.
    pub checkpoint_interval_bytes: u32,
    /// Largest profile document. ESP-Claw sets none; 8 KiB by default.
    pub profile_max_bytes: usize,
    /// Long-term memory tunables.
    pub memory: MemoryConfig,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            session_size_limit_bytes: crate::turns::SESSION_SIZE_LIMIT as u32,
            max_session_id_bytes: MAX_SESSION_ID_BYTES,
            checkpoint_interval_bytes: 28 * 1024,
            profile_max_bytes: crate::profile::DEFAULT_MAX_BYTES,
            memory: MemoryConfig::default(),
        }
    }
}

/// What to do when mounting finds no store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MountMode {
    /// Refuse with [`Error::NotFormatted`].
    ExistingOnly,
    /// Format a partition that is entirely erased (never a foreign one).
    FormatIfBlank,
}

/// What an append did besides storing the records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Appended {
    /// Turn-aware compaction ran and dropped records.
    pub compacted: bool,
    /// The session is now blocked (still over its limit after compaction).
    pub blocked: bool,
}

/// The request gate's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gate {
    /// The request may go on.
    Pass,
    /// The session is blocked; send this warning to the user, whole.
    Blocked(&'static str),
}

/// Facts about one session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SessionInfo {
    /// Records in the history.
    pub records: u32,
    /// ESP-Claw `.log` size: bodies plus one newline each.
    pub size_bytes: u32,
    /// Whether appends are refused until the session is deleted.
    pub blocked: bool,
}

/// Space in the partition, in sectors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Space {
    /// Sectors in the partition.
    pub sectors: u32,
    /// Sectors from the tail to the head.
    pub used_sectors: u32,
    /// Sectors kept free for garbage collection and maintenance.
    pub reserve_sectors: u32,
    /// Sector size.
    pub sector_bytes: u32,
}

/// Flash bytes written since mount, by what they hold (see
/// [`Store::written_bytes`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct WrittenBytes {
    /// Full checkpoints.
    pub checkpoints: u64,
    /// Delta checkpoints.
    pub delta_checkpoints: u64,
    /// Session batches (appends).
    pub session_batches: u64,
    /// Session bases: compaction, consolidation and relocation.
    pub session_bases: u64,
    /// Session deletes and blocks.
    pub session_other: u64,
    /// Profile documents and chat session maps.
    pub objects: u64,
    /// Long-term memory items (stores, updates, merges, relocation copies).
    pub memory_items: u64,
    /// Long-term memory tombstones, access records and indexes.
    pub memory_other: u64,
}

/// Counters of what mount did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MountReport {
    /// Sector headers read.
    pub sector_headers: u32,
    /// Chunks applied after the checkpoint.
    pub chunks_scanned: u32,
    /// Whether a checkpoint was found (else the whole ring was scanned).
    pub from_checkpoint: bool,
    /// Whether the head sector held damage (a torn write) and was sealed.
    pub sealed_head: bool,
    /// Batches found damaged or uncommitted and ignored.
    pub ignored_batches: u32,
    /// Sectors inside the ring whose header is damaged but whose contents
    /// check out: kept as they are.
    pub damaged_headers: u32,
    /// Sessions whose first batch (the only copy of their name) is damaged
    /// at rest, found again from the name's own CRC or by correcting one
    /// flipped bit; the records of that batch are lost, the rest kept.
    pub recovered_names: u32,
    /// Memory rests on an index damaged at rest, found again through the
    /// chain after it: its entries are kept where the puts they name confirm
    /// them, and the mount compacts memory to write a sound index.
    pub salvaged_memory_index: bool,
}

/// A session history read into a caller buffer: each record is a 6-byte
/// header (type u8, format u8, body length u32 LE) and the body.
pub struct History<'b> {
    buf: &'b [u8],
    records: u32,
    damaged: u32,
}

impl<'b> History<'b> {
    /// Records returned.
    pub fn len(&self) -> usize {
        self.records as usize
    }

    /// Whether there are no records (never true for a returned history).
    pub fn is_empty(&self) -> bool {
        self.records == 0
    }

    /// Records that were damaged on flash and left out.
    pub fn damaged_records(&self) -> u32 {
        self.damaged
    }

    /// Bytes of the buffer used.
    pub fn used_bytes(&self) -> usize {
        self.buf.len()
    }

    /// The records, oldest first.
    pub fn iter(&self) -> impl Iterator<Item = Record<'b>> + 'b {
        let buf = self.buf;
        let mut at = 0usize;
        core::iter::from_fn(move || {
            let h = buf.get(at..at + HIST_HEADER)?;
            let kind = RecordType::try_from(h[0]).ok()?;
            let format = BackendFormat::try_from(h[1]).ok()?;
            let len = u32_at(h, 2) as usize;
            let body = buf.get(at + HIST_HEADER..at + HIST_HEADER + len)?;
            at += HIST_HEADER + len;
            Some(Record { kind, format, body })
        })
    }
}

impl fmt::Debug for History<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("History")
            .field("records", &self.records)
            .field("damaged", &self.damaged)
            .finish()
    }
}

const HIST_HEADER: usize = 6;

/// Checkpoint fixed part: version u8, reserved u8, count u16, next uid u32,
/// tail sequence u32, next batch sequence u32.
const CKPT_FIXED: usize = 16;
const CKPT_VERSION: u8 = 1;
/// Version byte of a delta checkpoint.
const CKPT_DELTA: u8 = 2;
/// A delta checkpoint's part after the fixed one: the previous checkpoint's
/// address u32, deleted count u16, delta number u16.
const CKPT_DELTA_FIXED: usize = 8;

/// How much room a write may use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Priority {
    /// Appends: leave the whole reserve free.
    User,
    /// Deletes, blocks, compaction, checkpoints: may use the maintenance part.
    Maintenance,
    /// Garbage collection itself: may use everything.
    Gc,
}

/// Which records a new base keeps.
#[derive(Clone, Copy)]
enum Keep<'p> {
    All,
    Turns(&'p crate::turns::Plan),
    From(u64),
}

/// Which kept bodies a new base carries (copies) instead of referencing.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Embed {
    /// None: compaction and consolidation reference bodies in place.
    None,
    /// All: relocation of a whole session.
    All,
    /// Bodies starting in sectors up to this sector sequence: relocation of
    /// the part of a session in the sectors being reclaimed.
    UpTo(u32),
}

/// The ring as it was before a write, to tell a body's sector sequence.
#[derive(Clone, Copy)]
struct Ring {
    head: u32,
    head_seq: u32,
    count: u32,
    sector: u32,
}

impl Ring {
    /// The sector sequence of `addr`; 0 (older than any) for an address
    /// outside the ring, which only damage at rest can give.
    fn seq_of(&self, addr: u32) -> u32 {
        let idx = (addr / self.sector) % self.count;
        self.head_seq
            .saturating_sub((self.head + self.count - idx) % self.count)
    }

    fn embeds(&self, e: Embed, r: &RecordInfo) -> bool {
        match e {
            Embed::None => false,
            Embed::All => true,
            Embed::UpTo(seq) => self.seq_of(r.addr) <= seq,
        }
    }
}

#[derive(Clone)]
struct KeepState {
    turns: TurnCursor,
    index: u64,
}

impl KeepState {
    fn new() -> Self {
        KeepState {
            turns: TurnCursor::new(),
            index: 0,
        }
    }

    fn keep(&mut self, mode: Keep<'_>, kind: RecordType) -> bool {
        let turn = self.turns.advance(kind);
        let i = self.index;
        self.index += 1;
        match mode {
            Keep::All => true,
            Keep::Turns(p) => p.keep(turn, kind),
            Keep::From(n) => i >= n,
        }
    }
}

/// An agent memory store on a NOR flash partition.
///
/// `MAX_SESSIONS` bounds the session table held in RAM (32 bytes each).
pub struct Store<F: NorFlash, const MAX_SESSIONS: usize = 64> {
    log: Log<F>,
    sessions: Vec<Session, MAX_SESSIONS>,
    config: Config,
    next_uid: u32,
    /// Sector sequence of the sector holding the newest full checkpoint
    /// (the oldest checkpoint a mount may need).
    checkpoint_sector_seq: u32,
    /// The newest full checkpoint, which delta checkpoints build on.
    full_checkpoint: u32,
    /// Delta checkpoints written since it.
    deltas_since_full: u32,
    /// Sessions deleted since the newest checkpoint.
    deleted_since_full: Vec<u32, DELETED_MAX>,
    bytes_since_checkpoint: u32,
    reserve_gc: u32,
    reserve_maintenance: u32,
    mount_report: MountReport,
    /// Set while garbage collection relocates: no nested collection.
    in_gc: bool,
    /// Where the newest version of each stored object is.
    objects: Vec<ObjectSlot, MAX_OBJECTS>,
    /// The long-term memory chain.
    mem: MemState,
    /// Memory records that failed their checksum and were skipped since
    /// the mount (damage at rest).
    mem_damaged: u32,
    /// Mount only: the newest chunk the scan left out for damage since the
    /// last memory record applied (`NO_ADDR`: none).
    scan_damaged: u32,
    /// Sessions garbage collection dropped for damage since the mount.
    sessions_dropped: u32,
    /// Memory chain links repaired at mount: (record, the record before
    /// it), for records whose own link rotted. Cleared by the next index.
    mem_links: Vec<(u32, u32), MEM_LINKS>,
    /// Labels that memory writes touched since the caller's last
    /// [`memory_stage_begin`](Self::memory_stage_begin).
    stage: crate::memory::StageNote<STAGE_LABELS>,
    /// Working RAM for the operation in progress.
    work: Work,
}

/// Most labels a stage note remembers.
pub const STAGE_LABELS: usize = 8;

/// Memory chain links a mount can repair (see `Store::mem_lost_link`).
const MEM_LINKS: usize = 4;

/// Delta checkpoints between two full ones.
const DELTAS_PER_FULL: u32 = 8;
/// Deletions a delta checkpoint can carry; more make the next one full.
const DELETED_MAX: usize = 48;

/// Most objects (profile documents and chat session maps) a store holds.
pub const MAX_OBJECTS: usize = 24;

/// Object type: a chat's session map (key: FNV-1a of the chat key).
const OBJ_CHAT_MAP: u8 = 1;
/// Object type: a profile document (key: its tag).
const OBJ_PROFILE: u8 = 2;
/// Object payload header: type u8, zero u8, zero u16, key u32.
const OBJ_FIXED: u32 = 8;
/// Bytes of one object slot in a checkpoint.
const OBJ_ENCODED: usize = 20;

/// The newest version of one stored object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct ObjectSlot {
    ty: u8,
    key: u32,
    /// First chunk of its batch.
    addr: u32,
    /// Sector sequence of the sector it starts in.
    seq: u32,
    /// Data length (payload minus the object header).
    len: u32,
}

impl ObjectSlot {
    fn encode(&self, b: &mut [u8; OBJ_ENCODED]) {
        b[0] = self.ty;
        b[1..4].fill(0);
        b[4..8].copy_from_slice(&self.key.to_le_bytes());
        b[8..12].copy_from_slice(&self.addr.to_le_bytes());
        b[12..16].copy_from_slice(&self.seq.to_le_bytes());
        b[16..20].copy_from_slice(&self.len.to_le_bytes());
    }
}

impl<F: NorFlash, const MAX_SESSIONS: usize> Store<F, MAX_SESSIONS> {
    fn check_config(
        geo: &crate::layout::Geometry,
        config: &Config,
    ) -> Result<(u32, u32), Error<F::Error>> {
        if config.max_session_id_bytes == 0 || config.max_session_id_bytes > MAX_SESSION_ID_BYTES {
            return Err(Error::Config("max_session_id_bytes must be 1 to 64"));
        }
        if config.session_size_limit_bytes < 64 {
            return Err(Error::Config(
                "session_size_limit_bytes must be at least 64",
            ));
        }
        let space = geo.sector_payload_space() - CHUNK_HEADER_LEN;
        let limit = config.session_size_limit_bytes;
        // Relocating the largest session: its bodies plus at most 15 index
        // bytes per 16 body bytes, its id, and one chunk header per sector.
        let session_max = limit + limit / 16 * 15 + BASE_FIXED + 64 + 8 + 1024;
        let gc = session_max.div_ceil(space) + 2;
        let ckpt = (CKPT_FIXED + MAX_SESSIONS * SESSION_ENCODED) as u32;
        let maintenance = (limit / 16 * 15 + ckpt + 1024).div_ceil(space) + 1;
        if gc + maintenance + 2 > geo.count {
            return Err(Error::Config(
                "partition too small for the session size limit: needs room to relocate and compact the largest session",
            ));
        }
        Ok((gc, maintenance))
    }

    /// Formats the partition: erases every sector that holds a store (of any
    /// version) and writes an empty store. Everything stored is lost.
    ///
    /// Power loss: a cut leaves either the old store (possibly missing erased
    /// sectors, which mount tolerates) or a blank partition; format again.
    pub fn format(mut flash: F, config: Config) -> Result<Self, Error<F::Error>> {
        let geo = geometry(&flash).map_err(Error::Config)?;
        let (reserve_gc, reserve_maintenance) = Self::check_config(&geo, &config)?;
        let mut log = Log {
            flash,
            geo,
            head: geo.count - 1,
            head_seq: 0,
            head_erase_count: 0,
            write_pos: geo.capacity(),
            tail_seq: 1,
            next_seq: 1,
            checkpoint: NO_ADDR,
            buf: [0; STAGE],
            written: [0; crate::log::USAGE_SLOTS],
            batch_bytes: 0,
        };
        for i in (0..geo.count).rev() {
            let h = log.io().sector_header(i)?;
            if matches!(h, SectorHeader::Valid { .. } | SectorHeader::Newer { .. }) || i == 0 {
                let start = geo.sector_start(i);
                log.flash
                    .erase(start, start + geo.sector)
                    .map_err(Error::Flash)?;
            }
        }
        flash = log.flash;
        let mut log = Log { flash, ..log };
        // Opening sector 0 takes sequence 1 (tail_seq - 1 + 1).
        log.tail_seq = 1;
        log.head_seq = 0;
        log.open_next_sector()?;
        let mut store = Store {
            log,
            sessions: Vec::new(),
            config,
            next_uid: 1,
            checkpoint_sector_seq: 1,
            full_checkpoint: NO_ADDR,
            deltas_since_full: 0,
            deleted_since_full: Vec::new(),
            bytes_since_checkpoint: 0,
            reserve_gc,
            reserve_maintenance,
            mount_report: MountReport::default(),
            in_gc: false,
            objects: Vec::new(),
            mem: MemState::EMPTY,
            mem_damaged: 0,
            scan_damaged: NO_ADDR,
            sessions_dropped: 0,
            mem_links: Vec::new(),
            stage: crate::memory::StageNote::new(),
            work: Work::new(),
        };
        store.write_checkpoint()?;
        Ok(store)
    }

    /// Mounts the store on `flash`.
    ///
    /// Reads every sector header, the head sector, the newest checkpoint and
    /// the chunk headers written after it. A torn write at the head is
    /// ignored and its sector sealed; an image written by a newer format is
    /// refused; a blank or foreign partition is [`Error::NotFormatted`]
    /// unless `mode` allows formatting a blank one.
    ///
    /// Power loss: mount writes nothing unless it formats.
    pub fn mount(flash: F, config: Config, mode: MountMode) -> Result<Self, Error<F::Error>> {
        let geo = geometry(&flash).map_err(Error::Config)?;
        let (reserve_gc, reserve_maintenance) = Self::check_config(&geo, &config)?;
        let mut log = Log {
            flash,
            geo,
            head: 0,
            head_seq: 0,
            head_erase_count: 0,
            write_pos: 0,
            tail_seq: 0,
            next_seq: 1,
            checkpoint: NO_ADDR,
            buf: [0; STAGE],
            written: [0; crate::log::USAGE_SLOTS],
            batch_bytes: 0,
        };
        let mut report = MountReport::default();
        // 1. Sector headers: find the head. A first pass reads 12 bytes of
        // each (magic, version, flags, sequence) and checks only the
        // winner's CRC; if that fails, a second pass checks every header.
        let mut newest: Option<(u32, u32, u32, u32)> = None;
        let mut all_erased = true;
        let mut best: Option<(u32, u32)> = None;
        for i in 0..geo.count {
            report.sector_headers += 1;
            let mut b = [0u8; 12];
            log.io().read(geo.sector_start(i), &mut b)?;
            if b.iter().all(|x| *x == 0xFF) {
                continue;
            }
            all_erased = false;
            if u32_at(&b, 0) != crate::layout::SECTOR_MAGIC_VALUE {
                continue;
            }
            let version = u16_at(&b, 4);
            if version > crate::layout::FORMAT_VERSION {
                if let SectorHeader::Newer { version } = log.io().sector_header(i)? {
                    return Err(Error::UnsupportedVersion {
                        found: version,
                        supported: crate::layout::FORMAT_VERSION,
                    });
                }
                continue;
            }
            let seq = u32_at(&b, 8);
            if version == crate::layout::FORMAT_VERSION && best.is_none_or(|(_, s)| seq > s) {
                best = Some((i, seq));
            }
        }
        if let Some((i, seq)) = best {
            if let SectorHeader::Valid {
                seq: s,
                erase_count,
                checkpoint,
                ..
            } = log.io().sector_header(i)?
            {
                if s == seq {
                    newest = Some((i, seq, erase_count, checkpoint));
                }
            }
        }
        if newest.is_none() && best.is_some() {
            for i in 0..geo.count {
                report.sector_headers += 1;
                if let SectorHeader::Valid {
                    seq,
                    erase_count,
                    checkpoint,
                    ..
                } = log.io().sector_header(i)?
                {
                    if newest.is_none_or(|n| seq > n.1) {
                        newest = Some((i, seq, erase_count, checkpoint));
                    }
                }
            }
        }
        if newest.is_none() && mode == MountMode::FormatIfBlank && all_erased {
            // Formatting is only for a partition that is erased through and
            // through, never for a foreign one.
            let mut io = log.io();
            let mut buf = [0u8; 64];
            for i in 0..geo.count {
                let start = geo.sector_start(i);
                let mut at = start;
                while at < start + geo.sector {
                    io.read(at, &mut buf)?;
                    if buf.iter().any(|x| *x != 0xFF) {
                        return Err(Error::NotFormatted);
                    }
                    at += buf.len() as u32;
                }
            }
        }
        let Some((mut head, mut head_seq, head_erase_count, header_checkpoint)) = newest else {
            if mode == MountMode::FormatIfBlank && all_erased {
                return Self::format(log.flash, config);
            }
            return Err(Error::NotFormatted);
        };
        // The head's own header may have rotted: then the newest valid
        // header is the sector before it. Such a sector holds sound chunks
        // newer than any of that one's; a sector whose opening was cut
        // holds none (its erase, if cut, leaves only older ones). It is
        // taken as the head, sealed, and kept in the ring like any sector
        // with a damaged header.
        let next = geo.next(head);
        if next != head && log.io().sector_header(next)? == SectorHeader::Invalid {
            let before = log.io().chunk_header(geo.first_chunk(head))?;
            let after = log.io().chunk_header(geo.first_chunk(next))?;
            if let (Some(b), Some(a)) = (before, after) {
                // (Equal: the head's first batch goes on in the next sector.)
                if a.seq >= b.seq && log.first_chunk_sound(next)? {
                    head = next;
                    head_seq += 1;
                    report.damaged_headers += 1;
                    report.sealed_head = true;
                }
            }
        }
        log.head = head;
        log.head_seq = head_seq;
        log.head_erase_count = head_erase_count;
        log.tail_seq = head_seq;
        // 2. The head sector: the newest checkpoint in it, and where writing
        // goes on.
        let mut pos = geo.first_chunk(head);
        // Walk the chunk headers. Only the last chunk can be torn (the sector
        // is sealed after any failed write), so only its CRC is checked;
        // damage elsewhere is found, and confined, when a record is read.
        let sector_end = geo.sector_start(head) + geo.sector;
        let mut last: Option<crate::log::ChunkAt> = None;
        let mut checkpoints = [None::<u32>; 2];
        // The last chunk's CRC, once checked: (address, sound).
        let mut last_ok: Option<(u32, bool)> = None;
        loop {
            match log.slot_at(head, pos)? {
                Slot::Chunk(c) => {
                    // Sequence numbers grow by one from chunk to chunk: a gap
                    // may mean the chunk before has a length damaged at rest
                    // and this is not a chunk at all. If the one before fails
                    // its CRC, the walk resumes at the next sound chunk.
                    if let Some(l) = last {
                        if c.header.seq != l.header.seq.wrapping_add(1)
                            && last_ok.is_none_or(|(at, _)| at != l.address)
                        {
                            let ok = log.crc_ok(&l)?;
                            last_ok = Some((l.address, ok));
                            if !ok {
                                match log.resync(head, l.address + geo.write)? {
                                    Some(p) if p != pos => {
                                        pos = p;
                                        continue;
                                    }
                                    _ => {}
                                }
                            }
                        }
                    }
                    log.next_seq = log.next_seq.max(c.header.seq.wrapping_add(1));
                    if c.header.kind == kind::CHECKPOINT && c.header.is_first() {
                        checkpoints = [checkpoints[1], Some(c.address)];
                    }
                    last = Some(c);
                    pos += geo.chunk_size(c.header.len);
                }
                Slot::End => {
                    // The last chunk before the end fails its CRC: a torn
                    // write, or a length damaged at rest that passed over
                    // sound chunks. Look for them before the end; found,
                    // the damaged chunk is left behind and the walk goes on.
                    if let Some(c) = last {
                        let ok = log.crc_ok(&c)?;
                        last_ok = Some((c.address, ok));
                        if !ok {
                            if let Some(p) = log.resync_before(head, c.address + geo.write, pos)? {
                                if p < pos {
                                    pos = p;
                                    continue;
                                }
                            }
                        }
                    }
                    // A torn first piece may have left bits after an erased
                    // header: the rest of that piece must be erased too.
                    let piece_end = ((pos / STAGE as u32 + 1) * STAGE as u32).min(sector_end);
                    let mut io = Io {
                        flash: &mut log.flash,
                        geo: &log.geo,
                    };
                    if pos < sector_end && !io.is_erased(pos, piece_end - pos, &mut log.buf)? {
                        report.sealed_head = true;
                    }
                    break;
                }
                Slot::Damaged => {
                    // Damage at rest followed by sound chunks: go on after it.
                    // Damage at the end is a torn write: seal the sector.
                    let from = last.map_or(pos, |c| c.address) + geo.write;
                    match log.resync(head, from)? {
                        Some(p) if p > pos || last.is_none_or(|c| p > c.address) => {
                            pos = p;
                            continue;
                        }
                        _ => {
                            report.sealed_head = true;
                            break;
                        }
                    }
                }
            }
        }
        let mut valid_end = pos;
        if let Some(c) = last {
            let ok = match last_ok {
                Some((at, ok)) if at == c.address => ok,
                _ => log.crc_ok(&c)?,
            };
            if !ok {
                report.sealed_head = true;
                valid_end = c.address;
                if checkpoints[1] == Some(c.address) {
                    checkpoints = [None, checkpoints[0]];
                }
            }
        }
        let head_checkpoint = checkpoints[1];
        if report.sealed_head {
            pos = sector_end;
        }
        log.write_pos = pos;
        let head_valid_end = valid_end;
        let mut store = Store {
            log,
            sessions: Vec::new(),
            config,
            next_uid: 1,
            checkpoint_sector_seq: head_seq,
            full_checkpoint: NO_ADDR,
            deltas_since_full: DELTAS_PER_FULL,
            deleted_since_full: Vec::new(),
            bytes_since_checkpoint: 0,
            reserve_gc,
            reserve_maintenance,
            mount_report: report,
            in_gc: false,
            objects: Vec::new(),
            mem: MemState::EMPTY,
            mem_damaged: 0,
            scan_damaged: NO_ADDR,
            sessions_dropped: 0,
            mem_links: Vec::new(),
            stage: crate::memory::StageNote::new(),
            work: Work::new(),
        };
        // 3. The newest checkpoint, else a scan of the whole ring.
        let candidates = [head_checkpoint, Some(header_checkpoint)];
        let mut start = None;
        for c in candidates.into_iter().flatten() {
            if c != NO_ADDR && store.load_checkpoint(c)? {
                start = Some(c);
                break;
            }
        }
        let scan_from = match start {
            Some(c) => {
                store.mount_report.from_checkpoint = true;
                store.log.checkpoint = c;
                let full = store.full_checkpoint;
                store.checkpoint_sector_seq =
                    store
                        .log
                        .seq_of_sector(geo.sector_of(full))
                        .ok_or(Error::Corrupted {
                            address: full,
                            what: "the checkpoint lies outside the ring",
                        })?;
                c
            }
            None => {
                // Walk back over consecutive sector sequences to the tail.
                let mut tail_seq = head_seq;
                let mut i = head;
                for _ in 1..geo.count {
                    let p = geo.prev(i);
                    match store.log.io().sector_header(p)? {
                        SectorHeader::Valid { seq, .. } if seq.wrapping_add(1) == tail_seq => {
                            tail_seq = seq;
                            i = p;
                        }
                        _ => break,
                    }
                }
                store.log.tail_seq = tail_seq;
                store.sessions.clear();
                store.objects.clear();
                store.mem = MemState::EMPTY;
                store.next_uid = 1;
                store.deltas_since_full = DELTAS_PER_FULL;
                geo.first_chunk(i)
            }
        };
        // Sectors at the tail end whose header does not carry the sequence
        // the ring expects were being reopened when power failed: free.
        while store.log.tail_seq < store.log.head_seq {
            let idx = store
                .log
                .sector_index_of_seq(store.log.tail_seq)
                .ok_or(Error::LogicBug("tail outside the ring"))?;
            match store.log.io().sector_header(idx)? {
                SectorHeader::Valid { seq, .. } if seq == store.log.tail_seq => break,
                _ => store.log.tail_seq += 1,
            }
        }
        store.scan(scan_from, head_valid_end)?;
        // A sector inside the ring without its header was being wiped (a
        // scrub) when power failed; its contents had been moved: give it
        // its header back.
        let mut seq = store.log.tail_seq;
        while seq < store.log.head_seq {
            let idx = store
                .log
                .sector_index_of_seq(seq)
                .ok_or(Error::LogicBug("ring"))?;
            match store.log.io().sector_header(idx)? {
                SectorHeader::Valid { seq: found, .. } if found == seq => {}
                // A header damaged at rest over sound contents: the sector
                // is kept, its sequence known from its place in the ring,
                // and collected in its turn. (A wipe's erase cut early can
                // look the same; what it held had been moved, nothing
                // points into it, and a scrub run again finds the copies
                // in it: scrub looks at every sector.)
                _ if store.log.first_chunk_sound(idx)? => {
                    store.mount_report.damaged_headers += 1;
                }
                _ => {
                    let start = geo.sector_start(idx);
                    store
                        .log
                        .flash
                        .erase(start, start + geo.sector)
                        .map_err(Error::Flash)?;
                    let erase_count = store.log.head_erase_count;
                    store.log.write_sector_header(idx, seq, erase_count)?;
                }
            }
            seq += 1;
        }
        if store.mount_report.sealed_head || !store.mount_report.from_checkpoint {
            // Record the recovered state, so that the next mount reads the
            // same and never revisits the damage.
            store.write_checkpoint_with(Priority::Gc)?;
        }
        if !store.mem_links.is_empty() || store.mount_report.salvaged_memory_index {
            // Links repaired in RAM are not on flash: once a checkpoint
            // covers the records after them, a later mount would not
            // repair them again. A memory compaction writes an index that
            // needs none of them, nor the damaged index. Without room for
            // it, the repair holds only until then.
            let _ = store.mem_compact_with(None, Priority::Maintenance);
        }
        Ok(store)
    }

    /// Reads a checkpoint: the full checkpoint it builds on, then every
    /// delta after it in order; `false` if any is damaged.
    fn load_checkpoint(&mut self, addr: u32) -> Result<bool, Error<F::Error>> {
        // Walk back to the full checkpoint (bounded: at most DELTAS_PER_FULL
        // deltas follow a full one).
        let mut chain: Vec<u32, { DELTAS_PER_FULL as usize + 1 }> = Vec::new();
        let mut at = addr;
        loop {
            if at >= self.log.geo.capacity() || chain.push(at).is_err() {
                return Ok(false);
            }
            let mut io = self.log.io();
            match io.chunk_header(at)? {
                Some(h) if h.kind == kind::CHECKPOINT && h.is_first() => {}
                _ => return Ok(false),
            }
            let mut fixed = [0u8; CKPT_FIXED + CKPT_DELTA_FIXED];
            io.read_stream(at + CHUNK_HEADER_LEN, &mut fixed)?;
            match fixed[0] {
                CKPT_VERSION => break,
                CKPT_DELTA => at = u32_at(&fixed, CKPT_FIXED),
                _ => return Ok(false),
            }
        }
        for (k, &c) in chain.iter().rev().enumerate() {
            if !self.apply_checkpoint(c, k > 0)? {
                return Ok(false);
            }
        }
        self.full_checkpoint = chain.last().copied().unwrap_or(addr);
        self.deltas_since_full = chain.len() as u32 - 1;
        self.deleted_since_full.clear();
        Ok(true)
    }

    /// Reads one checkpoint into the RAM state: a full one replaces it, a
    /// delta changes it. `false` if it is damaged.
    fn apply_checkpoint(&mut self, addr: u32, delta: bool) -> Result<bool, Error<F::Error>> {
        let geo = self.log.geo;
        let mut io = Io {
            flash: &mut self.log.flash,
            geo: &self.log.geo,
        };
        // One pass: decode while every chunk's CRC is checked; a damaged
        // checkpoint makes the caller start over from another one.
        let Some(mut r) = VerifiedReader::new(&mut io, addr, kind::CHECKPOINT)? else {
            return Ok(false);
        };
        let mut fixed = [0u8; CKPT_FIXED];
        if !r.read(&mut io, &mut fixed)? {
            return Ok(false);
        }
        let count = u16_at(&fixed, 2) as usize;
        let objects = fixed[1] as usize;
        if fixed[0] != if delta { CKPT_DELTA } else { CKPT_VERSION } || objects > MAX_OBJECTS {
            return Ok(false);
        }
        if count > MAX_SESSIONS {
            // The CRC is checked as the reader goes: a count damaged at rest
            // must not read as a store too big for this `Store`.
            return match self.log.verify(addr)? {
                Some(_) => Err(Error::TooManySessions { max: MAX_SESSIONS }),
                None => Ok(false),
            };
        }
        let mut deleted_count = 0;
        if delta {
            let mut d = [0u8; CKPT_DELTA_FIXED];
            if !r.read(&mut io, &mut d)? {
                return Ok(false);
            }
            deleted_count = u16_at(&d, 4) as usize;
            if deleted_count > DELETED_MAX {
                return Ok(false);
            }
        } else {
            self.sessions.clear();
        }
        for _ in 0..count {
            let mut b = [0u8; SESSION_ENCODED];
            if !r.read(&mut io, &mut b)? {
                return Ok(false);
            }
            let Some(s) = Session::decode(&b) else {
                return Ok(false);
            };
            match self.sessions.iter_mut().find(|x| x.uid == s.uid) {
                Some(x) => *x = s,
                None => self
                    .sessions
                    .push(s)
                    .map_err(|_| Error::TooManySessions { max: MAX_SESSIONS })?,
            }
        }
        for _ in 0..deleted_count {
            let mut b = [0u8; 4];
            if !r.read(&mut io, &mut b)? {
                return Ok(false);
            }
            let uid = u32::from_le_bytes(b);
            if let Some(i) = self.sessions.iter().position(|x| x.uid == uid) {
                self.sessions.swap_remove(i);
            }
        }
        let mut slots: Vec<ObjectSlot, MAX_OBJECTS> = Vec::new();
        for _ in 0..objects {
            let mut b = [0u8; OBJ_ENCODED];
            if !r.read(&mut io, &mut b)? {
                return Ok(false);
            }
            let slot = ObjectSlot {
                ty: b[0],
                key: u32_at(&b, 4),
                addr: u32_at(&b, 8),
                seq: u32_at(&b, 12),
                len: u32_at(&b, 16),
            };
            if !matches!(slot.ty, OBJ_CHAT_MAP | OBJ_PROFILE) || b[1..4] != [0, 0, 0] {
                return Ok(false);
            }
            let _ = slots.push(slot);
        }
        let mut m = [0u8; MEM_STATE_ENCODED];
        if !r.read(&mut io, &mut m)? || !r.finish() {
            return Ok(false);
        }
        let Some(mem) = MemState::decode(&m) else {
            return Ok(false);
        };
        self.objects = slots;
        self.mem = mem;
        self.next_uid = u32_at(&fixed, 4);
        let tail_seq = u32_at(&fixed, 8);
        let oldest_possible = self.log.head_seq.saturating_sub(geo.count - 1);
        self.log.tail_seq = tail_seq.max(oldest_possible).min(self.log.head_seq);
        self.log.next_seq = self.log.next_seq.max(u32_at(&fixed, 12));
        Ok(true)
    }

    /// Reads an object's data length from its batch (CRC checked).
    fn object_len(&mut self, addr: u32) -> Result<Option<u32>, Error<F::Error>> {
        Ok(self
            .log
            .verify(addr)?
            .and_then(|total| total.checked_sub(OBJ_FIXED)))
    }

    /// Applies every committed batch from `from` to `head_end` in the head
    /// sector.
    fn scan(&mut self, from: u32, head_end: u32) -> Result<(), Error<F::Error>> {
        let geo = self.log.geo;
        let mut pos = from;
        let mut sector = geo.sector_of(from);
        // A multi-chunk batch being followed: (first chunk, header).
        let mut pending: Option<(u32, ChunkHeader)> = None;
        let skip_seq = match self.log.io().chunk_header(from)? {
            Some(h) if h.kind == kind::CHECKPOINT && self.mount_report.from_checkpoint => {
                Some(h.seq)
            }
            _ => None,
        };
        let mut scanned_bytes = 0u32;
        for _ in 0..=geo.count {
            // The slot after the current chunk, read once for both the
            // "last in its sector" test and the next step.
            let mut lookahead: Option<Slot> = None;
            let mut last_start: Option<u32> = None;
            loop {
                if sector == self.log.head && pos >= head_end {
                    break;
                }
                let slot = match lookahead.take() {
                    Some(s) => s,
                    None => self.log.slot_at(sector, pos)?,
                };
                let c = match slot {
                    Slot::Chunk(c) => c,
                    Slot::End => break,
                    Slot::Damaged => {
                        // Damage at rest: find the next sound chunk after the
                        // last one applied, so that the damage stays confined.
                        let from = last_start.map_or(pos, |a| a) + geo.write;
                        self.note_scan_damage(pending.map_or(pos, |(a, _)| a));
                        match self.log.resync(sector, from)? {
                            Some(p) if p != pos => {
                                self.mount_report.ignored_batches += 1;
                                pos = p;
                                continue;
                            }
                            _ => break,
                        }
                    }
                };
                last_start = Some(pos);
                let next = pos + geo.chunk_size(c.header.len);
                // Batch sequence numbers grow by one from chunk to chunk
                // within a sector: a chunk followed by anything else may
                // have a length damaged at rest, which would pass over the
                // chunks after it.
                let (is_last_in_sector, suspect) = if sector == self.log.head && next >= head_end {
                    // No chunk reaches past the head's end but by a
                    // damaged length.
                    (false, next > head_end)
                } else {
                    let s = self.log.slot_at(sector, next)?;
                    let last = !matches!(s, Slot::Chunk(_));
                    let gap = match &s {
                        Slot::Chunk(n) => n.header.seq != c.header.seq.wrapping_add(1),
                        _ => false,
                    };
                    lookahead = Some(s);
                    (sector != self.log.head && last, gap)
                };
                pos = next;
                // Every chunk seen, the checkpoint's own included, raises the
                // next sequence number: a checkpoint stores the number it was
                // written *before* taking its own, and when it lies before the
                // head sector the head walk never sees it; a batch that then
                // reused its number would be skipped as part of it.
                self.log.next_seq = self.log.next_seq.max(c.header.seq.wrapping_add(1));
                if Some(c.header.seq) == skip_seq {
                    continue;
                }
                scanned_bytes = scanned_bytes.saturating_add(c.header.len);
                self.mount_report.chunks_scanned += 1;
                // Only the last chunk of a sector can be torn (the sector is
                // sealed after any failed write); check it if it ends a batch,
                // and check a suspect one. One that fails is left out, and
                // the walk goes on at the next sound chunk after its start.
                if (is_last_in_sector && c.header.is_last() || suspect) && !self.log.crc_ok(&c)? {
                    self.mount_report.ignored_batches += 1;
                    self.note_scan_damage(pending.map_or(c.address, |(a, _)| a));
                    pending = None;
                    lookahead = None;
                    match self.log.resync(sector, c.address + geo.write)? {
                        Some(p) if sector != self.log.head || p < head_end => pos = p,
                        _ => break,
                    }
                    continue;
                }
                // The same sequence number and kind as the batch being
                // followed: its continuation (even if a rotted flag calls
                // it a first chunk; a new batch has a new number).
                let continues =
                    pending.is_some_and(|(_, h)| h.seq == c.header.seq && h.kind == c.header.kind);
                if c.header.is_first() && !continues {
                    if let Some((a, _)) = pending {
                        self.mount_report.ignored_batches += 1;
                        self.note_scan_damage(a);
                    }
                    pending = Some((c.address, c.header));
                } else if !continues {
                    // A continuation of nothing: a first chunk whose flags
                    // rotted, or the rest of a batch left out.
                    self.note_scan_damage(pending.map_or(c.address, |(a, _)| a));
                    pending = None;
                    continue;
                }
                if c.header.is_last() {
                    if let Some((addr, h)) = pending.take() {
                        if self.apply(addr, &h).is_err() {
                            self.note_scan_damage(addr);
                            self.mount_report.ignored_batches += 1;
                        }
                    }
                }
            }
            if sector == self.log.head {
                break;
            }
            sector = geo.next(sector);
            pos = geo.first_chunk(sector);
        }
        // The next checkpoint is due as if no remount had happened.
        self.bytes_since_checkpoint = scanned_bytes;
        Ok(())
    }

    /// Applies one committed batch found at mount to the RAM state.
    fn apply(&mut self, addr: u32, h: &ChunkHeader) -> Result<(), Error<F::Error>> {
        // The scan reads chunk headers, not payloads. Deletions, blocks,
        // tombstones and access records are small: check their CRC, so
        // that a bit flipped at rest cannot turn a batch into a deletion or
        // an item into a tombstone. (Bases and objects are checked against
        // the session they name and by their readers.)
        let destructive = matches!(
            h.kind,
            kind::SESSION_DELETE | kind::SESSION_BLOCK | kind::MEM_FORGET | kind::MEM_ACCESS
        );
        if destructive && self.log.verify(addr)?.is_none() {
            return Err(Error::Corrupted {
                address: addr,
                what: "a record failed its checksum",
            });
        }
        let geo = self.log.geo;
        let sector_seq = self
            .log
            .seq_of_sector(geo.sector_of(addr))
            .unwrap_or(self.log.head_seq);
        match h.kind {
            kind::SESSION_BATCH => {
                let meta = BatchMeta::read_with(&mut self.log.io(), addr, h)?;
                let uid = meta.fixed.uid;
                let added = meta.bodies_len() + u32::from(meta.fixed.count);
                if added > geo.capacity() {
                    // A record length damaged at rest (the scan does not
                    // read bodies, so their CRCs are not checked here).
                    return Err(Error::Corrupted {
                        address: addr,
                        what: "a batch's record lengths exceed the partition",
                    });
                }
                if meta.id().is_some() {
                    // The session's name comes from here: trust it only if
                    // its CRC checks out (a flipped id byte must not make it
                    // answer to another name). A batch damaged at rest keeps
                    // its session when the name can be recovered; its own
                    // records are lost (its CRC fails when read).
                    let mut id = [0u8; MAX_SESSION_ID_BYTES];
                    let (uid, n, records, size) = match meta.id() {
                        Some(x) if meta.id_ok() => {
                            id[..x.len()].copy_from_slice(x);
                            (uid, x.len(), u16::from(meta.fixed.count), added)
                        }
                        _ => match self.log.start_name(addr, None, &mut id)? {
                            Some((uid, n)) => {
                                self.mount_report.recovered_names += 1;
                                (uid, n, 0, 0)
                            }
                            None => {
                                return Err(Error::Corrupted {
                                    address: addr,
                                    what: "a session's name failed its checksum",
                                })
                            }
                        },
                    };
                    self.next_uid = self.next_uid.max(uid.wrapping_add(1));
                    // Uids are never reused: this only guards a damaged image.
                    if let Some(i) = self.sessions.iter().position(|s| s.uid == uid) {
                        self.sessions.swap_remove(i);
                    }
                    let s = Session {
                        uid,
                        id_hash: fnv1a32(&id[..n]),
                        id_len: n as u8,
                        flags: 0,
                        records,
                        chain: 0,
                        head: addr,
                        root: addr,
                        root_is_base: false,
                        oldest: sector_seq,
                        size,
                        dirty: true,
                    };
                    self.sessions
                        .push(s)
                        .map_err(|_| Error::TooManySessions { max: MAX_SESSIONS })?;
                    return Ok(());
                }
                self.next_uid = self.next_uid.max(uid.wrapping_add(1));
                if let Some(s) = self.sessions.iter_mut().find(|s| s.uid == uid) {
                    // A batch whose back pointer does not lead to the head is
                    // damaged (or follows a damaged one): it still becomes the
                    // head, and a read finds the chain again by scanning the
                    // log and rebuilds the index; ignoring it would lose every
                    // later batch of the session too.
                    s.head = addr;
                    s.records = s.records.saturating_add(u16::from(meta.fixed.count));
                    s.size = s.size.saturating_add(added);
                    s.chain = s.chain.saturating_add(1);
                    s.dirty = true;
                } else if meta.fixed.prev != NO_ADDR && self.log.verify(addr)?.is_some() {
                    // A sound batch of a session no batch named: the scan
                    // passed the session's first batch by, for damage in it
                    // or in a chunk length before it. Follow the back
                    // pointers to it and recover the name there, or the
                    // whole session is lost.
                    let s = self.adopt(addr, &meta, sector_seq)?;
                    self.sessions
                        .push(s)
                        .map_err(|_| Error::TooManySessions { max: MAX_SESSIONS })?;
                }
            }
            kind::SESSION_BASE => {
                let b = read_base(&mut self.log.io(), addr)?;
                let mut id = [0u8; MAX_SESSION_ID_BYTES];
                let n = b.fixed.id_len as usize;
                let at = self
                    .log
                    .io()
                    .stream_advance(addr + CHUNK_HEADER_LEN, BASE_FIXED);
                self.log.io().read_stream(at, &mut id[..n])?;
                self.next_uid = self.next_uid.max(b.fixed.uid.wrapping_add(1));
                // A base is written for a session that exists: its name is
                // the one the table has (the base's copy is not trusted
                // unchecked); a base for an unknown session is damage.
                let Some(known) = self.sessions.iter().find(|x| x.uid == b.fixed.uid) else {
                    return Err(Error::Corrupted {
                        address: addr,
                        what: "a session base for no known session",
                    });
                };
                if known.id_hash != fnv1a32(&id[..n]) || known.id_len as usize != n {
                    return Err(Error::Corrupted {
                        address: addr,
                        what: "a session base names another session",
                    });
                }
                let s = Session {
                    uid: b.fixed.uid,
                    id_hash: known.id_hash,
                    id_len: known.id_len,
                    flags: b.fixed.flags,
                    records: b.fixed.count as u16,
                    chain: 0,
                    head: addr,
                    root: addr,
                    root_is_base: true,
                    oldest: b.fixed.oldest,
                    size: b.fixed.size,
                    dirty: true,
                };
                match self.sessions.iter_mut().find(|x| x.uid == s.uid) {
                    Some(x) => *x = s,
                    None => self
                        .sessions
                        .push(s)
                        .map_err(|_| Error::TooManySessions { max: MAX_SESSIONS })?,
                }
            }
            kind::MEM_PUT | kind::MEM_FORGET | kind::MEM_ACCESS => {
                let mut b = [0u8; 20];
                // A batch split over sectors continues in the next one, so
                // its first chunk may hold fewer than 20 bytes of the
                // payload; the batch is committed (its last chunk is on
                // flash), so the stream is read on into the next sector.
                // Forgets (8 bytes) and short access records read only
                // their own length.
                let n = match h.kind {
                    kind::MEM_PUT => 20,
                    _ => (h.len as usize).min(8),
                };
                self.log
                    .io()
                    .read_stream(addr + CHUNK_HEADER_LEN, &mut b[..n])?;
                if h.kind == kind::MEM_PUT {
                    // The item's id follows prev, origin, root and the
                    // encoding's version and flags bytes.
                    self.mem.next_id = self.mem.next_id.max(u32_at(&b, 14).wrapping_add(1));
                }
                if h.kind == kind::MEM_PUT && u32_at(&b, 0) == memory::UNCHAINED {
                    // A merge or relocation copy: the index after it, if it
                    // landed, points at it.
                    return Ok(());
                }
                let prev = u32_at(&b, 0);
                if prev != self.mem.head && self.mem_lost_link(prev, addr)? {
                    // The chain goes on through a record damaged at rest:
                    // that record is lost (readers skip it), the chain kept.
                    self.mem.chain = self.mem.chain.saturating_add(1);
                    self.mem_damaged = self.mem_damaged.saturating_add(1);
                } else if prev != self.mem.head
                    && prev == self.scan_damaged
                    && self.mem_lost_index(prev, addr)?
                {
                    // A sound record whose link names the chunk the scan
                    // left out for damage since the last memory record:
                    // that chunk was an index (any other memory record
                    // there is handled by `mem_lost_link`). Its entries
                    // are confirmed one by one by the puts they name when
                    // read (`mem_salvage_index`), so a wrong guess loses
                    // items and never returns one. Its stated oldest sector
                    // is not trusted: the tail is assumed, so that memory
                    // gets a sound index before the tail is released.
                    let mut f = [0u8; 16];
                    self.log
                        .io()
                        .read_stream(self.scan_damaged + CHUNK_HEADER_LEN, &mut f)?;
                    self.mem_links.clear();
                    self.mem = MemState {
                        root: self.scan_damaged,
                        head: self.scan_damaged,
                        chain: 0,
                        changes: 0,
                        bytes: 0,
                        oldest: self.log.tail_seq,
                        next_id: self.mem.next_id.max(u32_at(&f, 4)),
                    };
                    self.mem_damaged = self.mem_damaged.saturating_add(1);
                    self.mount_report.salvaged_memory_index = true;
                } else if prev != self.mem.head {
                    return Err(Error::Corrupted {
                        address: addr,
                        what: "a memory record does not follow the memory chain",
                    });
                }
                self.scan_damaged = NO_ADDR;
                self.mem.head = addr;
                self.mem.chain = self.mem.chain.saturating_add(1);
                if h.kind != kind::MEM_ACCESS {
                    self.mem.changes = self.mem.changes.saturating_add(1);
                }
                self.mem.bytes = self.mem.bytes.saturating_add(h.len);
                self.mem.oldest = self.mem.oldest.min(sector_seq);
            }
            kind::MEM_INDEX => {
                let mut b = [0u8; 20];
                self.log.io().read_stream(addr + CHUNK_HEADER_LEN, &mut b)?;
                // An index replaces the whole memory state: it must look
                // like one before it is applied (its link is "none" and its
                // length is what its count and catalog say), so that a
                // flipped kind byte cannot make another record one. A
                // damaged index left out here is found again through the
                // record that links to it.
                let total = crate::cursor::batch_len(&mut self.log.io(), addr, h)?;
                let catalog = match u32_at(&b, 16) {
                    NO_ADDR => 0,
                    n => n,
                };
                let expected = u64::from(memory::INDEX_FIXED)
                    + u64::from(memory::INDEX_ENTRY) * u64::from(u32_at(&b, 8))
                    + u64::from(catalog);
                if u32_at(&b, 0) != NO_ADDR
                    || catalog as usize > memory::CATALOG_MAX
                    || expected != u64::from(total)
                {
                    return Err(Error::Corrupted {
                        address: addr,
                        what: "a memory index that does not hold together",
                    });
                }
                self.scan_damaged = NO_ADDR;
                self.mount_report.salvaged_memory_index = false;
                self.mem_links.clear();
                self.mem = MemState {
                    root: addr,
                    head: addr,
                    chain: 0,
                    changes: 0,
                    bytes: 0,
                    oldest: u32_at(&b, 12).min(sector_seq),
                    next_id: self.mem.next_id.max(u32_at(&b, 4)),
                };
            }
            kind::OBJECT => {
                let mut b = [0u8; OBJ_FIXED as usize];
                self.log.io().read_stream(addr + CHUNK_HEADER_LEN, &mut b)?;
                let slot = ObjectSlot {
                    ty: b[0],
                    key: u32_at(&b, 4),
                    addr,
                    seq: sector_seq,
                    // Checked before it replaces the version before it: a
                    // flipped key must not make it stand for another
                    // document, and a damaged one must not hide a sound one.
                    len: self.object_len(addr)?.ok_or(Error::Corrupted {
                        address: addr,
                        what: "a stored document failed its checksum",
                    })?,
                };
                if !matches!(slot.ty, OBJ_CHAT_MAP | OBJ_PROFILE) {
                    return Err(Error::Corrupted {
                        address: addr,
                        what: "unknown object type",
                    });
                }
                self.upsert_object(slot)?;
            }
            kind::SESSION_DELETE | kind::SESSION_BLOCK => {
                let mut b = [0u8; 4];
                self.log.io().read_stream(addr + CHUNK_HEADER_LEN, &mut b)?;
                let uid = u32::from_le_bytes(b);
                if h.kind == kind::SESSION_DELETE {
                    self.remove_uid(uid);
                } else if let Some(s) = self.sessions.iter_mut().find(|s| s.uid == uid) {
                    s.flags |= FLAG_BLOCKED;
                    s.dirty = true;
                }
            }
            _ => {}
        }
        Ok(())
    }

    /// At mount: whether the memory record at `addr`, whose link is `prev`
    /// and not the chain's head, follows a chain record damaged at rest: a
    /// record at `prev`, between the head and `addr` in log order, that
    /// does not check out but whose own link is the head. (A memory index
    /// links to nothing, so a damaged index never passes; the chain then
    /// stops there as before.)
    /// The session of a sound batch at `addr` (meta `meta`) whose uid the
    /// mount has not met: its earlier batches, back to the first, are found
    /// through the back pointers (each one sound and of the same uid), and
    /// the name is recovered from the first ([`start_name`]).
    fn adopt(
        &mut self,
        addr: u32,
        meta: &BatchMeta,
        sector_seq: u32,
    ) -> Result<Session, Error<F::Error>> {
        let geo = self.log.geo;
        let uid = meta.fixed.uid;
        let lost = Error::Corrupted {
            address: addr,
            what: "a batch of a session whose name is lost",
        };
        let mut s = Session {
            uid,
            id_hash: 0,
            id_len: 0,
            flags: 0,
            records: u16::from(meta.fixed.count),
            chain: 1,
            head: addr,
            root: meta.fixed.prev,
            root_is_base: false,
            oldest: sector_seq,
            size: meta.bodies_len() + u32::from(meta.fixed.count),
            dirty: true,
        };
        let mut id = [0u8; MAX_SESSION_ID_BYTES];
        for _ in 0..CHAIN_MAX {
            let root = s.root;
            if root >= geo.capacity() {
                return Err(lost);
            }
            if let Some(seq) = self.log.seq_of_sector(geo.sector_of(root)) {
                s.oldest = s.oldest.min(seq);
            }
            let sound = self.log.verify(root)?.is_some();
            let m = if sound {
                Some(BatchMeta::read(&mut self.log.io(), root)?)
            } else {
                None
            };
            if let Some((_, n)) = self.log.start_name(root, Some(uid), &mut id)? {
                s.id_hash = fnv1a32(&id[..n]);
                s.id_len = n as u8;
                match m {
                    // A sound first batch the scan skipped: its records count.
                    Some(m) if m.fixed.uid == uid => {
                        s.records = s.records.saturating_add(u16::from(m.fixed.count));
                        s.size = s
                            .size
                            .saturating_add(m.bodies_len() + u32::from(m.fixed.count));
                    }
                    _ => self.mount_report.recovered_names += 1,
                }
                return Ok(s);
            }
            // Not a first batch: a sound batch of the session lets the
            // walk go on past it.
            match m {
                Some(m) if m.fixed.uid == uid && m.id().is_none() && m.fixed.prev != NO_ADDR => {
                    s.records = s.records.saturating_add(u16::from(m.fixed.count));
                    s.size = s
                        .size
                        .saturating_add(m.bodies_len() + u32::from(m.fixed.count));
                    s.chain += 1;
                    s.root = m.fixed.prev;
                }
                _ => return Err(lost),
            }
        }
        Err(lost)
    }

    /// Whether the chunk at `prev`, which the scan left out for damage,
    /// can be the memory index the sound record at `addr` links to: the
    /// record checks out, and the chunk either names itself an index or
    /// links to nothing, as an index does (one of the two is intact when one
    /// of them rotted; a chain record with a flipped kind byte links to the
    /// head, and `mem_lost_link` takes it first).
    fn mem_lost_index(&mut self, prev: u32, addr: u32) -> Result<bool, Error<F::Error>> {
        if prev >= self.log.geo.capacity() || self.log.verify(addr)?.is_none() {
            return Ok(false);
        }
        let mut link = [0u8; 4];
        self.log
            .io()
            .read_stream(prev + CHUNK_HEADER_LEN, &mut link)?;
        let named = self
            .log
            .io()
            .chunk_header(prev)?
            .is_some_and(|h| h.kind == kind::MEM_INDEX && h.is_first());
        Ok(named || u32::from_le_bytes(link) == NO_ADDR)
    }

    fn mem_lost_link(&mut self, prev: u32, addr: u32) -> Result<bool, Error<F::Error>> {
        let head = self.mem.head;
        if prev == NO_ADDR {
            return Ok(false);
        }
        // With no memory at all before it (no index, no record), the lost
        // record was the first one (its link is "none"); were it an index,
        // it could only have summarized nothing.
        let empty = head == NO_ADDR && self.mem.root == NO_ADDR;
        if head == NO_ADDR && !empty {
            return Ok(false);
        }
        let geo = self.log.geo;
        let order = |log: &crate::log::Log<F>, a: u32| {
            if a >= geo.capacity() {
                return None;
            }
            log.seq_of_sector(geo.sector_of(a))
                .map(|seq| (seq, a % geo.sector))
        };
        let (Some(p), Some(y)) = (order(&self.log, prev), order(&self.log, addr)) else {
            return Ok(false);
        };
        let after_head = empty || order(&self.log, head).is_some_and(|h| h < p);
        if !(after_head && p < y) {
            return Ok(false);
        }
        // Only a sound record may carry the chain past a damaged one (a
        // session batch whose kind byte flipped must not pass for one).
        if self.log.verify(addr)?.is_none() {
            return Ok(false);
        }
        if self.log.verify(prev)?.is_some() {
            // A sound record: `addr` is not the one out of place.
            return Ok(false);
        }
        let mut link = [0u8; 4];
        self.log
            .io()
            .read_stream(prev + CHUNK_HEADER_LEN, &mut link)?;
        if u32::from_le_bytes(link) == head {
            return Ok(true);
        }
        // The record's header names a chain record but its payload (its
        // link, say) fails the CRC: it was the head when `addr` was
        // written, so the record before it is the head now. Remember that
        // link (the one on flash is not to be trusted) until the next index.
        let chain_header = self.log.io().chunk_header(prev)?.is_some_and(|h| {
            h.is_first() && matches!(h.kind, kind::MEM_PUT | kind::MEM_FORGET | kind::MEM_ACCESS)
        });
        if chain_header && self.mem_links.push((prev, head)).is_ok() {
            return Ok(true);
        }
        Ok(false)
    }

    /// Remembers where the scan first left a chunk out for damage since the
    /// last memory record (one damaged batch can be met more than once: its
    /// first chunk, then its continuation).
    fn note_scan_damage(&mut self, at: u32) {
        if self.scan_damaged == NO_ADDR {
            self.scan_damaged = at;
        }
    }

    /// Where the session with `uid` is in the table.
    fn index_of(&self, uid: u32) -> Option<usize> {
        self.sessions.iter().position(|s| s.uid == uid)
    }

    fn remove_uid(&mut self, uid: u32) {
        if let Some(i) = self.sessions.iter().position(|s| s.uid == uid) {
            self.sessions.swap_remove(i);
        }
        self.note_deleted(uid);
    }

    /// Remembers a deletion for the next delta checkpoint; too many make the
    /// next checkpoint a full one.
    fn note_deleted(&mut self, uid: u32) {
        if !self.deleted_since_full.contains(&uid) && self.deleted_since_full.push(uid).is_err() {
            self.deltas_since_full = DELTAS_PER_FULL;
        }
    }

    /// Flash bytes written since mount, by what they hold: chunk headers,
    /// padding and skipped sector ends included (not sector headers).
    pub fn written_bytes(&self) -> WrittenBytes {
        let w = &self.log.written;
        WrittenBytes {
            checkpoints: w[0],
            delta_checkpoints: w[7],
            session_batches: w[1],
            session_bases: w[2],
            session_other: w[3],
            objects: w[4],
            memory_items: w[5],
            memory_other: w[6],
        }
    }

    /// The ring, for rescanning the log after damage.
    fn ring_view(&self) -> RingView {
        RingView {
            head: self.log.head,
            head_seq: self.log.head_seq,
            tail_seq: self.log.tail_seq,
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
            sectors: self.log.geo.count,
            used_sectors: self.log.used_sectors(),
            reserve_sectors: self.reserve_gc + self.reserve_maintenance,
            sector_bytes: self.log.geo.sector,
        }
    }

    /// The flash, for inspection.
    pub fn flash(&self) -> &F {
        &self.log.flash
    }

    /// The flash, mutably (for a simulator's fault injection).
    pub fn flash_mut(&mut self) -> &mut F {
        &mut self.log.flash
    }

    /// Unmounts and returns the flash. Nothing needs flushing: every
    /// acknowledged write is already on flash.
    pub fn into_flash(self) -> F {
        self.log.flash
    }

    // ---- session lookup ----------------------------------------------------

    fn check_id(&self, id: &str) -> Result<(), Error<F::Error>> {
        if id.is_empty() {
            return Err(Error::InvalidInput("session id is empty"));
        }
        if id.len() > self.config.max_session_id_bytes {
            return Err(Error::TooLarge {
                what: "session id",
                size: id.len(),
                limit: self.config.max_session_id_bytes,
            });
        }
        Ok(())
    }

    fn find(&mut self, id: &str) -> Result<Option<usize>, Error<F::Error>> {
        let hash = fnv1a32(id.as_bytes());
        for i in 0..self.sessions.len() {
            let s = self.sessions[i];
            if s.id_hash != hash || s.id_len as usize != id.len() {
                continue;
            }
            let mut buf = [0u8; MAX_SESSION_ID_BYTES];
            let n = read_id(&mut self.log.io(), &s, &mut buf)?;
            if &buf[..n] == id.as_bytes() {
                return Ok(Some(i));
            }
            // The hash matched but the bytes did not: a first batch damaged
            // at rest may still give its name back.
            if !s.root_is_base {
                if let Some((_, n)) = self.log.start_name(s.root, Some(s.uid), &mut buf)? {
                    if &buf[..n] == id.as_bytes() {
                        return Ok(Some(i));
                    }
                }
            }
        }
        Ok(None)
    }

    /// The id of `s` into `out`, checked against the table's hash; a first
    /// batch damaged at rest is corrected when it can be. `None`: the name
    /// is lost to damage.
    fn session_id(
        &mut self,
        s: &Session,
        out: &mut [u8; MAX_SESSION_ID_BYTES],
    ) -> Result<Option<usize>, Error<F::Error>> {
        let sound = |id: &[u8]| {
            id.len() == usize::from(s.id_len)
                && fnv1a32(id) == s.id_hash
                && core::str::from_utf8(id).is_ok()
        };
        match read_id(&mut self.log.io(), s, out) {
            Ok(n) if sound(&out[..n]) => return Ok(Some(n)),
            Ok(_) | Err(Error::Corrupted { .. }) => {}
            Err(e) => return Err(e),
        }
        if s.root_is_base {
            return Ok(None);
        }
        Ok(match self.log.start_name(s.root, Some(s.uid), out)? {
            Some((_, n)) if sound(&out[..n]) => Some(n),
            _ => None,
        })
    }

    /// Facts about a session, or `None` if it does not exist.
    pub fn session_info(&mut self, id: &str) -> Result<Option<SessionInfo>, Error<F::Error>> {
        self.check_id(id)?;
        Ok(self.find(id)?.map(|i| {
            let s = &self.sessions[i];
            SessionInfo {
                records: u32::from(s.records),
                size_bytes: s.size,
                blocked: s.blocked(),
            }
        }))
    }

    /// Number of sessions stored.
    pub fn session_count(&self) -> usize {
        self.sessions.len()
    }

    /// Calls `f` with the id of every session. Returns how many sessions
    /// were left out because their name is damaged at rest beyond repair
    /// (they cannot be looked up either).
    pub fn for_each_session(
        &mut self,
        mut f: impl FnMut(&str, SessionInfo),
    ) -> Result<usize, Error<F::Error>> {
        let mut lost = 0;
        for i in 0..self.sessions.len() {
            let s = self.sessions[i];
            let mut buf = [0u8; MAX_SESSION_ID_BYTES];
            let Some(n) = self.session_id(&s, &mut buf)? else {
                lost += 1;
                continue;
            };
            let Ok(id) = core::str::from_utf8(&buf[..n]) else {
                lost += 1;
                continue;
            };
            f(
                id,
                SessionInfo {
                    records: u32::from(s.records),
                    size_bytes: s.size,
                    blocked: s.blocked(),
                },
            );
        }
        Ok(lost)
    }

    /// ESP-Claw's request gate: a request without a session passes; a
    /// blocked session is refused with the warning, whole. A fault in the
    /// memory system never blocks a request.
    pub fn gate(&mut self, session: Option<&str>) -> Gate {
        let Some(id) = session else {
            return Gate::Pass;
        };
        match self.session_info(id) {
            Ok(Some(info)) if info.blocked => Gate::Blocked(SESSION_BLOCKED_WARNING),
            _ => Gate::Pass,
        }
    }

    // ---- writing -----------------------------------------------------------

    pub(crate) fn reserve_for(&self, p: Priority) -> u32 {
        match p {
            Priority::User => self.reserve_gc + self.reserve_maintenance,
            Priority::Maintenance => self.reserve_gc,
            Priority::Gc => 0,
        }
    }

    /// Bytes of live data that garbage collection would have to keep.
    fn live_bytes(&self) -> u64 {
        let objects: u64 = self.objects.iter().map(|o| u64::from(o.len) + 32).sum();
        let sessions: u64 = self
            .sessions
            .iter()
            .map(|s| u64::from(s.size) + 14 * u64::from(s.records) + 96)
            .sum();
        sessions + objects + self.checkpoint_len() as u64
    }

    /// Makes room for a batch of `len` payload bytes, collecting garbage if
    /// needed.
    fn ensure_room(&mut self, len: u32, p: Priority) -> Result<(), Error<F::Error>> {
        let geo = self.log.geo;
        for _ in 0..=2 * geo.count {
            let (_, opens) = self.log.plan(len);
            if self.log.free_sectors() >= opens + self.reserve_for(p) {
                return Ok(());
            }
            let usable =
                u64::from(geo.count - self.reserve_for(p)) * u64::from(geo.sector_payload_space());
            if self.live_bytes() + u64::from(len) > usable || !self.reclaim_tail()? {
                break;
            }
        }
        let free = u64::from(self.log.free_sectors().saturating_sub(self.reserve_for(p)))
            * u64::from(geo.sector_payload_space());
        Err(Error::Full {
            needed_bytes: len,
            available_bytes: free.min(u64::from(u32::MAX)) as u32,
        })
    }

    /// Releases the tail sector, relocating what is still live in it.
    /// `false` if nothing can be released.
    fn reclaim_tail(&mut self) -> Result<bool, Error<F::Error>> {
        // Never from inside a collection or a maintenance write: releasing
        // the tail would relocate the same tail again (the sector is only
        // released once its contents are out), without end. What a
        // collection writes comes from the reserve kept for it.
        if self.log.used_sectors() <= 1 || self.in_gc {
            return Ok(false);
        }
        let tail_seq = self.log.tail_seq;
        self.in_gc = true;
        let result = self.relocate_tail(tail_seq);
        self.in_gc = false;
        if !result? {
            return Ok(false);
        }
        if self.checkpoint_sector_seq <= tail_seq {
            return Err(Error::LogicBug("checkpoint still in the reclaimed sector"));
        }
        self.log.tail_seq += 1;
        Ok(true)
    }

    /// Room at the head, in payload bytes, without reclaiming.
    fn room_bytes(&self) -> u64 {
        let geo = self.log.geo;
        let space = u64::from(geo.sector_payload_space() - CHUNK_HEADER_LEN);
        let head_left = geo.sector_start(self.log.head) + geo.sector - self.log.write_pos;
        u64::from(self.log.free_sectors()) * space
            + u64::from(head_left.saturating_sub(CHUNK_HEADER_LEN))
    }

    /// Moves everything live out of the tail sector. A session that fits in
    /// the room left is relocated whole (its bodies then sit together, and it
    /// will not need moving again for a whole turn of the ring); otherwise
    /// only its bodies in the tail are copied and the rest referenced.
    /// `false` if there is not even room for that.
    pub(crate) fn relocate_tail(&mut self, tail_seq: u32) -> Result<bool, Error<F::Error>> {
        let space = u64::from(self.log.geo.sector_payload_space());
        if self.checkpoint_sector_seq <= tail_seq {
            if u64::from(self.checkpoint_len()) + space > self.room_bytes() {
                return Ok(false);
            }
            self.write_full_checkpoint(Priority::Gc)?;
        }
        // Objects in the tail are copied whole.
        let mut k = 0;
        while k < self.objects.len() {
            let o = self.objects[k];
            if o.seq <= tail_seq {
                let Some(len) = self.object_len(o.addr)? else {
                    // Damaged at rest: nothing sound to keep.
                    self.objects.swap_remove(k);
                    continue;
                };
                if u64::from(len) + space > self.room_bytes() {
                    return Ok(false);
                }
                let mut payload = FlashCopy {
                    from: o.addr + CHUNK_HEADER_LEN,
                    len: len + OBJ_FIXED,
                };
                let (addr, _) = self.log.write_batch(kind::OBJECT, &mut payload)?;
                self.objects[k].addr = addr;
                self.objects[k].seq = self.log.head_seq_of(addr);
                self.objects[k].len = len;
            }
            k += 1;
        }
        // Long-term memory reaching into the tail: a new index, with the
        // items in the next sectors to be released copied.
        if self.mem.oldest <= tail_seq {
            let mut k = self.log.free_sectors() / 2;
            loop {
                if self.mem_compact_with(Some(tail_seq + k), Priority::Gc)? {
                    break;
                }
                if k == 0 {
                    return Ok(false);
                }
                k /= 2;
            }
        }
        // What each session in the tail needs at least: its bodies in the
        // tail (at most a sector's worth) and a new index.
        let minimal = |s: &Session| {
            u64::from(s.size).min(space) + 14 * u64::from(s.records) + 2 * space / 16 + 128
        };
        let mut i = 0;
        while i < self.sessions.len() {
            let s = self.sessions[i];
            if s.oldest > tail_seq {
                i += 1;
                continue;
            }
            let others: u64 = self.sessions[i + 1..]
                .iter()
                .filter(|o| o.oldest <= tail_seq)
                .map(minimal)
                .sum();
            let budget = self.room_bytes().saturating_sub(others);
            // Copy as much of the session as the room allows: everything,
            // else its bodies in the next `k` sectors too, so that it need
            // not be re-indexed at each of them.
            let mut moved = self.rewrite_base_gc(i, Embed::All, budget);
            let mut k = self.log.free_sectors();
            while matches!(moved, Ok(false)) {
                moved = self.rewrite_base_gc(i, Embed::UpTo(tail_seq + k), budget);
                if k == 0 {
                    break;
                }
                k /= 2;
            }
            match moved {
                Ok(true) => i += 1,
                Ok(false) => return Ok(false),
                // Damage at rest left nothing to relocate under a name (the
                // name is lost, or no record checks out): the session can
                // no longer be found or read, and it goes with the tail
                // rather than stop every later write.
                Err(Error::Corrupted { .. }) => {
                    self.remove_uid(s.uid);
                    self.sessions_dropped = self.sessions_dropped.saturating_add(1);
                }
                Err(e) => return Err(e),
            }
        }
        Ok(true)
    }

    /// Sessions dropped by garbage collection since the mount because damage
    /// at rest left them without a name or without a sound record.
    pub fn damaged_sessions_dropped(&self) -> u32 {
        self.sessions_dropped
    }

    /// Writes a batch with room made first; returns its address.
    fn write<P: Payload<F>>(
        &mut self,
        k: u8,
        payload: &mut P,
        p: Priority,
    ) -> Result<u32, Error<F::Error>> {
        self.prepare_write(payload.len(), p)?;
        self.write_prepared(k, payload)
    }

    /// Writes a due checkpoint and makes room for `len` payload bytes. After
    /// this, nothing moves until the write: a record that points at others
    /// (a batch at its session's head) must be built after this call.
    fn prepare_write(&mut self, len: u32, p: Priority) -> Result<(), Error<F::Error>> {
        if p != Priority::Gc
            && !self.in_gc
            && self.bytes_since_checkpoint >= self.checkpoint_interval()
        {
            self.write_checkpoint_with(Priority::Maintenance)?;
        }
        self.ensure_room(len, p)
    }

    /// Writes a batch for which [`prepare_write`](Self::prepare_write) made
    /// room.
    fn write_prepared<P: Payload<F>>(
        &mut self,
        k: u8,
        payload: &mut P,
    ) -> Result<u32, Error<F::Error>> {
        let len = payload.len();
        let (addr, _) = self.log.write_batch(k, payload)?;
        self.bytes_since_checkpoint = self.bytes_since_checkpoint.saturating_add(len);
        Ok(addr)
    }

    fn checkpoint_len(&self) -> u32 {
        (CKPT_FIXED
            + self.sessions.len() * SESSION_ENCODED
            + self.objects.len() * OBJ_ENCODED
            + MEM_STATE_ENCODED) as u32
    }

    fn checkpoint_interval(&self) -> u32 {
        self.config
            .checkpoint_interval_bytes
            .max(16 * self.delta_len())
    }

    /// Length of the delta checkpoint that would be written now.
    fn delta_len(&self) -> u32 {
        let dirty = self.sessions.iter().filter(|s| s.dirty).count();
        (CKPT_FIXED
            + CKPT_DELTA_FIXED
            + dirty * SESSION_ENCODED
            + self.deleted_since_full.len() * 4
            + self.objects.len() * OBJ_ENCODED
            + MEM_STATE_ENCODED) as u32
    }

    fn write_checkpoint(&mut self) -> Result<(), Error<F::Error>> {
        self.write_checkpoint_with(Priority::Maintenance)
    }

    /// Writes the RAM state as a checkpoint: a delta (the sessions changed
    /// and deleted since the previous checkpoint, all objects and the memory
    /// state) when that is smaller, else a full one; at most
    /// [`DELTAS_PER_FULL`] deltas follow a full checkpoint.
    ///
    /// Power loss: until the checkpoint commits, the previous one (which is
    /// never reclaimed before a newer one exists) stays in force.
    fn write_checkpoint_with(&mut self, p: Priority) -> Result<(), Error<F::Error>> {
        let delta = self.full_checkpoint != NO_ADDR
            && self.deltas_since_full < DELTAS_PER_FULL
            && self.delta_len() < self.checkpoint_len();
        self.write_checkpoint_kind(p, delta)
    }

    /// Writes a full checkpoint (needed before its predecessor's sector is
    /// released).
    fn write_full_checkpoint(&mut self, p: Priority) -> Result<(), Error<F::Error>> {
        self.write_checkpoint_kind(p, false)
    }

    fn write_checkpoint_kind(&mut self, p: Priority, delta: bool) -> Result<(), Error<F::Error>> {
        let len = if delta {
            self.delta_len()
        } else {
            self.checkpoint_len()
        };
        self.ensure_room(len, p)?;
        let mut fixed = [0u8; CKPT_FIXED + CKPT_DELTA_FIXED];
        fixed[0] = if delta { CKPT_DELTA } else { CKPT_VERSION };
        fixed[1] = self.objects.len() as u8;
        let count = if delta {
            self.sessions.iter().filter(|s| s.dirty).count()
        } else {
            self.sessions.len()
        };
        fixed[2..4].copy_from_slice(&(count as u16).to_le_bytes());
        fixed[4..8].copy_from_slice(&self.next_uid.to_le_bytes());
        fixed[8..12].copy_from_slice(&self.log.tail_seq.to_le_bytes());
        fixed[12..16].copy_from_slice(&self.log.next_seq.to_le_bytes());
        if delta {
            fixed[16..20].copy_from_slice(&self.log.checkpoint.to_le_bytes());
            fixed[20..22].copy_from_slice(&(self.deleted_since_full.len() as u16).to_le_bytes());
            fixed[22..24].copy_from_slice(&((self.deltas_since_full + 1) as u16).to_le_bytes());
        }
        let mut mem = [0u8; MEM_STATE_ENCODED];
        self.mem.encode(&mut mem);
        let mut payload = CheckpointPayload {
            fixed,
            fixed_len: if delta {
                CKPT_FIXED + CKPT_DELTA_FIXED
            } else {
                CKPT_FIXED
            },
            sessions: &self.sessions,
            only_dirty: delta,
            count,
            deleted: if delta { &self.deleted_since_full } else { &[] },
            objects: &self.objects,
            mem,
        };
        let before = self.log.written[0];
        let (addr, _) = self.log.write_batch(kind::CHECKPOINT, &mut payload)?;
        if delta {
            // Deltas are accounted apart from full checkpoints.
            let n = self.log.written[0] - before;
            self.log.written[0] = before;
            self.log.written[7] += n;
        }
        self.log.checkpoint = addr;
        if delta {
            self.deltas_since_full += 1;
        } else {
            self.full_checkpoint = addr;
            self.checkpoint_sector_seq = self
                .log
                .seq_of_sector(self.log.geo.sector_of(addr))
                .ok_or(Error::LogicBug("checkpoint written outside the ring"))?;
            self.deltas_since_full = 0;
        }
        // The next delta carries what changes after this checkpoint.
        self.deleted_since_full.clear();
        for s in self.sessions.iter_mut() {
            s.dirty = false;
        }
        self.bytes_since_checkpoint = 0;
        Ok(())
    }

    /// Appends records to a session as one atomic batch, creating the
    /// session on first use. With `turn_completed`, a session left over its
    /// size limit is compacted (ESP-Claw's turn-aware rules), or blocked if
    /// compaction cannot bring it under.
    ///
    /// Power loss: the batch is all-or-nothing; once this returns `Ok` it
    /// survives any cut. A cut during the compaction that follows leaves the
    /// uncompacted history, which the next completed turn compacts.
    pub fn append(
        &mut self,
        session: &str,
        records: &[Record<'_>],
        turn_completed: bool,
    ) -> Result<Appended, Error<F::Error>> {
        self.check_id(session)?;
        if records.is_empty() {
            return Err(Error::InvalidInput("an append needs at least one record"));
        }
        if records.len() > MAX_RECORDS_PER_APPEND {
            return Err(Error::TooLarge {
                what: "records in one append",
                size: records.len(),
                limit: MAX_RECORDS_PER_APPEND,
            });
        }
        let mut total: u64 = 0;
        for r in records {
            if r.body.is_empty() {
                return Err(Error::InvalidInput("a record body is empty"));
            }
            total += r.body.len() as u64 + 1;
        }
        let limit = self.config.session_size_limit_bytes as usize;
        if total > limit as u64 {
            return Err(Error::TooLarge {
                what: "one append",
                size: total as usize,
                limit,
            });
        }
        let found = self.find(session)?;
        if let Some(i) = found {
            if self.sessions[i].blocked() {
                return Err(Error::Blocked);
            }
            if self.sessions[i].chain as usize >= CHAIN_MAX {
                self.rewrite_base(i, Keep::All, None, Embed::None, Priority::User)?;
            }
        } else if self.sessions.is_full() {
            return Err(Error::TooManySessions { max: MAX_SESSIONS });
        }
        // Room first: collecting garbage may relocate this session, which
        // moves its head.
        let id_len = if found.is_none() {
            1 + session.len()
        } else {
            0
        };
        let meta_max = crate::session::BATCH_FIXED as usize + id_len + records.len() * 6;
        let bodies: usize = records.iter().map(|r| r.body.len()).sum();
        let found_uid = found.map(|i| self.sessions[i].uid);
        self.prepare_write((meta_max + bodies) as u32, Priority::User)?;
        // Garbage collection may have dropped a session damaged at rest,
        // which moves others in the table.
        let found = match found_uid {
            Some(uid) => Some(self.index_of(uid).ok_or(Error::NotFound)?),
            None => None,
        };
        let (uid, prev) = match found {
            Some(i) => (self.sessions[i].uid, self.sessions[i].head),
            None => (self.next_uid, NO_ADDR),
        };
        let mut meta = [0u8; BATCH_META_MAX];
        let flags = if turn_completed {
            BATCH_TURN_COMPLETED
        } else {
            0
        };
        let id = found.is_none().then_some(session.as_bytes());
        let meta_len = encode_batch_meta(&mut meta, uid, prev, flags, id, records);
        let mut payload = AppendPayload {
            meta: &meta[..meta_len],
            records,
        };
        if found.is_none() {
            self.next_uid = self.next_uid.wrapping_add(1);
        }
        let addr = self.write_prepared(kind::SESSION_BATCH, &mut payload)?;
        let sector_seq = self.log.head_seq_of(addr);
        let i = match found {
            Some(i) => {
                let s = &mut self.sessions[i];
                s.head = addr;
                s.chain += 1;
                s.records = s.records.saturating_add(records.len() as u16);
                s.size = s.size.saturating_add(total as u32);
                s.dirty = true;
                i
            }
            None => {
                let s = Session {
                    uid,
                    id_hash: fnv1a32(session.as_bytes()),
                    id_len: session.len() as u8,
                    flags: 0,
                    records: records.len() as u16,
                    chain: 0,
                    head: addr,
                    root: addr,
                    root_is_base: false,
                    oldest: sector_seq,
                    size: total as u32,
                    dirty: true,
                };
                self.sessions
                    .push(s)
                    .map_err(|_| Error::LogicBug("session table full after check"))?;
                self.sessions.len() - 1
            }
        };
        let mut out = Appended::default();
        if turn_completed && self.sessions[i].size > self.config.session_size_limit_bytes {
            out = self.compact_turns(i)?;
        }
        Ok(out)
    }

    /// ESP-Claw's turn-aware compaction of session `i`.
    fn compact_turns(&mut self, i: usize) -> Result<Appended, Error<F::Error>> {
        let s = self.sessions[i];
        let ring = self.ring_view();
        let mut recs = Records::new(&mut self.log.io(), &s, Some(ring))?;
        let mut plan = PlanBuilder::<{ crate::turns::COMPACT_TOOL_TURNS }>::new();
        while let Some(r) = recs.next(&mut self.log.io())? {
            if !r.damaged {
                plan.push(r.kind, u64::from(r.len));
            }
        }
        let plan = plan.finish();
        if plan.blocked(u64::from(self.config.session_size_limit_bytes)) {
            let mut payload = Slices([&s.uid.to_le_bytes()[..]]);
            self.write(kind::SESSION_BLOCK, &mut payload, Priority::Maintenance)?;
            let i = self.index_of(s.uid).ok_or(Error::NotFound)?;
            self.sessions[i].flags |= FLAG_BLOCKED;
            self.sessions[i].dirty = true;
            return Ok(Appended {
                compacted: false,
                blocked: true,
            });
        }
        if plan.kept_record_count() == plan.record_count() {
            return Ok(Appended::default());
        }
        self.rewrite_base(
            i,
            Keep::Turns(&plan),
            None,
            Embed::None,
            Priority::Maintenance,
        )?;
        Ok(Appended {
            compacted: true,
            blocked: false,
        })
    }

    /// Ameba-Claw's summary compaction: replaces every turn before the last
    /// `keep_turns` turns by `summary`. Returns `false` (and writes nothing)
    /// if fewer than two turns would be replaced.
    ///
    /// Power loss: atomic; before the new index commits the old history
    /// stands, after it the summarized one.
    pub fn compact_with_summary(
        &mut self,
        session: &str,
        keep_turns: u64,
        summary: Record<'_>,
    ) -> Result<bool, Error<F::Error>> {
        self.check_id(session)?;
        if summary.body.is_empty() {
            return Err(Error::InvalidInput("the summary is empty"));
        }
        let i = self.find(session)?.ok_or(Error::NotFound)?;
        let s = self.sessions[i];
        let ring = self.ring_view();
        let mut recs = Records::new(&mut self.log.io(), &s, Some(ring))?;
        let mut turns = TurnCursor::new();
        while let Some(r) = recs.next(&mut self.log.io())? {
            if !r.damaged {
                turns.advance(r.kind);
            }
        }
        let mut finder = SummaryCutFinder::new(turns.turns(), keep_turns);
        recs.rewind();
        while let Some(r) = recs.next(&mut self.log.io())? {
            if !r.damaged {
                finder.push(r.kind, u64::from(r.len));
            }
        }
        let Some(cut) = finder.finish() else {
            return Ok(false);
        };
        if cut.replaced_turns < crate::turns::SUMMARY_MIN_REPLACED_TURNS {
            return Ok(false);
        }
        self.rewrite_base(
            i,
            Keep::From(cut.record_index),
            Some(summary),
            Embed::None,
            Priority::Maintenance,
        )?;
        Ok(true)
    }

    /// Writes a new base for session `i` holding the records `keep` selects,
    /// after `summary` if given. Bodies that `embed` selects are copied into
    /// the base (relocation); the others are referenced where they are.
    fn rewrite_base(
        &mut self,
        i: usize,
        keep: Keep<'_>,
        summary: Option<Record<'_>>,
        embed: Embed,
        p: Priority,
    ) -> Result<bool, Error<F::Error>> {
        self.rewrite_base_within(i, keep, summary, embed, p, u64::MAX)
    }

    /// [`rewrite_base`](Self::rewrite_base) during garbage collection:
    /// `false`, with nothing written, if the base would exceed `budget`
    /// payload bytes or the free sectors.
    fn rewrite_base_gc(
        &mut self,
        i: usize,
        embed: Embed,
        budget: u64,
    ) -> Result<bool, Error<F::Error>> {
        self.rewrite_base_within(i, Keep::All, None, embed, Priority::Gc, budget)
    }

    fn rewrite_base_within(
        &mut self,
        i: usize,
        keep: Keep<'_>,
        summary: Option<Record<'_>>,
        embed: Embed,
        p: Priority,
        budget: u64,
    ) -> Result<bool, Error<F::Error>> {
        if self.in_gc {
            return self.rewrite_base_now(i, keep, summary, embed, budget);
        }
        // Make room first, for the largest base this can be: collecting
        // garbage may relocate this very session, so nothing is read before.
        let s = self.sessions[i];
        let bodies = match embed {
            Embed::None => 0,
            _ => s.size,
        };
        let estimate = BASE_FIXED
            + MAX_SESSION_ID_BYTES as u32
            + CHDX_HEADER_SIZE as u32
            + 14 * (u32::from(s.records) + 1)
            + bodies
            + summary.map_or(0, |r| r.body.len() as u32);
        self.ensure_room(estimate, p)?;
        // Garbage collection may have dropped a session damaged at rest,
        // which moves others in the table.
        let i = self.index_of(s.uid).ok_or(Error::NotFound)?;
        self.in_gc = true;
        let result = self.rewrite_base_now(i, keep, summary, embed, budget);
        self.in_gc = false;
        match result {
            Ok(false) => Err(Error::Full {
                needed_bytes: estimate,
                available_bytes: 0,
            }),
            r => r,
        }
    }

    /// [`rewrite_base_within`](Self::rewrite_base_within) with no garbage
    /// collection: `false` if the room or `budget` is short.
    fn rewrite_base_now(
        &mut self,
        i: usize,
        keep: Keep<'_>,
        summary: Option<Record<'_>>,
        embed: Embed,
        budget: u64,
    ) -> Result<bool, Error<F::Error>> {
        let ring = Ring {
            head: self.log.head,
            head_seq: self.log.head_seq,
            count: self.log.geo.count,
            sector: self.log.geo.sector,
        };
        let s = self.sessions[i];
        let ring_view = self.ring_view();
        let mut recs = Records::new(&mut self.log.io(), &s, Some(ring_view))?;
        // Check the batches whose bodies will be referenced or copied; a
        // damaged one is left out (its records are lost, the rest kept).
        for k in 0..recs.chain().len {
            let addr = recs.chain().addrs[k];
            if k == 0 && s.root_is_base {
                continue;
            }
            if self.log.verify(addr)?.is_none() {
                recs.skip_segment(k);
            }
        }
        // Pre-pass: what is kept.
        let mut state = KeepState::new();
        let mut count: u32 = u32::from(summary.is_some());
        let mut size: u32 = summary.map_or(0, |r| r.body.len() as u32 + 1);
        let mut embedded: u32 = summary.map_or(0, |r| r.body.len() as u32);
        // The oldest sector a referenced body starts in (u32::MAX: none).
        let mut oldest_ref = u32::MAX;
        while let Some(r) = recs.next(&mut self.log.io())? {
            if r.damaged {
                continue;
            }
            if state.keep(keep, r.kind) {
                count += 1;
                size += r.len + 1;
                if ring.embeds(embed, &r) {
                    embedded += r.len;
                } else {
                    oldest_ref = oldest_ref.min(ring.seq_of(r.addr));
                }
            }
        }
        if count == 0 {
            if summary.is_none() && matches!(keep, Keep::All) {
                return Err(Error::Corrupted {
                    address: s.root,
                    what: "no record of the session checks out",
                });
            }
            return Err(Error::LogicBug("a base with no records"));
        }
        recs.rewind();
        let mut id = [0u8; MAX_SESSION_ID_BYTES];
        if self.session_id(&s, &mut id)?.is_none() {
            return Err(Error::Corrupted {
                address: s.root,
                what: "a session's name is damaged beyond repair",
            });
        }
        let id_len = s.id_len as u32;
        let entries_at = BASE_FIXED + id_len + CHDX_HEADER_SIZE as u32;
        let crcs_at = entries_at + count * CHDX_ENTRY_SIZE as u32;
        let bodies_at = crcs_at + count * 4;
        let total = bodies_at + embedded;
        let (_, opens) = self.log.plan(total);
        if opens > self.log.free_sectors() || u64::from(total) > budget {
            return Ok(false);
        }
        let (start, opens) = self.log.plan(total);
        let payload_start = start + CHUNK_HEADER_LEN;
        // The base starts in the head sector or, if that is full, the next.
        let new_sector_seq = if self.log.geo.sector_of(start) == self.log.head {
            self.log.head_seq
        } else {
            self.log.head_seq + 1
        };
        let _ = opens;
        // A relocating base holds every live body itself; otherwise the
        // referenced bodies stay where they are.
        let oldest = oldest_ref.min(new_sector_seq);
        let mut fixed = [0u8; BASE_FIXED as usize];
        BaseFixed {
            uid: s.uid,
            flags: s.flags,
            id_len: s.id_len,
            size,
            count,
            oldest,
        }
        .encode(&mut fixed);
        let sweep = Sweep::new(recs);
        let mut payload = BasePayload {
            fixed,
            id,
            id_len,
            summary,
            keep,
            embed,
            ring,
            payload_start,
            entries_at,
            crcs_at,
            bodies_at,
            total,
            last_end: 0,
            entries: sweep.clone(),
            crcs: sweep.clone(),
            bodies: sweep,
        };
        let (addr, _) = self.log.write_batch(kind::SESSION_BASE, &mut payload)?;
        if addr != start {
            return Err(Error::LogicBug("base landed elsewhere than planned"));
        }
        self.bytes_since_checkpoint = self.bytes_since_checkpoint.saturating_add(total);
        let s = &mut self.sessions[i];
        s.root = addr;
        s.head = addr;
        s.root_is_base = true;
        s.chain = 0;
        s.records = count as u16;
        s.size = size;
        s.oldest = oldest;
        s.dirty = true;
        Ok(true)
    }

    /// Reads a session's history into `buf`, oldest record first, applying
    /// ESP-Claw's mixed-backend filter for the `current` backend (tool
    /// records of another known backend are dropped; a final answer keeps
    /// only its text). An empty or unknown session is [`Error::NotFound`].
    ///
    /// Reads about the bytes it returns: the session's index and bodies and
    /// the meta of its recent batches, never the rest of the partition.
    pub fn history<'b>(
        &mut self,
        session: &str,
        current: BackendFormat,
        buf: &'b mut [u8],
    ) -> Result<History<'b>, Error<F::Error>> {
        self.check_id(session)?;
        let i = self.find(session)?.ok_or(Error::NotFound)?;
        let s = self.sessions[i];
        let mut needed =
            (s.size as usize).saturating_sub(s.records as usize) + HIST_HEADER * s.records as usize;
        // The size a base states may be damaged at rest and claim more than
        // its records hold: before asking for more room, count what they
        // hold (the next read then repairs the base).
        let mut resized = false;
        if buf.len() < needed {
            let held = self.history_len(&s)?;
            if held < needed {
                needed = held;
                resized = true;
            }
            if buf.len() < needed {
                return Err(Error::BufferTooSmall { needed });
            }
        }
        let ring = self.ring_view();
        let mut recs = Records::new(&mut self.log.io(), &s, Some(ring))?;
        let mut at = 0usize;
        let mut count = 0u32;
        let mut damaged = 0u32;
        // Batch CRCs are checked as the batch is read: remember where each
        // batch's output began, to drop it whole if its checksum fails.
        let mut seg_start = 0usize;
        let mut seg_records = 0u32;
        let mut cur_seg = usize::MAX;
        // A batch of the chain is read once, front to back, its CRCs checked
        // on the way (meta included); a base's bodies have their own CRCs.
        let mut reader: Option<VerifiedReader> = None;
        let mut seg_broken = false;
        loop {
            let next = recs.next(&mut self.log.io())?;
            let seg = next.map(|r| r.segment);
            if seg != Some(cur_seg) {
                // Close the previous batch.
                if let Some(r) = reader.take() {
                    if !r.finish() {
                        damaged += seg_records;
                        count -= seg_records;
                        at = seg_start;
                    }
                }
                if let Some(seg) = seg {
                    cur_seg = seg;
                    seg_start = at;
                    seg_records = 0;
                    seg_broken = false;
                    let base_segment = seg == 0 && s.root_is_base;
                    let damaged_meta = next.is_some_and(|r| r.damaged);
                    if !base_segment && !damaged_meta {
                        let addr = recs.chain().addrs[seg];
                        reader =
                            VerifiedReader::new(&mut self.log.io(), addr, kind::SESSION_BATCH)?;
                        // A batch whose header is gone: its records are lost.
                        seg_broken = reader.is_none();
                    }
                }
            }
            let Some(r) = next else { break };
            if r.damaged || seg_broken {
                damaged += 1;
                continue;
            }
            let body = at + HIST_HEADER;
            let end = body.saturating_add(r.len as usize);
            if end > buf.len() {
                if buf.len() < needed {
                    return Err(Error::BufferTooSmall { needed });
                }
                // `needed` holds the whole session: a record that does not
                // fit has a length damaged at rest. In a batch, whose bodies
                // follow one another, the batch is dropped (the reader will
                // not finish it); a base's entries stand alone, so only that
                // record is lost. The rest is still read.
                seg_broken |= !(r.segment == 0 && s.root_is_base);
                damaged += 1;
                continue;
            }
            let dst = &mut buf[body..end];
            match reader.as_mut() {
                Some(v) => {
                    // Skip (and check) the meta before the first body.
                    let mut skip = r.offset.saturating_sub(v.read_total());
                    while skip > 0 {
                        let n = (skip as usize).min(self.log.buf.len());
                        let mut io = Io {
                            flash: &mut self.log.flash,
                            geo: &self.log.geo,
                        };
                        v.read(&mut io, &mut self.log.buf[..n])?;
                        skip -= n as u32;
                    }
                    v.read(&mut self.log.io(), dst)?;
                }
                None => self.log.io().read_stream(r.addr, dst)?,
            }
            if let Some(crc) = r.crc {
                if CRC.checksum(dst) != crc {
                    damaged += 1;
                    continue;
                }
            }
            // The mixed-backend filter.
            let mut len = r.len as usize;
            match crate::backend::history_action(current, r.format, r.kind) {
                crate::backend::HistoryAction::Keep => {}
                crate::backend::HistoryAction::Drop => continue,
                crate::backend::HistoryAction::KeepTextOnly => {
                    let (head, tail) = buf.split_at_mut(end);
                    match crate::backend::degrade_assistant_final(&head[body..end], tail) {
                        Ok(crate::backend::Degraded::Unchanged) | Err(_) => {}
                        Ok(crate::backend::Degraded::Dropped) => continue,
                        Ok(crate::backend::Degraded::Rewritten { len_bytes }) => {
                            buf.copy_within(end..end + len_bytes, body);
                            len = len_bytes;
                        }
                    }
                }
            }
            buf[at] = r.kind.as_u8();
            buf[at + 1] = r.format.as_u8();
            buf[at + 2..at + 6].copy_from_slice(&(len as u32).to_le_bytes());
            at = body + len;
            count += 1;
            seg_records += 1;
        }
        if recs.degraded() || damaged > 0 || resized {
            // The index or the chain was damaged: rebuild the index from what
            // the log still holds, so that the next read is whole again and
            // nothing points at the damage. A failure here (no room) leaves
            // the session as it is; the read still answers.
            let _ = self.rewrite_base(i, Keep::All, None, Embed::None, Priority::Maintenance);
        }
        if count == 0 {
            return Err(Error::NotFound);
        }
        Ok(History {
            buf: &buf[..at],
            records: count,
            damaged,
        })
    }

    /// Bytes a history read of `s` returns at most: every record's header
    /// and body, as the index and batch metas give them (a length beyond
    /// the partition is damage, and not counted).
    fn history_len(&mut self, s: &Session) -> Result<usize, Error<F::Error>> {
        let ring = self.ring_view();
        let capacity = self.log.geo.capacity();
        let mut recs = Records::new(&mut self.log.io(), s, Some(ring))?;
        let mut total = 0usize;
        while let Some(r) = recs.next(&mut self.log.io())? {
            if !r.damaged && r.len <= capacity {
                total += HIST_HEADER + r.len as usize;
            }
        }
        Ok(total)
    }

    /// Deletes a session and all its records.
    ///
    /// Power loss: atomic; the deletion commits with one small record.
    pub fn delete_session(&mut self, session: &str) -> Result<(), Error<F::Error>> {
        self.check_id(session)?;
        let i = self.find(session)?.ok_or(Error::NotFound)?;
        let uid = self.sessions[i].uid;
        let mut payload = Slices([&uid.to_le_bytes()[..]]);
        self.write(kind::SESSION_DELETE, &mut payload, Priority::Maintenance)?;
        self.remove_uid(uid);
        Ok(())
    }

    /// Deletes every session. Returns how many were deleted.
    ///
    /// Power loss: each session's deletion is atomic on its own.
    pub fn clear_sessions(&mut self) -> Result<usize, Error<F::Error>> {
        let mut n = 0;
        while let Some(s) = self.sessions.last().copied() {
            let mut payload = Slices([&s.uid.to_le_bytes()[..]]);
            self.write(kind::SESSION_DELETE, &mut payload, Priority::Maintenance)?;
            self.remove_uid(s.uid);
            n += 1;
        }
        Ok(n)
    }

    // ---- objects: profiles and chat session maps ---------------------------

    fn upsert_object(&mut self, slot: ObjectSlot) -> Result<(), Error<F::Error>> {
        match self
            .objects
            .iter_mut()
            .find(|o| o.ty == slot.ty && o.key == slot.key)
        {
            Some(o) => *o = slot,
            None => self
                .objects
                .push(slot)
                .map_err(|_| Error::TooManySessions { max: MAX_OBJECTS })?,
        }
        Ok(())
    }

    /// Writes a new version of an object.
    ///
    /// Power loss: atomic; the old version stands until the new one commits.
    fn write_object(&mut self, ty: u8, key: u32, data: &[u8]) -> Result<(), Error<F::Error>> {
        let exists = self.objects.iter().any(|o| o.ty == ty && o.key == key);
        if !exists && self.objects.is_full() {
            return Err(Error::TooManySessions { max: MAX_OBJECTS });
        }
        let mut head = [0u8; OBJ_FIXED as usize];
        head[0] = ty;
        head[4..8].copy_from_slice(&key.to_le_bytes());
        let mut payload = Slices([&head[..], data]);
        let addr = self.write(kind::OBJECT, &mut payload, Priority::User)?;
        let seq = self.log.head_seq_of(addr);
        self.upsert_object(ObjectSlot {
            ty,
            key,
            addr,
            seq,
            len: data.len() as u32,
        })
    }

    /// Reads an object's data into `out`; `None` if there is none.
    fn read_object(
        &mut self,
        ty: u8,
        key: u32,
        out: &mut [u8],
    ) -> Result<Option<usize>, Error<F::Error>> {
        let Some(o) = self
            .objects
            .iter()
            .find(|o| o.ty == ty && o.key == key)
            .copied()
        else {
            return Ok(None);
        };
        let len = self.object_len(o.addr)?.ok_or(Error::Corrupted {
            address: o.addr,
            what: "a stored document failed its checksum",
        })? as usize;
        let dst = out
            .get_mut(..len)
            .ok_or(Error::BufferTooSmall { needed: len })?;
        let at = self
            .log
            .io()
            .stream_advance(o.addr + CHUNK_HEADER_LEN, OBJ_FIXED);
        self.log.io().read_stream(at, dst)?;
        Ok(Some(len))
    }

    /// Reads a profile document whole into `out` and returns its length.
    /// A document never written is created with its default contents first
    /// (as ESP-Claw creates the missing file); on a full partition the
    /// default is returned without being stored, so a read never fails for
    /// lack of room.
    ///
    /// Power loss: creating the default is atomic.
    pub fn profile_read(
        &mut self,
        doc: ProfileDoc,
        out: &mut [u8],
    ) -> Result<usize, Error<F::Error>> {
        if let Some(n) = self.read_object(OBJ_PROFILE, u32::from(doc.tag()), out)? {
            return Ok(n);
        }
        let default = doc.default_contents();
        if out.len() < default.len() {
            return Err(Error::BufferTooSmall {
                needed: default.len(),
            });
        }
        match self.profile_write(doc, default) {
            Ok(()) | Err(Error::Full { .. }) => {}
            Err(e) => return Err(e),
        }
        out[..default.len()].copy_from_slice(default.as_bytes());
        Ok(default.len())
    }

    /// Length of a profile document (its default's if never written).
    pub fn profile_len(&mut self, doc: ProfileDoc) -> Result<usize, Error<F::Error>> {
        match self
            .objects
            .iter()
            .find(|o| o.ty == OBJ_PROFILE && o.key == u32::from(doc.tag()))
        {
            Some(o) => Ok(o.len as usize),
            None => Ok(doc.default_contents().len()),
        }
    }

    /// Replaces a profile document whole.
    ///
    /// Power loss: atomic; a read after any cut returns the old or the new
    /// document, never a mix.
    pub fn profile_write(&mut self, doc: ProfileDoc, body: &str) -> Result<(), Error<F::Error>> {
        if body.len() > self.config.profile_max_bytes {
            return Err(Error::TooLarge {
                what: "profile document",
                size: body.len(),
                limit: self.config.profile_max_bytes,
            });
        }
        self.write_object(OBJ_PROFILE, u32::from(doc.tag()), body.as_bytes())
    }

    /// A chat's session map (ESP-Claw `/session`). On first use the chat
    /// gets `default_01` as its current session, which is stored.
    pub fn chat_sessions(&mut self, chat: &ChatKey) -> Result<ChatSessions, Error<F::Error>> {
        let key = fnv1a32(chat.as_str().as_bytes());
        let mut buf = [0u8; crate::chat::MAP_ENCODED_MAX_BYTES];
        if let Some(n) = self.read_object(OBJ_CHAT_MAP, key, &mut buf)? {
            if let Ok(map) = ChatSessions::decode_for(chat, &buf[..n]) {
                return Ok(map);
            }
            // Another chat key with the same hash: not supported.
            return Err(Error::InvalidInput("chat key collides with another chat's"));
        }
        let map = ChatSessions::first_use(chat.clone());
        self.save_chat_sessions(&map)?;
        Ok(map)
    }

    fn save_chat_sessions(&mut self, map: &ChatSessions) -> Result<(), Error<F::Error>> {
        let mut buf = [0u8; crate::chat::MAP_ENCODED_MAX_BYTES];
        let n = map
            .encode(&mut buf)
            .map_err(|_| Error::LogicBug("chat map larger than its maximum"))?;
        self.write_object(
            OBJ_CHAT_MAP,
            fnv1a32(map.key().as_str().as_bytes()),
            &buf[..n],
        )
    }

    /// Runs a `/session` command for a chat (parse it with
    /// [`crate::chat::parse_session_command`]). `Ok(Err(_))` is a refusal whose
    /// text is ESP-Claw's reply; `list` replies with [`ChatSessions::render_list`]
    /// of [`chat_sessions`](Self::chat_sessions) and changes nothing.
    /// `delete` removes the session's whole history too.
    ///
    /// Power loss: the map is replaced atomically; a delete removes the
    /// history first, so a cut between the two leaves an alias whose history
    /// is empty, never a history without its alias being deletable.
    pub fn session_command(
        &mut self,
        chat: &ChatKey,
        command: &SessionCommand,
    ) -> Result<Result<Option<SessionReply>, SessionError>, Error<F::Error>> {
        let mut map = self.chat_sessions(chat)?;
        let reply = match command {
            SessionCommand::List => return Ok(Ok(None)),
            SessionCommand::New(name) => match map.new_session(name.as_ref()) {
                Ok(alias) => SessionReply::Started(alias),
                Err(e) => return Ok(Err(e)),
            },
            SessionCommand::Switch(alias) => match map.switch_to(alias) {
                Ok(()) => SessionReply::Switched(alias.clone()),
                Err(e) => return Ok(Err(e)),
            },
            SessionCommand::Delete(alias) => {
                if let Err(e) = map.check_delete(alias) {
                    return Ok(Err(e));
                }
                let id = map.session_id(alias);
                match self.delete_session(id.as_str()) {
                    Ok(()) | Err(Error::NotFound) | Err(Error::TooLarge { .. }) => {}
                    Err(e) => return Err(e),
                }
                if let Err(e) = map.delete(alias) {
                    return Ok(Err(e));
                }
                SessionReply::Deleted(alias.clone())
            }
        };
        self.save_chat_sessions(&map)?;
        Ok(Ok(Some(reply)))
    }

    /// Checks the store's structure against the flash: every session's chain
    /// and index, checksums, record counts and sizes, and the ring.
    /// Returns the number of records checked.
    pub fn check(&mut self) -> Result<u32, Error<F::Error>> {
        let geo = self.log.geo;
        let mut records = 0u32;
        for seq in self.log.tail_seq..=self.log.head_seq {
            let idx = self
                .log
                .sector_index_of_seq(seq)
                .ok_or(Error::LogicBug("ring"))?;
            match self.log.io().sector_header(idx)? {
                SectorHeader::Valid { seq: s, .. } if s == seq => {}
                _ => {
                    return Err(Error::Corrupted {
                        address: geo.sector_start(idx),
                        what: "a sector in use has a wrong or missing header",
                    })
                }
            }
        }
        for i in 0..self.sessions.len() {
            let s = self.sessions[i];
            if s.oldest < self.log.tail_seq || s.oldest > self.log.head_seq {
                return Err(Error::Corrupted {
                    address: s.root,
                    what: "a session's oldest sector is outside the ring",
                });
            }
            let mut recs = Records::new(&mut self.log.io(), &s, None)?;
            if recs.chain().len != s.chain as usize + 1 {
                return Err(Error::Corrupted {
                    address: s.head,
                    what: "a session's chain length disagrees with the table",
                });
            }
            let (mut n, mut size) = (0u32, 0u32);
            while let Some(r) = recs.next(&mut self.log.io())? {
                if r.damaged || recs.degraded() {
                    return Err(Error::Corrupted {
                        address: s.root,
                        what: "a session's index or chain is damaged",
                    });
                }
                n += 1;
                size += r.len + 1;
                let sector_seq = self.log.seq_of_sector(geo.sector_of(r.addr));
                if sector_seq.is_none_or(|q| q < s.oldest) {
                    return Err(Error::Corrupted {
                        address: r.addr,
                        what: "a record body lies outside the session's live sectors",
                    });
                }
            }
            if n != u32::from(s.records) || size != s.size {
                return Err(Error::Corrupted {
                    address: s.root,
                    what: "a session's record count or size disagrees with the table",
                });
            }
            for k in 0..recs.chain().len {
                let addr = recs.chain().addrs[k];
                if self.log.verify(addr)?.is_none() {
                    return Err(Error::Corrupted {
                        address: addr,
                        what: "a session record failed its checksum",
                    });
                }
            }
            records += n;
        }
        for k in 0..self.objects.len() {
            let o = self.objects[k];
            if self.object_len(o.addr)? != Some(o.len) || self.log.head_seq_of(o.addr) != o.seq {
                return Err(Error::Corrupted {
                    address: o.addr,
                    what: "a stored document disagrees with the table",
                });
            }
        }
        Ok(records)
    }
}

impl<F: NorFlash> Log<F> {
    /// Verifies the batch at `addr` (see [`verify_batch`]).
    fn verify(&mut self, addr: u32) -> Result<Option<u32>, Error<F::Error>> {
        let mut io = Io {
            flash: &mut self.flash,
            geo: &self.geo,
        };
        verify_batch(&mut io, addr, &mut self.buf)
    }

    /// The name the session's first batch at `addr` carries, corrected
    /// when it can be (see [`start_name`]).
    fn start_name(
        &mut self,
        addr: u32,
        uid: Option<u32>,
        out: &mut [u8; MAX_SESSION_ID_BYTES],
    ) -> Result<Option<(u32, usize)>, Error<F::Error>> {
        let mut io = Io {
            flash: &mut self.flash,
            geo: &self.geo,
        };
        start_name(&mut io, addr, uid, out, &mut self.buf)
    }

    /// Whether sector `idx` starts with a chunk whose header decodes and
    /// whose CRC checks out.
    fn first_chunk_sound(&mut self, idx: u32) -> Result<bool, Error<F::Error>> {
        let at = self.geo.first_chunk(idx);
        let mut io = Io {
            flash: &mut self.flash,
            geo: &self.geo,
        };
        match io.chunk_header(at)? {
            Some(h) if at + self.geo.chunk_size(h.len) <= self.geo.sector_end(at) => {
                io.chunk_crc_ok(at, &h, &mut self.buf)
            }
            _ => Ok(false),
        }
    }

    /// Sector sequence of the sector holding `addr` (the head's if unknown).
    fn head_seq_of(&self, addr: u32) -> u32 {
        self.seq_of_sector(self.geo.sector_of(addr))
            .unwrap_or(self.head_seq)
    }
}

/// A payload copied from a stream on flash.
struct FlashCopy {
    from: u32,
    len: u32,
}

impl<F: NorFlash> Payload<F> for FlashCopy {
    fn len(&self) -> u32 {
        self.len
    }

    fn fill(
        &mut self,
        io: &mut Io<'_, F>,
        offset: u32,
        out: &mut [u8],
    ) -> Result<(), Error<F::Error>> {
        let at = io.stream_advance(self.from, offset);
        io.read_stream(at, out)
    }
}

struct AppendPayload<'a, 'r> {
    meta: &'a [u8],
    records: &'a [Record<'r>],
}

impl<F: NorFlash> Payload<F> for AppendPayload<'_, '_> {
    fn len(&self) -> u32 {
        self.meta.len() as u32
            + self
                .records
                .iter()
                .map(|r| r.body.len() as u32)
                .sum::<u32>()
    }

    fn fill(
        &mut self,
        _io: &mut Io<'_, F>,
        offset: u32,
        out: &mut [u8],
    ) -> Result<(), Error<F::Error>> {
        let parts = core::iter::once(self.meta).chain(self.records.iter().map(|r| r.body));
        copy_from_parts(parts, offset, out);
        Ok(())
    }
}

struct CheckpointPayload<'a> {
    fixed: [u8; CKPT_FIXED + CKPT_DELTA_FIXED],
    fixed_len: usize,
    sessions: &'a [Session],
    /// A delta carries only the sessions changed since the full checkpoint.
    only_dirty: bool,
    /// Sessions carried.
    count: usize,
    deleted: &'a [u32],
    objects: &'a [ObjectSlot],
    mem: [u8; MEM_STATE_ENCODED],
}

impl CheckpointPayload<'_> {
    fn session(&self, k: usize) -> Option<&Session> {
        self.sessions
            .iter()
            .filter(|s| !self.only_dirty || s.dirty)
            .nth(k)
    }

    /// The byte at payload offset `p`.
    fn byte(&self, p: usize) -> Option<u8> {
        let sessions_at = self.fixed_len;
        let deleted_at = sessions_at + self.count * SESSION_ENCODED;
        let objects_at = deleted_at + self.deleted.len() * 4;
        let mem_at = objects_at + self.objects.len() * OBJ_ENCODED;
        if p < sessions_at {
            return self.fixed.get(p).copied();
        }
        if p < deleted_at {
            let q = p - sessions_at;
            let mut b = [0u8; SESSION_ENCODED];
            self.session(q / SESSION_ENCODED)?.encode(&mut b);
            return Some(b[q % SESSION_ENCODED]);
        }
        if p < objects_at {
            let q = p - deleted_at;
            return Some(self.deleted.get(q / 4)?.to_le_bytes()[q % 4]);
        }
        if p < mem_at {
            let q = p - objects_at;
            let mut b = [0u8; OBJ_ENCODED];
            self.objects.get(q / OBJ_ENCODED)?.encode(&mut b);
            return Some(b[q % OBJ_ENCODED]);
        }
        self.mem.get(p - mem_at).copied()
    }
}

impl<F: NorFlash> Payload<F> for CheckpointPayload<'_> {
    fn len(&self) -> u32 {
        (self.fixed_len
            + self.count * SESSION_ENCODED
            + self.deleted.len() * 4
            + self.objects.len() * OBJ_ENCODED
            + MEM_STATE_ENCODED) as u32
    }

    fn fill(
        &mut self,
        _io: &mut Io<'_, F>,
        offset: u32,
        out: &mut [u8],
    ) -> Result<(), Error<F::Error>> {
        // Sessions are encoded a whole entry at a time.
        let mut k = 0;
        while k < out.len() {
            let p = offset as usize + k;
            out[k] = self
                .byte(p)
                .ok_or(Error::LogicBug("checkpoint payload overrun"))?;
            k += 1;
        }
        Ok(())
    }
}

/// One sequential pass over the kept records of a base being written.
#[derive(Clone)]
struct Sweep {
    recs: Records,
    state: KeepState,
    /// Index (among kept records, the summary counting as 0) of `cur`.
    k: Option<u32>,
    cur: Option<RecordInfo>,
    /// Offset of `cur`'s body within the embedded-bodies section.
    embed_off: u32,
    /// Bytes of `cur`'s body emitted so far (bodies sweep only).
    started: bool,
}

impl Sweep {
    fn new(recs: Records) -> Self {
        Sweep {
            recs,
            state: KeepState::new(),
            k: None,
            cur: None,
            embed_off: 0,
            started: false,
        }
    }

    fn rewind(&mut self) {
        self.recs.rewind();
        self.state = KeepState::new();
        self.k = None;
        self.cur = None;
        self.embed_off = 0;
        self.started = false;
    }
}

struct BasePayload<'p, 'r> {
    fixed: [u8; BASE_FIXED as usize],
    id: [u8; MAX_SESSION_ID_BYTES],
    id_len: u32,
    summary: Option<Record<'r>>,
    keep: Keep<'p>,
    embed: Embed,
    ring: Ring,
    payload_start: u32,
    entries_at: u32,
    crcs_at: u32,
    bodies_at: u32,
    total: u32,
    last_end: u32,
    entries: Sweep,
    crcs: Sweep,
    bodies: Sweep,
}

/// A kept record as the base sees it: from RAM (the summary) or flash.
#[derive(Clone, Copy)]
enum Kept<'r> {
    Summary(Record<'r>),
    Flash(RecordInfo),
}

impl<'r> BasePayload<'_, 'r> {
    /// Moves `sweep` to kept record `k`; returns it and its body's offset in
    /// the embedded section (if embedded).
    fn seek<F: NorFlash>(
        sweep: &mut Sweep,
        io: &mut Io<'_, F>,
        keep: Keep<'_>,
        summary: Option<Record<'r>>,
        embed: Embed,
        ring: &Ring,
        k: u32,
    ) -> Result<(Kept<'r>, Option<u32>), Error<F::Error>> {
        if sweep.k.is_some_and(|c| c > k) {
            sweep.rewind();
        }
        loop {
            if sweep.k == Some(k) {
                break;
            }
            // Account the current record's embedded body before moving on.
            match (sweep.k, summary) {
                (Some(0), Some(s)) => sweep.embed_off += s.body.len() as u32,
                (Some(_), _) => {
                    if let Some(c) = sweep.cur.filter(|c| ring.embeds(embed, c)) {
                        sweep.embed_off += c.len;
                    }
                }
                (None, _) => {}
            }
            let next_k = sweep.k.map_or(0, |c| c + 1);
            if next_k == 0 && summary.is_some() {
                sweep.k = Some(0);
                sweep.cur = None;
                continue;
            }
            loop {
                let r = sweep
                    .recs
                    .next(io)?
                    .ok_or(Error::LogicBug("base sweep ran out of records"))?;
                if r.damaged {
                    continue;
                }
                if sweep.state.keep(keep, r.kind) {
                    sweep.cur = Some(r);
                    break;
                }
            }
            sweep.k = Some(next_k);
        }
        let off = sweep.embed_off;
        match (k, summary) {
            (0, Some(s)) => Ok((Kept::Summary(s), Some(off))),
            _ => {
                let r = sweep
                    .cur
                    .ok_or(Error::LogicBug("base sweep lost its record"))?;
                Ok((Kept::Flash(r), ring.embeds(embed, &r).then_some(off)))
            }
        }
    }
}

impl<F: NorFlash> Payload<F> for BasePayload<'_, '_> {
    fn len(&self) -> u32 {
        self.total
    }

    fn fill(
        &mut self,
        io: &mut Io<'_, F>,
        offset: u32,
        out: &mut [u8],
    ) -> Result<(), Error<F::Error>> {
        if offset < self.last_end {
            // A new pass over this chunk (checksum, then program).
            self.entries.rewind();
            self.crcs.rewind();
            self.bodies.rewind();
        }
        self.last_end = offset + out.len() as u32;
        let mut done = 0usize;
        while done < out.len() {
            let p = offset + done as u32;
            let rest = out.len() - done;
            let n;
            if p < BASE_FIXED {
                n = ((BASE_FIXED - p) as usize).min(rest);
                out[done..done + n].copy_from_slice(&self.fixed[p as usize..p as usize + n]);
            } else if p < BASE_FIXED + self.id_len {
                let j = (p - BASE_FIXED) as usize;
                n = (self.id_len as usize - j).min(rest);
                out[done..done + n].copy_from_slice(&self.id[j..j + n]);
            } else if p < self.entries_at {
                let h = chdx::encode_header();
                let j = (p - BASE_FIXED - self.id_len) as usize;
                n = (CHDX_HEADER_SIZE - j).min(rest);
                out[done..done + n].copy_from_slice(&h[j..j + n]);
            } else if p < self.crcs_at {
                let k = (p - self.entries_at) / CHDX_ENTRY_SIZE as u32;
                let j = ((p - self.entries_at) % CHDX_ENTRY_SIZE as u32) as usize;
                let (rec, emb) = Self::seek(
                    &mut self.entries,
                    io,
                    self.keep,
                    self.summary,
                    self.embed,
                    &self.ring,
                    k,
                )?;
                let (kind, format, len, addr) = match rec {
                    Kept::Summary(s) => (s.kind, s.format, s.body.len() as u32, 0),
                    Kept::Flash(r) => (r.kind, r.format, r.len, r.addr),
                };
                let addr = match emb {
                    Some(off) => io.stream_advance(self.payload_start, self.bodies_at + off),
                    None => addr,
                };
                let e = chdx::RawEntry {
                    offset: addr,
                    length: len + 1,
                    record_type: kind.as_u8(),
                    backend_format: format.as_u8(),
                }
                .encode();
                n = (CHDX_ENTRY_SIZE - j).min(rest);
                out[done..done + n].copy_from_slice(&e[j..j + n]);
            } else if p < self.bodies_at {
                let k = (p - self.crcs_at) / 4;
                let j = ((p - self.crcs_at) % 4) as usize;
                let (rec, _) = Self::seek(
                    &mut self.crcs,
                    io,
                    self.keep,
                    self.summary,
                    self.embed,
                    &self.ring,
                    k,
                )?;
                let crc = match rec {
                    Kept::Summary(s) => CRC.checksum(s.body),
                    Kept::Flash(r) => match r.crc {
                        Some(c) => c,
                        None => {
                            let mut d = CRC.digest();
                            let mut chunk = [0u8; 64];
                            let mut got = 0u32;
                            while got < r.len {
                                let m = ((r.len - got) as usize).min(chunk.len());
                                let at = io.stream_advance(r.addr, got);
                                io.read_stream(at, &mut chunk[..m])?;
                                d.update(&chunk[..m]);
                                got += m as u32;
                            }
                            d.finalize()
                        }
                    },
                };
                let c = crc.to_le_bytes();
                n = (4 - j).min(rest);
                out[done..done + n].copy_from_slice(&c[j..j + n]);
            } else {
                // Embedded bodies, in kept order.
                let rel = p - self.bodies_at;
                let mut k = self.bodies.k.unwrap_or(0);
                let (mut rec, mut off) = Self::seek(
                    &mut self.bodies,
                    io,
                    self.keep,
                    self.summary,
                    self.embed,
                    &self.ring,
                    k,
                )?;
                loop {
                    let len = match rec {
                        Kept::Summary(s) => s.body.len() as u32,
                        Kept::Flash(r) => r.len,
                    };
                    let o = off.ok_or(Error::LogicBug("body section holds a referenced record"))?;
                    if rel < o {
                        return Err(Error::LogicBug("base body sweep went backwards"));
                    }
                    if rel < o + len {
                        let j = rel - o;
                        n = ((len - j) as usize).min(rest);
                        match rec {
                            Kept::Summary(s) => out[done..done + n]
                                .copy_from_slice(&s.body[j as usize..j as usize + n]),
                            Kept::Flash(r) => {
                                let at = io.stream_advance(r.addr, j);
                                io.read_stream(at, &mut out[done..done + n])?;
                            }
                        }
                        break;
                    }
                    k += 1;
                    (rec, off) = Self::seek(
                        &mut self.bodies,
                        io,
                        self.keep,
                        self.summary,
                        self.embed,
                        &self.ring,
                        k,
                    )?;
                }
            }
            done += n;
        }
        Ok(())
    }
}
