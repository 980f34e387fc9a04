//! `sequential-storage`: ESP-Claw's sessions, long-term memory and profiles
//! on the `sequential-storage` crate (tweedegolf, version 8): a queue per
//! session, plus its map for memory items, profiles and blocked markers.
//!
//! The crate is async over `embedded-storage-async`; [`AsyncNor`] gives it
//! the simulator's blocking flash and `embassy_futures::block_on` drives each
//! call (the flash never pends, so every future completes on its first poll).
//! Every read, program and erase the crate makes lands on the same
//! [`SimFlash`] as clawmem's and is counted there.
//!
//! # Layout
//!
//! The partition is split into fixed ranges ([`Layout`]):
//!
//! - the first 1/16 (at least 2 pages) is one `MapStorage<u32, _, _>`: memory
//!   items under their id, profile documents under `PROFILE_KEY | name << 8 |
//!   chunk` (split into page-sized chunks, chunk 0 holding the count),
//!   blocked markers under `BLOCKED_KEY | slot`;
//! - the rest is cut into equal *session slots* of `slot_pages` pages, each
//!   its own `QueueStorage`: a queue per session, as the crate is meant to be
//!   used (one FIFO per flash range). `slot_pages` is the largest whole
//!   number of pages that still gives at least [`SLOT_TARGET`] slots (2 pages
//!   and 120 slots on a 1 MiB ESP32 partition: the BFCL traces keep up to 93
//!   sessions live under `--repeat`).
//!
//! A slot's queue starts with a head item naming its session, then one item
//! per record (`[b'R', type, format, more]` + body); a body longer than
//! half of the largest queue item (2,040 B on ESP32; an item must fit one
//! page) continues in `[b'C', more]` items. The driver keeps a directory (session id -> slot,
//! the session's log size once known, whether it is blocked) in RAM and
//! rebuilds it at every mount by peeking the first item of each slot and
//! walking the map once: that is this peer's mount cost. A free slot is
//! picked by hashing the session id (so that wear spreads over the slots).
//!
//! The crate runs without a cache (`Cache::new_uncached()`, its default and
//! its worst case): every call reads the page states of its range again.
//!
//! # Sessions
//!
//! - `append` pushes the batch's items to the session's queue. ESP-Claw's
//!   turn-aware compaction runs as ESP-Claw runs it: after a completed turn,
//!   when the session's log (every body plus a newline) is over the limit.
//!   150 KiB cannot fit a slot, so the limit is scaled down to 3/4 of a
//!   slot's data area (6,132 B for 2-page ESP32 slots) and reported as
//!   scaled. Compaction rewrites the slot in place, as ESP-Claw rewrites its
//!   files: the slot is erased and the kept records pushed again. A session
//!   still over the limit after compaction gets a blocked marker, and its
//!   next append is refused ([`OpError::Blocked`]).
//! - A queue only reclaims whole pages and a new session starts wherever the
//!   previous one in its slot stopped, so a batch may not fit although the
//!   session is below the limit (the crate answers `FullStorage`). The peer
//!   then rewrites the slot from its start (erase, push everything again),
//!   which is not reported (history is unchanged); if even a fresh slot
//!   cannot hold it, it compacts right away and reports `compacted`; if the
//!   compacted session does not fit either, the append is refused as blocked
//!   (the replayer then deletes the session). The notes of the report count
//!   these rewrites.
//! - `history` iterates the queue (the crate's `QueueIterator`);
//!   `session_delete` pops every item of the queue, the crate's own way of
//!   removing data (each pop zeroes an item's CRC word; the iterator erases
//!   a page once all its items are popped).
//!
//! # Memory and profiles
//!
//! Memory items follow the rules of [`super::EspClawDriver`] (ESP-Claw's):
//! trimmed content, at most 3 tags and 3 keywords, the same duplicate test.
//! What differs is where they live: `store_item` under the item's id, an
//! update overwrites the same key (the map's own semantics; the handle stays
//! the same), a forget is `remove_item`. Recall and list iterate the whole
//! map (`fetch_all_items`), newest first; recalls write nothing (ESP-Claw's
//! access counts and digest log are not kept), and nothing is evicted for
//! capacity: a full map answers an error. Every operation is supported
//! (nothing is counted under `unsupported_ops`); an update or forget whose
//! item is not in the map answers [`OpError::Evicted`], which the replayer
//! counts under `skipped` as `traces/FORMAT.md` says (no shipped trace
//! causes one).
//!
//! # Limits of the design
//!
//! Fixed 2-page queues hold a session of about 7 KiB at most. On
//! `bfcl-multi-turn.jsonl` (sessions up to 4.8 KiB) nothing is compacted or
//! blocked; on `bfcl-memory.jsonl` (sessions up to 10 KiB, mostly user and
//! answer text that compaction keeps) dozens of appends per round are
//! refused as blocked, which ESP-Claw would do too at a 6 KiB limit. One
//! queue shared by all sessions would hold them, but is not "a queue per
//! session", and its history reads would walk every session's records.
//!
//! Power loss is not exercised here (`compare` cuts no power); like
//! ESP-Claw's in-place rewrites, a cut during a compaction or an overflow
//! rewrite would lose the session.

use std::collections::{BTreeMap, HashMap};
use std::ops::Range;

use clawmem::turns::{PlanBuilder, COMPACT_TOOL_TURNS};
use clawmem::RecordType;
use embassy_futures::block_on;
use embedded_storage::nor_flash::{
    ErrorType, MultiwriteNorFlash as BlockingMultiwrite, NorFlash as BlockingNorFlash,
    ReadNorFlash as BlockingReadNorFlash,
};
use embedded_storage_async::nor_flash as asynch;
use sequential_storage::cache::Cache;
use sequential_storage::map::{MapConfig, MapStorage};
use sequential_storage::queue::{QueueConfig, QueueStorage};

use super::{format_code, format_of, key, kind_code, kind_of, normalize, patched, terms, Item};
use crate::flash::{SimError, SimFlash};
use crate::model::Preset;
use crate::nor::{Esp32Flash, GenericFlash, Nrf52Flash};
use crate::replay::{
    replay, AppendOutcome, Driver, EngineInfo, HistoryRecord, ItemHandle, MemoryChange, MemoryItem,
    MemoryStored, OpError, OpResult, Report, RunOptions, SimBacked,
};
use crate::trace::{MemorySource, ProfileName, Trace, TraceRecord};

/// Engine name in reports.
pub const ENGINE: &str = "sequential-storage";

/// Fewest session slots the layout aims for (see the module docs).
pub const SLOT_TARGET: u32 = 96;

/// Share of the partition given to the map: one page in this many.
const MAP_SHARE: u32 = 16;

/// Map keys: memory items use their id (below this).
const PROFILE_KEY: u32 = 0x4000_0000;
/// Map keys of blocked markers: this | slot.
const BLOCKED_KEY: u32 = 0x8000_0000;

const TAG_HEAD: u8 = b'H';
const TAG_RECORD: u8 = b'R';
const TAG_CONT: u8 = b'C';

type SsError = sequential_storage::Error<SimError>;

// ---- the async face of the simulator -----------------------------------

/// A blocking `embedded-storage` flash seen through the async
/// `embedded-storage-async` traits that `sequential-storage` takes. Every
/// call goes straight to the wrapped flash, so the simulator counts it.
#[derive(Clone, Debug)]
pub struct AsyncNor<F>(F);

impl<F> AsyncNor<F> {
    /// Wraps a blocking flash.
    pub fn new(flash: F) -> Self {
        AsyncNor(flash)
    }

    /// The wrapped flash.
    pub fn inner(&self) -> &F {
        &self.0
    }

    /// The wrapped flash, mutably.
    pub fn inner_mut(&mut self) -> &mut F {
        &mut self.0
    }

    /// Unwraps the flash.
    pub fn into_inner(self) -> F {
        self.0
    }
}

// `embedded-storage-async` re-exports the blocking crate's `ErrorType`.
impl<F: ErrorType> ErrorType for AsyncNor<F> {
    type Error = F::Error;
}

impl<F: BlockingReadNorFlash> asynch::ReadNorFlash for AsyncNor<F> {
    const READ_SIZE: usize = F::READ_SIZE;

    async fn read(&mut self, offset: u32, bytes: &mut [u8]) -> Result<(), Self::Error> {
        self.0.read(offset, bytes)
    }

    fn capacity(&self) -> usize {
        self.0.capacity()
    }
}

impl<F: BlockingNorFlash> asynch::NorFlash for AsyncNor<F> {
    const WRITE_SIZE: usize = F::WRITE_SIZE;
    const ERASE_SIZE: usize = F::ERASE_SIZE;

    async fn erase(&mut self, from: u32, to: u32) -> Result<(), Self::Error> {
        self.0.erase(from, to)
    }

    async fn write(&mut self, offset: u32, bytes: &[u8]) -> Result<(), Self::Error> {
        self.0.write(offset, bytes)
    }
}

impl<F: BlockingMultiwrite> asynch::MultiwriteNorFlash for AsyncNor<F> {}

// ---- the layout ------------------------------------------------------------

/// How the peer cuts the partition (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    /// Page (erase unit) size.
    pub page_bytes: u32,
    /// Program unit (the crate's word).
    pub word_bytes: u32,
    /// Pages of the map, from address 0.
    pub map_pages: u32,
    /// Pages of each session slot.
    pub slot_pages: u32,
    /// Session slots, after the map.
    pub slots: u32,
}

const fn round_up(x: usize, to: usize) -> usize {
    x.div_ceil(to) * to
}

impl Layout {
    /// The layout of a partition of `capacity` bytes with pages of
    /// `page_bytes` and words of `word_bytes`.
    pub fn new(capacity: usize, page_bytes: usize, word_bytes: usize) -> Result<Layout, String> {
        let pages = (capacity / page_bytes) as u32;
        let map_pages = (pages / MAP_SHARE).max(2);
        let rest = pages.saturating_sub(map_pages);
        let slot_pages = (rest / SLOT_TARGET).max(1);
        let slots = rest / slot_pages;
        if slots == 0 {
            return Err(format!(
                "{pages} pages of {page_bytes} B leave no room for a session queue next to a {map_pages}-page map"
            ));
        }
        Ok(Layout {
            page_bytes: page_bytes as u32,
            word_bytes: word_bytes as u32,
            map_pages,
            slot_pages,
            slots,
        })
    }

    /// Flash range of the map.
    pub fn map_range(&self) -> Range<u32> {
        0..self.map_pages * self.page_bytes
    }

    /// Flash range of session slot `slot`.
    pub fn slot_range(&self, slot: u32) -> Range<u32> {
        let start = (self.map_pages + slot * self.slot_pages) * self.page_bytes;
        start..start + self.slot_pages * self.page_bytes
    }

    /// Data bytes of a page: all but its two state words.
    fn page_area(&self) -> usize {
        (self.page_bytes - 2 * self.word_bytes) as usize
    }

    /// An item header, padded to a word.
    fn header(&self) -> usize {
        round_up(8, self.word_bytes as usize)
    }

    /// Largest item the crate takes (it must fit one page).
    pub fn item_max(&self) -> usize {
        self.page_area() - self.header()
    }

    /// Largest queue item of a record: half of [`Self::item_max`], so that
    /// a long body split over several items does not leave most of a page
    /// empty (no record of the shipped traces is split).
    pub fn record_item_max(&self) -> usize {
        self.item_max() / 2
    }

    /// Bytes of a buffer that holds any item, padding included.
    fn buf_len(&self) -> usize {
        round_up(self.page_bytes as usize, 64)
    }

    /// ESP-Claw's 150 KiB session limit scaled down to 3/4 of a slot's
    /// data area.
    pub fn session_limit(&self) -> u64 {
        let area = self.slot_pages as u64 * self.page_area() as u64;
        (area * 3 / 4).min(super::SESSION_LIMIT)
    }

    /// Whether items of these lengths, pushed in order, fit in an empty
    /// slot (an item never straddles pages).
    fn fits_fresh(&self, lens: impl IntoIterator<Item = usize>) -> bool {
        let (area, word) = (self.page_area(), self.word_bytes as usize);
        let (mut page, mut used) = (0u32, 0usize);
        for len in lens {
            let need = self.header() + round_up(len, word);
            if need > area {
                return false;
            }
            if used + need > area {
                page += 1;
                used = 0;
                if page >= self.slot_pages {
                    return false;
                }
            }
            used += need;
        }
        true
    }
}

// ---- the crate's calls, made blocking ----------------------------------------

/// One queue call on `range`, uncached.
fn with_queue<F: SimBacked + BlockingMultiwrite, T>(
    flash: &mut AsyncNor<F>,
    range: Range<u32>,
    f: impl AsyncFnOnce(&mut QueueStorage<&mut AsyncNor<F>, UncachedQ>) -> Result<T, SsError>,
) -> Result<T, SsError> {
    // `new` panics on a bad range: every slot has the shape that
    // `SeqStorageDriver::new` checked with `try_new`.
    let mut q = QueueStorage::new(flash, QueueConfig::new(range), Cache::new_uncached());
    block_on(f(&mut q))
}

type UncachedQ = Cache<
    sequential_storage::cache::Uncached,
    sequential_storage::cache::Uncached,
    sequential_storage::cache::Uncached,
>;
type UncachedM = Cache<
    sequential_storage::cache::Uncached,
    sequential_storage::cache::Uncached,
    sequential_storage::cache::Uncached,
    u32,
>;

/// One map call on `range`, uncached.
fn with_map<F: SimBacked + BlockingMultiwrite, T>(
    flash: &mut AsyncNor<F>,
    range: Range<u32>,
    f: impl AsyncFnOnce(&mut MapStorage<u32, &mut AsyncNor<F>, UncachedM>) -> Result<T, SsError>,
) -> Result<T, SsError> {
    // Checked with `try_new` by `SeqStorageDriver::new`.
    let mut m = MapStorage::new(flash, MapConfig::new(range), Cache::new_uncached());
    block_on(f(&mut m))
}

fn q_push<F: SimBacked + BlockingMultiwrite>(
    flash: &mut AsyncNor<F>,
    range: Range<u32>,
    data: &[u8],
) -> Result<(), SsError> {
    with_queue(flash, range, async |q| q.push(data, false).await)
}

/// Every item of a queue, oldest first.
fn q_items<F: SimBacked + BlockingMultiwrite>(
    flash: &mut AsyncNor<F>,
    range: Range<u32>,
    buf: &mut [u8],
) -> Result<Vec<Vec<u8>>, SsError> {
    with_queue(flash, range, async |q| {
        let mut out = Vec::new();
        let mut it = q.iter().await?;
        while let Some(entry) = it.next(buf).await? {
            out.push(entry.to_vec());
        }
        Ok(out)
    })
}

/// The oldest item of a queue.
fn q_peek<F: SimBacked + BlockingMultiwrite>(
    flash: &mut AsyncNor<F>,
    range: Range<u32>,
    buf: &mut [u8],
) -> Result<Option<Vec<u8>>, SsError> {
    with_queue(flash, range, async |q| {
        Ok(q.peek(buf).await?.map(|d| d.to_vec()))
    })
}

/// Pops every item of a queue.
fn q_pop_all<F: SimBacked + BlockingMultiwrite>(
    flash: &mut AsyncNor<F>,
    range: Range<u32>,
    buf: &mut [u8],
) -> Result<(), SsError> {
    with_queue(flash, range, async |q| {
        let mut it = q.iter().await?;
        while let Some(entry) = it.next(buf).await? {
            entry.pop().await?;
        }
        Ok(())
    })
}

fn q_erase<F: SimBacked + BlockingMultiwrite>(
    flash: &mut AsyncNor<F>,
    range: Range<u32>,
) -> Result<(), SsError> {
    with_queue(flash, range, async |q| q.erase_all().await)
}

fn m_store<F: SimBacked + BlockingMultiwrite>(
    flash: &mut AsyncNor<F>,
    range: Range<u32>,
    buf: &mut [u8],
    key: u32,
    value: &[u8],
) -> Result<(), SsError> {
    with_map(flash, range, async |m| {
        m.store_item(buf, &key, &value).await
    })
}

fn m_fetch<F: SimBacked + BlockingMultiwrite>(
    flash: &mut AsyncNor<F>,
    range: Range<u32>,
    buf: &mut [u8],
    key: u32,
) -> Result<Option<Vec<u8>>, SsError> {
    with_map(flash, range, async |m| {
        Ok(m.fetch_item::<&[u8]>(buf, &key).await?.map(<[u8]>::to_vec))
    })
}

fn m_remove<F: SimBacked + BlockingMultiwrite>(
    flash: &mut AsyncNor<F>,
    range: Range<u32>,
    buf: &mut [u8],
    key: u32,
) -> Result<(), SsError> {
    with_map(flash, range, async |m| m.remove_item(buf, &key).await)
}

/// Every live key of the map with its newest value.
fn m_all<F: SimBacked + BlockingMultiwrite>(
    flash: &mut AsyncNor<F>,
    range: Range<u32>,
    buf: &mut [u8],
) -> Result<BTreeMap<u32, Vec<u8>>, SsError> {
    with_map(flash, range, async |m| {
        let mut out = BTreeMap::new();
        let mut it = m.fetch_all_items(buf).await?;
        while let Some((k, v)) = it.next::<&[u8]>(buf).await? {
            // Older values of a key come first: the last one wins.
            out.insert(k, v.to_vec());
        }
        Ok(out)
    })
}

fn failed(what: &str, e: SsError) -> OpError {
    match e {
        SsError::FullStorage => OpError::Full(format!("sequential-storage {what}: {e}")),
        e => OpError::Failed(format!("sequential-storage {what}: {e}")),
    }
}

// ---- items on flash ------------------------------------------------------------

fn head_item(session: &str) -> Vec<u8> {
    let mut v = vec![TAG_HEAD];
    v.extend_from_slice(session.as_bytes());
    v
}

/// The queue items of one record.
fn record_items(r: &HistoryRecord, item_max: usize) -> Vec<Vec<u8>> {
    let first = item_max - 4;
    let (head, mut rest) = r.body.split_at(r.body.len().min(first));
    let mut out = vec![vec![
        TAG_RECORD,
        kind_code(r.kind),
        format_code(r.format),
        u8::from(!rest.is_empty()),
    ]];
    out[0].extend_from_slice(head);
    while !rest.is_empty() {
        let (chunk, tail) = rest.split_at(rest.len().min(item_max - 2));
        let mut item = vec![TAG_CONT, u8::from(!tail.is_empty())];
        item.extend_from_slice(chunk);
        out.push(item);
        rest = tail;
    }
    out
}

/// A slot's queue read back: its session and its complete records (a record
/// whose continuation is missing is dropped).
fn parse_slot(items: &[Vec<u8>]) -> (Option<String>, Vec<HistoryRecord>) {
    let mut head = None;
    let mut out = Vec::new();
    // The record being assembled and whether more of it follows.
    let mut open: Option<HistoryRecord> = None;
    for item in items {
        match item.first() {
            Some(&TAG_HEAD) if head.is_none() && out.is_empty() => {
                head = Some(String::from_utf8_lossy(&item[1..]).into_owned());
            }
            Some(&TAG_RECORD) if item.len() >= 4 => {
                open = None;
                let (Some(kind), Some(format)) = (kind_of(item[1]), format_of(item[2])) else {
                    continue;
                };
                let r = HistoryRecord {
                    kind,
                    format,
                    body: item[4..].to_vec(),
                };
                if item[3] == 0 {
                    out.push(r);
                } else {
                    open = Some(r);
                }
            }
            Some(&TAG_CONT) if item.len() >= 2 => {
                if let Some(mut r) = open.take() {
                    r.body.extend_from_slice(&item[2..]);
                    if item[1] == 0 {
                        out.push(r);
                    } else {
                        open = Some(r);
                    }
                }
            }
            _ => open = None,
        }
    }
    (head, out)
}

fn log_bytes(records: &[HistoryRecord]) -> u64 {
    records.iter().map(|r| r.body.len() as u64 + 1).sum()
}

fn encode_str(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u16).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

/// A memory item as a map value (its id is the key).
fn encode_item(it: &Item) -> Vec<u8> {
    let mut v = vec![u8::from(it.source == "auto_llm")];
    for x in [it.created_at, it.updated_at, it.access_count] {
        v.extend_from_slice(&x.to_le_bytes());
    }
    encode_str(&mut v, &it.content);
    for list in [&it.tags, &it.keywords] {
        v.push(list.len() as u8);
        for t in list {
            encode_str(&mut v, t);
        }
    }
    v
}

/// Reads a map value front to back.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let (head, tail) = (self.0.get(..n)?, self.0.get(n..)?);
        self.0 = tail;
        Some(head)
    }

    fn u8(&mut self) -> Option<u8> {
        Some(self.take(1)?[0])
    }

    fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes(self.take(4)?.try_into().ok()?))
    }

    fn string(&mut self) -> Option<String> {
        let n = u16::from_le_bytes(self.take(2)?.try_into().ok()?) as usize;
        String::from_utf8(self.take(n)?.to_vec()).ok()
    }

    fn strings(&mut self) -> Option<Vec<String>> {
        (0..self.u8()?).map(|_| self.string()).collect()
    }
}

fn decode_item(id: u32, b: &[u8]) -> Option<Item> {
    let mut r = Reader(b);
    let source = if r.u8()? == 1 { "auto_llm" } else { "manual" };
    let (created_at, updated_at, access_count) = (r.u32()?, r.u32()?, r.u32()?);
    Some(Item {
        id: u64::from(id),
        source: source.into(),
        content: r.string()?,
        tags: r.strings()?,
        keywords: r.strings()?,
        created_at,
        updated_at,
        access_count,
    })
}

fn profile_index(name: ProfileName) -> u32 {
    match name {
        ProfileName::Soul => 0,
        ProfileName::Identity => 1,
        ProfileName::User => 2,
        ProfileName::Agents => 3,
    }
}

fn profile_key(name: ProfileName, chunk: u32) -> u32 {
    PROFILE_KEY | (profile_index(name) << 8) | chunk
}

fn fnv(s: &str) -> u32 {
    let mut h: u32 = 2_166_136_261;
    for b in s.bytes() {
        h ^= u32::from(b);
        h = h.wrapping_mul(16_777_619);
    }
    h
}

// ---- the driver ----------------------------------------------------------------

#[derive(Clone, Debug)]
enum Slot {
    /// Free; `dirty` if it still holds items that are no session's.
    Free { dirty: bool },
    Used {
        session: String,
        /// The session's log size (bodies plus newlines), once read.
        log_bytes: Option<u64>,
        blocked: bool,
    },
}

/// What the peer did beyond the plain calls, for the notes.
#[derive(Clone, Copy, Debug, Default)]
struct Counters {
    /// Slots rewritten from their start because a batch did not fit.
    overflow_rewrites: u64,
    /// Compactions forced by a full slot before the limit.
    forced_compactions: u64,
    /// Compactions at the (scaled) limit after a completed turn.
    limit_compactions: u64,
    /// Sessions blocked.
    blocked: u64,
}

/// [`Driver`] of ESP-Claw's storage on `sequential-storage` (see the module
/// docs), on flash type `F` (which must allow rewriting a word: the crate's
/// pop and remove zero an item's CRC in place).
pub struct SeqStorageDriver<F: SimBacked + BlockingMultiwrite> {
    flash: AsyncNor<F>,
    layout: Layout,
    slots: Vec<Slot>,
    by_id: HashMap<String, u32>,
    next_id: u32,
    clock: u32,
    mount_reads: Vec<u64>,
    buf: Vec<u8>,
    counters: Counters,
}

impl<F: SimBacked + BlockingMultiwrite> SeqStorageDriver<F> {
    /// Lays the peer out on `flash` (which should be blank: the crate has no
    /// format step, erased flash is an empty store) and mounts it.
    pub fn new(flash: SimFlash) -> Result<Self, String> {
        let flash = F::wrap(flash).map_err(|e| e.0)?;
        let layout = Layout::new(flash.capacity(), F::ERASE_SIZE, F::WRITE_SIZE)?;
        // The crate's own checks of the ranges (every slot has the shape of
        // slot 0).
        QueueConfig::<AsyncNor<F>>::try_new(layout.slot_range(0))
            .map_err(|e| format!("queue config: {e:?}"))?;
        MapConfig::<AsyncNor<F>>::try_new(layout.map_range())
            .map_err(|e| format!("map config: {e:?}"))?;
        let mut d = SeqStorageDriver {
            flash: AsyncNor::new(flash),
            layout,
            slots: Vec::new(),
            by_id: HashMap::new(),
            next_id: 1,
            clock: 0,
            mount_reads: Vec::new(),
            buf: vec![0; layout.buf_len()],
            counters: Counters::default(),
        };
        d.mount().map_err(|e| e.to_string())?;
        Ok(d)
    }

    /// The layout in use.
    pub fn layout(&self) -> Layout {
        self.layout
    }

    /// The wrapped flash.
    pub fn nor(&self) -> &F {
        self.flash.inner()
    }

    /// The wrapped flash, mutably (for faults).
    pub fn nor_mut(&mut self) -> &mut F {
        self.flash.inner_mut()
    }

    /// Unmounts and returns the simulator.
    pub fn into_flash(self) -> SimFlash {
        self.flash.into_inner().into_sim()
    }

    fn tick(&mut self) -> u32 {
        self.clock = self.clock.wrapping_add(60);
        1_700_000_000u32.wrapping_add(self.clock)
    }

    /// Rebuilds the RAM directory from flash.
    fn mount(&mut self) -> OpResult<()> {
        let before = self.flash.inner().sim().stats().read_bytes;
        self.slots.clear();
        self.by_id.clear();
        self.next_id = 1;
        let mut buf = std::mem::take(&mut self.buf);
        let result = self.mount_with(&mut buf);
        self.buf = buf;
        let read = self.flash.inner().sim().stats().read_bytes - before;
        self.mount_reads.push(read);
        result
    }

    fn mount_with(&mut self, buf: &mut [u8]) -> OpResult<()> {
        for s in 0..self.layout.slots {
            let range = self.layout.slot_range(s);
            let first = q_peek(&mut self.flash, range, buf).map_err(|e| failed("peek", e))?;
            let slot = match first {
                None => Slot::Free { dirty: false },
                Some(item) if item.first() == Some(&TAG_HEAD) => {
                    let session = String::from_utf8_lossy(&item[1..]).into_owned();
                    self.by_id.insert(session.clone(), s);
                    Slot::Used {
                        session,
                        log_bytes: None,
                        blocked: false,
                    }
                }
                Some(_) => Slot::Free { dirty: true },
            };
            self.slots.push(slot);
        }
        let all = m_all(&mut self.flash, self.layout.map_range(), buf)
            .map_err(|e| failed("map iteration", e))?;
        for (k, v) in all {
            if k < PROFILE_KEY {
                self.next_id = self.next_id.max(k + 1);
            } else if k >= BLOCKED_KEY {
                let s = (k - BLOCKED_KEY) as usize;
                if let Some(Slot::Used {
                    session, blocked, ..
                }) = self.slots.get_mut(s)
                {
                    *blocked = session.as_bytes() == v.as_slice();
                }
            }
        }
        Ok(())
    }

    /// The records of slot `s`, checked to belong to `session`.
    fn read_slot(&mut self, s: u32, session: &str) -> OpResult<Vec<HistoryRecord>> {
        let range = self.layout.slot_range(s);
        let items = q_items(&mut self.flash, range, &mut self.buf)
            .map_err(|e| failed("queue iteration", e))?;
        let (head, records) = parse_slot(&items);
        if head.as_deref() != Some(session) {
            return Err(OpError::Failed(format!(
                "slot {s} holds {head:?}, expected {session:?}"
            )));
        }
        // What the queue holds now is the session's log.
        self.set_bytes(s, log_bytes(&records));
        Ok(records)
    }

    fn push(&mut self, s: u32, data: &[u8]) -> Result<(), SsError> {
        let range = self.layout.slot_range(s);
        q_push(&mut self.flash, range, data)
    }

    /// Takes a free slot for `session` and writes its head item.
    fn allocate(&mut self, session: &str) -> OpResult<u32> {
        let n = self.layout.slots;
        let start = fnv(session) % n;
        let Some(s) = (0..n)
            .map(|i| (start + i) % n)
            .find(|&s| matches!(self.slots[s as usize], Slot::Free { .. }))
        else {
            // The layout's room for sessions is used up: this peer's
            // out-of-space answer to a new session.
            return Err(OpError::Full(format!(
                "sequential-storage: all {n} session queues are in use"
            )));
        };
        let range = self.layout.slot_range(s);
        if let Slot::Free { dirty: true } = self.slots[s as usize] {
            q_pop_all(&mut self.flash, range.clone(), &mut self.buf)
                .map_err(|e| failed("pop", e))?;
        }
        q_push(&mut self.flash, range, &head_item(session)).map_err(|e| failed("push", e))?;
        self.slots[s as usize] = Slot::Used {
            session: session.into(),
            log_bytes: Some(0),
            blocked: false,
        };
        self.by_id.insert(session.into(), s);
        Ok(s)
    }

    /// Erases slot `s` and writes `session` with `records` into it again.
    /// `Ok(false)` if they did not fit (checked before erasing).
    fn rewrite(&mut self, s: u32, session: &str, records: &[HistoryRecord]) -> OpResult<bool> {
        let item_max = self.layout.record_item_max();
        let mut items = vec![head_item(session)];
        for r in records {
            items.extend(record_items(r, item_max));
        }
        if !self.layout.fits_fresh(items.iter().map(Vec::len)) {
            return Ok(false);
        }
        let range = self.layout.slot_range(s);
        q_erase(&mut self.flash, range).map_err(|e| failed("erase", e))?;
        for item in &items {
            self.push(s, item).map_err(|e| failed("push", e))?;
        }
        if let Slot::Used { log_bytes: b, .. } = &mut self.slots[s as usize] {
            *b = Some(log_bytes(records));
        }
        Ok(true)
    }

    /// Marks slot `s` blocked, on flash and in RAM.
    fn block(&mut self, s: u32, session: &str) -> OpResult<()> {
        m_store(
            &mut self.flash,
            self.layout.map_range(),
            &mut self.buf,
            BLOCKED_KEY | s,
            session.as_bytes(),
        )
        .map_err(|e| failed("store", e))?;
        if let Slot::Used { blocked, .. } = &mut self.slots[s as usize] {
            *blocked = true;
        }
        self.counters.blocked += 1;
        Ok(())
    }

    /// The session's log size, read from flash the first time after a mount.
    fn session_bytes(&mut self, s: u32, session: &str) -> OpResult<u64> {
        if let Slot::Used {
            log_bytes: Some(b), ..
        } = self.slots[s as usize]
        {
            return Ok(b);
        }
        Ok(log_bytes(&self.read_slot(s, session)?))
    }

    fn set_bytes(&mut self, s: u32, bytes: u64) {
        if let Slot::Used { log_bytes, .. } = &mut self.slots[s as usize] {
            *log_bytes = Some(bytes);
        }
    }

    fn map_all(&mut self) -> OpResult<BTreeMap<u32, Vec<u8>>> {
        m_all(&mut self.flash, self.layout.map_range(), &mut self.buf)
            .map_err(|e| failed("map iteration", e))
    }

    fn map_fetch(&mut self, key: u32) -> OpResult<Option<Vec<u8>>> {
        m_fetch(&mut self.flash, self.layout.map_range(), &mut self.buf, key)
            .map_err(|e| failed("fetch", e))
    }

    fn map_store(&mut self, key: u32, value: &[u8]) -> OpResult<()> {
        m_store(
            &mut self.flash,
            self.layout.map_range(),
            &mut self.buf,
            key,
            value,
        )
        .map_err(|e| failed("store", e))
    }

    fn map_remove(&mut self, key: u32) -> OpResult<()> {
        m_remove(&mut self.flash, self.layout.map_range(), &mut self.buf, key)
            .map_err(|e| failed("remove", e))
    }

    /// Every memory item on flash, newest first (ties: lowest id first).
    fn items(&mut self) -> OpResult<Vec<Item>> {
        let mut v: Vec<Item> = self
            .map_all()?
            .into_iter()
            .filter(|(k, _)| *k < PROFILE_KEY)
            .filter_map(|(k, v)| decode_item(k, &v))
            .collect();
        v.sort_by(|a, b| b.updated_at.cmp(&a.updated_at).then(a.id.cmp(&b.id)));
        Ok(v)
    }

    /// ESP-Claw's duplicate test over `items`, ignoring `except`.
    fn duplicate_of(items: &[Item], content: &str, except: Option<u64>) -> Option<u64> {
        let n = normalize(content);
        items
            .iter()
            .filter(|i| Some(i.id) != except)
            .find(|i| {
                let m = normalize(&i.content);
                key(&m) == key(&n)
                    || m == n
                    || (m.len() >= 12 && n.len() >= 12 && (m.contains(&n) || n.contains(&m)))
            })
            .map(|i| i.id)
    }

    /// Compaction's plan over `records` and what it keeps.
    fn compact(records: &[HistoryRecord], limit: u64) -> (bool, Vec<HistoryRecord>) {
        let mut plan = PlanBuilder::<COMPACT_TOOL_TURNS>::new();
        for r in records {
            plan.push(RecordType::from(r.kind), r.body.len() as u64);
        }
        let plan = plan.finish();
        let mut keep = plan.cursor();
        let kept = records
            .iter()
            .filter(|r| keep.keep_next(RecordType::from(r.kind)))
            .cloned()
            .collect();
        (plan.blocked(limit), kept)
    }
}

impl<F: SimBacked + BlockingMultiwrite> Driver for SeqStorageDriver<F> {
    fn info(&self) -> EngineInfo {
        let l = self.layout;
        let c = self.counters;
        let limit = l.session_limit();
        EngineInfo {
            engine: ENGINE.into(),
            // The driver and its slot directory (session ids on the heap
            // not counted); the crate itself keeps nothing without a cache.
            state_bytes: std::mem::size_of::<Self>()
                + self.slots.len() * std::mem::size_of::<Slot>(),
            session_limit_bytes: Some(limit),
            session_limit_scaled: limit < super::SESSION_LIMIT,
            notes: vec![
                format!(
                    "sequential-storage 8, uncached: a {}-page map, then {} session queues of {} pages of {} B",
                    l.map_pages, l.slots, l.slot_pages, l.page_bytes
                ),
                if limit < super::SESSION_LIMIT {
                    format!(
                        "session limit scaled down from {} B to {limit} B, 3/4 of a session queue's data area",
                        super::SESSION_LIMIT
                    )
                } else {
                    format!("session limit {limit} B (ESP-Claw's)")
                },
                format!(
                    "{} compactions at the limit, {} forced by a full queue, {} full queues rewritten from their start, {} sessions blocked",
                    c.limit_compactions, c.forced_compactions, c.overflow_rewrites, c.blocked
                ),
            ],
        }
    }

    fn flash(&self) -> &SimFlash {
        self.flash.inner().sim()
    }

    fn mount_read_bytes(&self) -> &[u64] {
        &self.mount_reads
    }

    fn append(
        &mut self,
        session: &str,
        records: &[TraceRecord],
        turn_completed: bool,
    ) -> OpResult<AppendOutcome> {
        let s = match self.by_id.get(session) {
            Some(&s) => s,
            None => self.allocate(session)?,
        };
        if let Slot::Used { blocked: true, .. } = self.slots[s as usize] {
            return Err(OpError::Blocked);
        }
        let limit = self.layout.session_limit();
        let item_max = self.layout.record_item_max();
        let batch: Vec<HistoryRecord> = records
            .iter()
            .map(|r| HistoryRecord {
                kind: r.kind,
                format: r.format,
                body: r.body.as_bytes().to_vec(),
            })
            .collect();
        let mut bytes = self.session_bytes(s, session)?;
        // Records of the batch pushed whole, and whether the queue filled up.
        let mut pushed = 0usize;
        let mut full = false;
        'batch: for r in &batch {
            for item in record_items(r, item_max) {
                match self.push(s, &item) {
                    Ok(()) => {}
                    Err(SsError::FullStorage) => {
                        full = true;
                        break 'batch;
                    }
                    Err(e) => return Err(failed("push", e)),
                }
            }
            pushed += 1;
        }
        if full {
            // The queue is full before the limit: what it holds, less the
            // part of the batch that made it, plus the whole batch.
            let mut all = self.read_slot(s, session)?;
            all.truncate(all.len().saturating_sub(pushed));
            all.extend(batch.iter().cloned());
            if self.rewrite(s, session, &all)? {
                self.counters.overflow_rewrites += 1;
                bytes = log_bytes(&all);
            } else {
                let (blocked, kept) = Self::compact(&all, limit);
                if blocked || !self.rewrite(s, session, &kept)? {
                    // Neither the session nor its compaction fits: the batch
                    // is refused, the session blocked.
                    self.block(s, session)?;
                    return Err(OpError::Blocked);
                }
                self.counters.forced_compactions += 1;
                return Ok(AppendOutcome {
                    compacted: true,
                    blocked: false,
                });
            }
        } else {
            bytes += log_bytes(&batch);
            self.set_bytes(s, bytes);
        }
        if !turn_completed || bytes <= limit {
            return Ok(AppendOutcome::default());
        }
        // ESP-Claw's turn-aware compaction, rewriting the session in place.
        let history = self.read_slot(s, session)?;
        let (blocked, kept) = Self::compact(&history, limit);
        if blocked {
            self.block(s, session)?;
            return Ok(AppendOutcome {
                compacted: false,
                blocked: true,
            });
        }
        if !self.rewrite(s, session, &kept)? {
            self.block(s, session)?;
            return Err(OpError::Blocked);
        }
        self.counters.limit_compactions += 1;
        Ok(AppendOutcome {
            compacted: true,
            blocked: false,
        })
    }

    fn history(&mut self, session: &str) -> OpResult<Vec<HistoryRecord>> {
        match self.by_id.get(session) {
            Some(&s) => self.read_slot(s, session),
            None => Ok(Vec::new()),
        }
    }

    fn session_delete(&mut self, session: &str) -> OpResult<()> {
        let Some(&s) = self.by_id.get(session) else {
            return Ok(());
        };
        let range = self.layout.slot_range(s);
        q_pop_all(&mut self.flash, range, &mut self.buf).map_err(|e| failed("pop", e))?;
        if let Slot::Used { blocked: true, .. } = self.slots[s as usize] {
            self.map_remove(BLOCKED_KEY | s)?;
        }
        self.slots[s as usize] = Slot::Free { dirty: false };
        self.by_id.remove(session);
        Ok(())
    }

    fn memory_store(&mut self, item: &MemoryItem<'_>) -> OpResult<MemoryStored> {
        let content = item.content.trim();
        if content.is_empty() {
            return Err(OpError::Failed("empty content".into()));
        }
        let items = self.items()?;
        if let Some(id) = Self::duplicate_of(&items, content, None) {
            return Ok(MemoryStored {
                item: ItemHandle(id),
                duplicate: true,
            });
        }
        if self.next_id >= PROFILE_KEY {
            return Err(OpError::Failed("memory item ids exhausted".into()));
        }
        let now = self.tick();
        let it = Item {
            id: u64::from(self.next_id),
            source: match item.source {
                MemorySource::Manual => "manual".into(),
                MemorySource::AutoLlm => "auto_llm".into(),
            },
            content: content.to_string(),
            tags: terms(item.tags),
            keywords: terms(item.keywords),
            created_at: now,
            updated_at: now,
            access_count: 0,
        };
        self.map_store(self.next_id, &encode_item(&it))?;
        self.next_id += 1;
        Ok(MemoryStored {
            item: ItemHandle(it.id),
            duplicate: false,
        })
    }

    fn memory_recall(&mut self, labels: &[String], limit: u32) -> OpResult<Vec<ItemHandle>> {
        Ok(self
            .items()?
            .into_iter()
            .filter(|i| i.tags.iter().any(|t| labels.contains(t)))
            .take(limit as usize)
            .map(|i| ItemHandle(i.id))
            .collect())
    }

    fn memory_update(
        &mut self,
        item: ItemHandle,
        change: &MemoryChange<'_>,
    ) -> OpResult<ItemHandle> {
        let Ok(id) = u32::try_from(item.0) else {
            return Err(OpError::Evicted);
        };
        if id >= PROFILE_KEY {
            return Err(OpError::Evicted);
        }
        let Some(v) = self.map_fetch(id)? else {
            return Err(OpError::Evicted);
        };
        let old = decode_item(id, &v)
            .ok_or_else(|| OpError::Failed(format!("memory item {id} does not decode")))?;
        let mut new = patched(&old, change);
        if new == old {
            return Ok(item);
        }
        let items = self.items()?;
        if let Some(dup) = Self::duplicate_of(&items, &new.content, Some(old.id)) {
            // As ESP-Claw: the old item goes, the duplicate names it.
            self.map_remove(id)?;
            return Ok(ItemHandle(dup));
        }
        new.updated_at = self.tick();
        self.map_store(id, &encode_item(&new))?;
        Ok(item)
    }

    fn memory_forget(&mut self, item: ItemHandle) -> OpResult<()> {
        let id = match u32::try_from(item.0) {
            Ok(id) if id < PROFILE_KEY => id,
            _ => return Err(OpError::Evicted),
        };
        if self.map_fetch(id)?.is_none() {
            return Err(OpError::Evicted);
        }
        self.map_remove(id)
    }

    fn memory_list(&mut self) -> OpResult<Vec<ItemHandle>> {
        Ok(self
            .items()?
            .into_iter()
            .map(|i| ItemHandle(i.id))
            .collect())
    }

    fn profile_write(&mut self, name: ProfileName, body: &str) -> OpResult<()> {
        // Chunk 0: the chunk count, then the first part; chunks 1.. the rest.
        // The map takes a key and its value in one page.
        let room = self.layout.item_max() - 4;
        let body = body.as_bytes();
        let first = body.len().min(room - 1);
        let rest: Vec<&[u8]> = body[first..].chunks(room).collect();
        let count = 1 + rest.len();
        if count > 255 {
            return Err(OpError::Failed(format!(
                "profile of {} B is too large for the map",
                body.len()
            )));
        }
        let old_count = self
            .map_fetch(profile_key(name, 0))?
            .and_then(|v| v.first().copied())
            .unwrap_or(1) as usize;
        for (i, chunk) in rest.iter().enumerate() {
            self.map_store(profile_key(name, i as u32 + 1), chunk)?;
        }
        let mut head = vec![count as u8];
        head.extend_from_slice(&body[..first]);
        self.map_store(profile_key(name, 0), &head)?;
        for i in count..old_count {
            self.map_remove(profile_key(name, i as u32))?;
        }
        Ok(())
    }

    fn profile_read(&mut self, name: ProfileName) -> OpResult<Option<Vec<u8>>> {
        let Some(head) = self.map_fetch(profile_key(name, 0))? else {
            return Ok(None);
        };
        let Some((&count, first)) = head.split_first() else {
            return Err(OpError::Failed("empty profile head".into()));
        };
        let mut body = first.to_vec();
        for i in 1..u32::from(count) {
            match self.map_fetch(profile_key(name, i))? {
                Some(chunk) => body.extend_from_slice(&chunk),
                None => return Err(OpError::Failed(format!("profile chunk {i} missing"))),
            }
        }
        Ok(Some(body))
    }

    fn remount(&mut self) -> OpResult<()> {
        // Nothing of the crate lives in RAM (no cache); the driver's
        // directory is dropped and rebuilt from flash.
        self.mount()
    }

    fn memory_clear(&mut self) -> OpResult<()> {
        let keys: Vec<u32> = self
            .map_all()?
            .into_keys()
            .filter(|k| *k < PROFILE_KEY)
            .collect();
        for k in keys {
            self.map_remove(k)?;
        }
        Ok(())
    }
}

// ---- the whole run -------------------------------------------------------------

/// Replays `trace` through the peer on `flash` (blank, of `preset`'s
/// model). Presets whose flash forbids rewriting a word are refused: the
/// crate's queue pop and map remove need `MultiwriteNorFlash`.
pub fn replay_preset(
    preset: Preset,
    flash: SimFlash,
    trace: &Trace,
    run: &RunOptions,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<Report, String> {
    match preset {
        Preset::Esp32 => replay_on::<Esp32Flash>(flash, trace, run, progress),
        Preset::Nrf52 => replay_on::<Nrf52Flash>(flash, trace, run, progress),
        Preset::Generic => replay_on::<GenericFlash>(flash, trace, run, progress),
        Preset::Stm32l4 | Preset::Stm32h7 | Preset::Esp32Encrypted => Err(format!(
            "the {} flash does not allow rewriting a word, and sequential-storage's queue pop \
             and map remove need MultiwriteNorFlash",
            flash.model().name
        )),
    }
}

/// Replays `trace` through the peer on flash type `F`.
pub fn replay_on<F: SimBacked + BlockingMultiwrite>(
    flash: SimFlash,
    trace: &Trace,
    run: &RunOptions,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<Report, String> {
    let mut driver = SeqStorageDriver::<F>::new(flash)?;
    Ok(replay(&mut driver, trace, run, progress))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::{Format, RecordKind};

    fn layout() -> Layout {
        Layout::new(1024 * 1024, 4096, 4).unwrap()
    }

    #[test]
    fn a_1mib_esp32_partition_has_120_two_page_queues() {
        let l = layout();
        assert_eq!((l.map_pages, l.slot_pages, l.slots), (16, 2, 120));
        assert_eq!(l.item_max(), 4096 - 8 - 8);
        assert_eq!(l.session_limit(), 2 * 4088 * 3 / 4);
        assert_eq!(l.slot_range(119).end, 1024 * 1024);
    }

    #[test]
    fn records_split_and_join_again() {
        let l = layout();
        for len in [0, 1, 2035, 2036, 2037, 4100, 9000] {
            let r = HistoryRecord {
                kind: RecordKind::ToolResult,
                format: Format::Anthropic,
                body: (0..len).map(|i| i as u8).collect(),
            };
            let mut items = vec![head_item("s")];
            items.extend(record_items(&r, l.record_item_max()));
            assert!(items.iter().all(|i| i.len() <= l.record_item_max()));
            let (head, got) = parse_slot(&items);
            assert_eq!(head.as_deref(), Some("s"));
            assert_eq!(got, vec![r.clone()], "{len}");
            // A record cut short is dropped.
            if items.len() > 2 {
                items.pop();
                assert!(parse_slot(&items).1.is_empty());
            }
        }
    }

    #[test]
    fn items_round_trip() {
        let it = Item {
            id: 7,
            source: "auto_llm".into(),
            content: "User likes green tea".into(),
            tags: vec!["drinks".into(), "tea".into()],
            keywords: vec!["green".into()],
            created_at: 1,
            updated_at: 2,
            access_count: 3,
        };
        assert_eq!(decode_item(7, &encode_item(&it)), Some(it));
        assert_eq!(decode_item(7, &[1, 2, 3]), None);
    }

    #[test]
    fn fresh_fit_counts_pages() {
        let l = layout();
        assert!(l.fits_fresh([4080, 4080]));
        assert!(!l.fits_fresh([4080, 4080, 1]));
        assert!(!l.fits_fresh([4081]));
        assert!(l.fits_fresh([2000, 2000, 2000, 2000]));
        assert!(!l.fits_fresh([2100, 2100, 2100]));
    }
}
