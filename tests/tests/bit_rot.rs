//! Damage at rest: every single-bit flip of a reference image holding
//! sessions, memory items and profiles, each mounted afresh and read in full.
//! No panic, no hang, never a wrong value: a record read back is either the
//! one written or reported damaged/missing.

use std::collections::BTreeMap;

use clawmem::memory::ItemInput;
use clawmem::profile::ProfileDoc;
use clawmem::{BackendFormat, Config, MountMode, Record, RecordType, Store};
use clawmem_sim::{Esp32EncryptedFlash, Esp32Flash, Preset, SimFlash};
use embedded_storage::nor_flash::NorFlash;

type S = Store<Esp32Flash, 8>;

/// A part the whole-image damage tests run on: the ESP32, and the ESP32
/// with flash encryption (16 B blocks, each written once).
trait Part: NorFlash + Sized {
    const PRESET: Preset;
    fn wrap(sim: SimFlash) -> Self;
    fn sim(self) -> SimFlash;
}

impl Part for Esp32Flash {
    const PRESET: Preset = Preset::Esp32;
    fn wrap(sim: SimFlash) -> Self {
        Esp32Flash::new(sim).unwrap()
    }
    fn sim(self) -> SimFlash {
        self.into_inner()
    }
}

impl Part for Esp32EncryptedFlash {
    const PRESET: Preset = Preset::Esp32Encrypted;
    fn wrap(sim: SimFlash) -> Self {
        Esp32EncryptedFlash::new(sim).unwrap()
    }
    fn sim(self) -> SimFlash {
        self.into_inner()
    }
}

fn config() -> Config {
    Config {
        session_size_limit_bytes: 2048,
        ..Config::default()
    }
}

struct Reference {
    image: SimFlash,
    sessions: BTreeMap<String, Vec<Vec<u8>>>,
    memory: Vec<String>,
    profiles: Vec<(ProfileDoc, String)>,
}

/// Sessions of the reference image.
const SESSIONS: u32 = 6;

fn reference<F: Part>() -> Reference {
    let flash = F::wrap(SimFlash::new(F::PRESET.model(32 * 4096).unwrap()));
    let mut store = Store::<F, 8>::format(flash, config()).unwrap();
    let mut sessions: BTreeMap<String, Vec<Vec<u8>>> = BTreeMap::new();
    for n in 0..150u32 {
        let id = format!("chat:rot:{}", n % SESSIONS);
        let kind = if n % 4 == 3 {
            RecordType::AssistantFinal
        } else {
            RecordType::User
        };
        let body = format!(
            "{{\"n\":{n},\"text\":\"{}\"}}",
            "r".repeat((n * 7 % 120) as usize)
        )
        .into_bytes();
        let out = store
            .append(
                &id,
                &[Record {
                    kind,
                    format: BackendFormat::OpenAiCompatible,
                    body: &body,
                }],
                kind == RecordType::AssistantFinal,
            )
            .unwrap();
        sessions.entry(id.clone()).or_default().push(body);
        if out.blocked || out.compacted {
            store.delete_session(&id).unwrap();
            sessions.remove(&id);
        }
    }
    // A long session: its 33rd append consolidates it into a base.
    for n in 0..40u32 {
        let body = format!("{{\"long\":{n}}}").into_bytes();
        store
            .append("chat:rot:long", &[user(&body)], false)
            .unwrap();
        sessions
            .entry("chat:rot:long".into())
            .or_default()
            .push(body);
    }
    let mut memory = Vec::new();
    for n in 0..30 {
        let c = format!("the user fact number {n} is {}", "f".repeat(n * 5));
        store
            .memory_store(&ItemInput::new(&c).tags("facts"), n as u32, false)
            .unwrap();
        memory.push(c.trim().to_string());
        if n == 19 {
            // An index of the first twenty, the chain after it.
            store.memory_compact().unwrap();
        }
    }
    // A recall: an access record on the memory chain.
    store.memory_recall(&["facts"], 3, 1000, |_| {}).unwrap();
    // What the store holds (duplicates merged): the reference.
    let mut held = Vec::new();
    store
        .memory_list(|i| held.push(i.content().to_string()))
        .unwrap();
    let memory = held;
    let profiles: Vec<(ProfileDoc, String)> = ProfileDoc::ALL
        .iter()
        .map(|&doc| {
            let body = format!(
                "# {doc:?}\n\n- Name: Rot\n- Likes: checksums\n{}\n",
                "- one more line\n".repeat(8)
            );
            store.profile_write(doc, &body).unwrap();
            (doc, body)
        })
        .collect();
    store.check().unwrap();
    let image = store.into_flash().sim();
    Reference {
        image,
        sessions,
        memory,
        profiles,
    }
}

/// Mounts `image` and reads everything; panics only on a wrong value.
fn read_back<F: Part>(r: &Reference, image: SimFlash, ctx: &str) -> (usize, usize) {
    let flash = F::wrap(image);
    let mut store = match Store::<F, 8>::mount(flash, config(), MountMode::ExistingOnly) {
        Ok(s) => s,
        // Nothing readable: everything is lost.
        Err(_) => {
            let all = r.sessions.values().map(Vec::len).sum::<usize>();
            return (0, all + r.memory.len() + r.profiles.len());
        }
    };
    let (mut good, mut lost) = (0, 0);
    let mut buf = vec![0u8; 64 * 1024];
    for (id, want) in &r.sessions {
        match store.history(id, BackendFormat::Unknown, &mut buf) {
            Ok(h) => {
                // Every record returned is one that was written, in order.
                let got: Vec<&[u8]> = h.iter().map(|x| x.body).collect();
                let mut w = want.iter();
                for g in &got {
                    assert!(
                        w.any(|x| x.as_slice() == *g),
                        "{ctx}: {id}: a record that was never written, or out of order: {:?}",
                        String::from_utf8_lossy(g)
                    );
                }
                good += got.len();
                lost += want.len() - got.len();
            }
            Err(e) => {
                if std::env::var("BITROT_DEBUG").is_ok() {
                    println!("{ctx}: history of {id}: {e:?}");
                }
                lost += want.len()
            }
        }
    }
    match store.memory_list(|i| {
        assert!(
            r.memory.iter().any(|m| m == i.content()),
            "{ctx}: a memory item never stored: {:?}",
            i.content()
        );
    }) {
        Ok(n) => {
            good += n;
            lost += r.memory.len().saturating_sub(n);
        }
        Err(_) => lost += r.memory.len(),
    }
    let mut doc = vec![0u8; 4096];
    for (which, want) in &r.profiles {
        match store.profile_read(*which, &mut doc) {
            Ok(n) => {
                let d = &doc[..n];
                if d == want.as_bytes() {
                    good += 1;
                } else {
                    assert!(
                        d == which.default_contents().as_bytes(),
                        "{ctx}: a {which:?} profile that was never written"
                    );
                    lost += 1;
                }
            }
            Err(_) => lost += 1,
        }
    }
    (good, lost)
}

#[test]
fn every_single_bit_flip_of_the_used_region() {
    every_flip::<Esp32Flash>();
}

/// The same on the ESP32 with flash encryption, whose 16 B write units put
/// most flips of a batch's `prev` pointer on another chunk's start
/// (`a_back_pointer_into_an_older_batch_loses_only_its_batch`), and whose
/// naming batches run on into the next sector
/// (`a_name_that_runs_on_into_the_next_sector_survives_a_flip`).
#[test]
fn every_single_bit_flip_of_the_used_region_esp32_encrypted() {
    every_flip::<Esp32EncryptedFlash>();
}

/// A session's naming batch that runs on into the next sector: every bit
/// flip of the name's part in the continuation chunk loses at most the
/// record it hit, never the session. The name is then corrected through the
/// continuation chunk's CRC; it was lost with all 40 records of the session
/// before. On the encrypted part's 16 B units the reference image holds such
/// a batch (the long session's, at sector 4).
#[test]
fn a_name_that_runs_on_into_the_next_sector_survives_a_flip() {
    let r = reference::<Esp32EncryptedFlash>();
    let img = r.image.image();
    // Chunks start at the first 16 B unit after the 24 B sector header.
    let first_chunk = 32;
    let mut continuations = 0;
    for sector in 1..32usize {
        let at = sector * 4096 + first_chunk;
        // A session batch's chunk that is not the batch's first.
        if img[at] != 0x10 || img[at + 1] & 1 != 0 {
            continue;
        }
        // Every continuation at a sector start: the long session's naming
        // batch is one (the others hold only bodies, and lose at most the
        // record hit as well).
        continuations += 1;
        for byte in at + 12..at + 12 + 16 {
            for bit in 0..8u8 {
                let mut f = r.image.clone();
                f.flip_bit(byte, bit).unwrap();
                let (_, lost) =
                    read_back::<Esp32EncryptedFlash>(&r, f, &format!("0x{byte:x} bit {bit}"));
                assert!(lost <= 1, "flip 0x{byte:x} bit {bit}: {lost} lost");
            }
        }
    }
    assert!(
        continuations >= 1,
        "the image has no batch that runs on into a sector"
    );
}

fn every_flip<F: Part>() {
    let r = reference::<F>();
    if let Ok(path) = std::env::var("BITROT_DUMP") {
        std::fs::write(path, r.image.image()).unwrap();
    }
    let used: usize = {
        // Flip bits only where something was written (erased bytes flipped
        // read as garbage after the log's end, which mount also handles, but
        // the written region is where values could go wrong).
        let img = r.image.image();
        img.iter().rposition(|b| *b != 0xFF).unwrap_or(0) + 1
    };
    let mut flips = 0u64;
    let mut total_lost = 0usize;
    let mut spread = BTreeMap::new();
    // Flips that lost more than the one record they hit.
    let mut spread_out = Vec::new();
    // Every bit of every written byte.
    for addr in 0..used {
        for bit in 0..8u8 {
            let mut img = r.image.clone();
            img.flip_bit(addr, bit).unwrap();
            let (_, lost) = read_back::<F>(&r, img, &format!("flip 0x{addr:x} bit {bit}"));
            total_lost += lost;
            *spread.entry(lost.min(10)).or_insert(0u64) += 1;
            if lost > 1 {
                spread_out.push(format!("0x{addr:x} bit {bit}: {lost} lost"));
            }
            flips += 1;
        }
    }
    println!(
        "{}: {flips} single-bit flips over {used} written bytes; {total_lost} records or documents reported lost in total",
        F::PRESET.name()
    );
    println!("flips by records lost (10 = 10 or more): {spread:?}");
    assert!(used >= 16 * 1024, "the reference image holds only {used} B");
    assert!(flips >= 16 * 1024 * 8);
    // Damage stays with the record it hit: a session's first batch (its
    // name), a chunk length, a sector header or a document's key included.
    assert!(
        spread_out.is_empty(),
        "{} flips lost more than one record: {:?}",
        spread_out.len(),
        &spread_out[..spread_out
            .len()
            .min(if std::env::var("BITROT_DEBUG").is_ok() {
                usize::MAX
            } else {
                20
            })]
    );
}

fn exercise(image: SimFlash) {
    let flash = Esp32Flash::new(image).unwrap();
    let Ok(mut store) = S::mount(flash, config(), MountMode::ExistingOnly) else {
        return;
    };
    let mut buf = vec![0u8; 64 * 1024];
    for id in ["chat:rot:0", "chat:rot:1", "chat:rot:5", "chat:none"] {
        let _ = store.history(id, BackendFormat::AnthropicCompatible, &mut buf);
    }
    let _ = store.for_each_session(|_, _| {});
    let _ = store.memory_list(|_| {});
    let _ = store.memory_catalog(|_, _| {});
    let _ = store.memory_recall(&["facts"], 8, 99, |_| {});
    let mut md = String::new();
    let _ = store.write_memory_md(&mut md);
    let mut doc = vec![0u8; 4096];
    let _ = store.profile_read(ProfileDoc::User, &mut doc);
    let _ = store.append(
        "chat:rot:1",
        &[Record {
            kind: RecordType::User,
            format: BackendFormat::Unknown,
            body: b"{\"after\":1}",
        }],
        true,
    );
    let _ = store.memory_store(
        &ItemInput::new("after the damage").tags("facts"),
        100,
        false,
    );
    let _ = store.check();
}

#[test]
fn random_damage_never_panics_or_hangs() {
    let r = reference::<Esp32Flash>();
    let img = r.image.image();
    let used = img.iter().rposition(|b| *b != 0xFF).unwrap_or(0) + 1;
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut rnd = move |m: u64| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x % m
    };
    for case in 0..1500u32 {
        let mut bytes = img.clone();
        let n = 1 + rnd(48) as usize;
        for _ in 0..n {
            let last = bytes.len() - 1;
            let at = (rnd(used as u64 + 64) as usize).min(last);
            bytes[at] = rnd(256) as u8;
        }
        let sim = SimFlash::from_image(r.image.model(), &bytes).unwrap();
        let result = std::panic::catch_unwind(|| exercise(sim));
        assert!(result.is_ok(), "case {case} panicked");
    }
    // Entirely random images, and random bytes after valid sector headers.
    for case in 0..300u32 {
        let mut bytes: Vec<u8> = (0..img.len()).map(|_| rnd(256) as u8).collect();
        if case % 2 == 0 {
            for s in 0..32 {
                bytes[s * 4096..s * 4096 + 24].copy_from_slice(&img[s * 4096..s * 4096 + 24]);
            }
        }
        let sim = SimFlash::from_image(r.image.model(), &bytes).unwrap();
        let result = std::panic::catch_unwind(|| exercise(sim));
        assert!(result.is_ok(), "random image {case} panicked");
    }
}

/// A flipped bit in a batch's kind byte can name a deletion (0x10 to 0x12):
/// the mount checks the CRC of every deletion, block, tombstone and access
/// record before applying it, so the session keeps its other records.
#[test]
fn a_flipped_kind_byte_does_not_delete_a_session() {
    let flash = Esp32Flash::new(SimFlash::new(Preset::Esp32.model(16 * 4096).unwrap())).unwrap();
    let mut store = S::format(flash, config()).unwrap();
    let append = |store: &mut S, body: &[u8]| {
        store
            .append(
                "chat:rot:kind",
                &[Record {
                    kind: RecordType::User,
                    format: BackendFormat::Unknown,
                    body,
                }],
                false,
            )
            .unwrap();
    };
    append(&mut store, b"{\"first\":\"kept\"}");
    let second = b"{\"second\":\"the batch whose kind byte rots\"}";
    append(&mut store, second);
    append(&mut store, b"{\"third\":\"kept\"}");
    let image = store.into_flash().into_inner();
    let bytes = image.image();
    let body_at = bytes
        .windows(second.len())
        .position(|w| w == second)
        .unwrap();
    // The batch's chunk header: the last word-aligned SESSION_BATCH kind
    // byte before the body.
    let kind_at = (body_at.saturating_sub(64)..body_at)
        .rev()
        .find(|&p| p % 4 == 0 && bytes[p] == 0x10)
        .unwrap();
    let mut store = mount_flipped(&image, kind_at, 1, config()).unwrap();
    let mut buf = vec![0u8; 4096];
    let h = store
        .history("chat:rot:kind", BackendFormat::Unknown, &mut buf)
        .expect("the session survives");
    let bodies: Vec<&[u8]> = h.iter().map(|r| r.body).collect();
    assert_eq!(
        bodies,
        [&b"{\"first\":\"kept\"}"[..], b"{\"third\":\"kept\"}"]
    );
    assert_eq!(store.mount_report().ignored_batches, 1);
}

/// A memory item hit by bit rot is left out and counted; the others are
/// listed, recalled and stored around it, and compaction drops it. Without
/// this, one damaged item made every memory call fail.
#[test]
fn a_damaged_memory_item_is_confined() {
    let flash = Esp32Flash::new(SimFlash::new(Preset::Esp32.model(16 * 4096).unwrap())).unwrap();
    let mut store = S::format(flash, config()).unwrap();
    for n in 0..10u32 {
        let c = format!("fact {n}: the user keeps {n} plants on the windowsill");
        store
            .memory_store(&ItemInput::new(&c).tags("plants"), n, false)
            .unwrap();
    }
    let image = store.into_flash().into_inner();
    let needle = b"fact 4: the user keeps";
    let at = image
        .image()
        .windows(needle.len())
        .position(|w| w == needle)
        .unwrap();
    let mut store = mount_flipped(&image, at + 3, 0, config()).unwrap();
    let mut listed = Vec::new();
    let n = store
        .memory_list(|i| listed.push(i.content().to_string()))
        .unwrap();
    assert_eq!(n, 9);
    assert!(!listed.iter().any(|c| c.starts_with("fact 4")));
    assert!(store.memory_damaged_reads() > 0);
    let recalled = store.memory_recall(&["plants"], 20, 50, |_| {}).unwrap();
    assert_eq!(recalled, 9);
    store
        .memory_store(
            &ItemInput::new("the user waters them on sundays").tags("plants"),
            60,
            false,
        )
        .unwrap();
    store.memory_compact().unwrap();
    let before = store.memory_damaged_reads();
    assert_eq!(store.memory_list(|_| {}).unwrap(), 10);
    assert_eq!(
        store.memory_damaged_reads(),
        before,
        "compaction dropped the damaged item"
    );
}

/// A memory record whose chunk header rots is lost, and only it: the mount
/// follows the chain through it to the records written after it (each
/// links to the one before, and the rotten one still links to the head).
#[test]
fn a_rotten_memory_record_header_loses_only_that_record() {
    let image = six_notes("the user collects stamps from {n} countries", "stamps");
    let kind_at = put_header_before(&image, b"note 2: the user");
    // 0x34 -> 0x74: no kind at all.
    let mut store = mount_flipped(&image, kind_at, 6, config()).unwrap();
    let mut listed = Vec::new();
    store
        .memory_list(|i| listed.push(i.content()[..6].to_string()))
        .unwrap();
    listed.sort();
    assert_eq!(listed, ["note 0", "note 1", "note 3", "note 4", "note 5"]);
    assert!(store.memory_damaged_reads() > 0);
}

/// A record length that rots into a huge one (a varint's continuation bit
/// flipped): the history drops that batch and returns the others, instead
/// of asking for a buffer of megabytes.
#[test]
fn a_rotten_record_length_drops_only_its_batch() {
    let flash = Esp32Flash::new(SimFlash::new(Preset::Esp32.model(16 * 4096).unwrap())).unwrap();
    let mut store = S::format(flash, config()).unwrap();
    let body = |n: u32| format!("{{\"n\":{n},\"text\":\"{}\"}}", "q".repeat(120)).into_bytes();
    for n in 0..5u32 {
        let b = body(n);
        assert!(b.len() >= 128, "a two-byte length");
        store
            .append(
                "chat:rot:len",
                &[Record {
                    kind: RecordType::User,
                    format: BackendFormat::Unknown,
                    body: &b,
                }],
                false,
            )
            .unwrap();
    }
    let image = store.into_flash().into_inner();
    let third = body(2);
    let at = image
        .image()
        .windows(third.len())
        .position(|w| w == third.as_slice())
        .unwrap();
    // The length's last byte, just before the body: set its continuation
    // bit.
    let mut store = mount_flipped(&image, at - 1, 7, config()).unwrap();
    let mut buf = vec![0u8; 64 * 1024];
    let h = store
        .history("chat:rot:len", BackendFormat::Unknown, &mut buf)
        .expect("the other batches read");
    let got: Vec<Vec<u8>> = h.iter().map(|r| r.body.to_vec()).collect();
    assert_eq!(got, [body(0), body(1), body(3), body(4)]);
}

/// A memory record whose link rots: the mount knows the record before it
/// (the chain's head when it was written), repairs the link in RAM and
/// compacts memory so the repair is on flash; only that record is lost, now
/// and after the next mount.
#[test]
fn a_rotten_memory_link_loses_only_that_record() {
    let image = six_notes("the user speaks {n} languages at home", "languages");
    let header_at = put_header_before(&image, b"note 2: the user");
    // The link is the first word of the payload, after the 12-byte header.
    let names = |store: &mut S| {
        let mut v = Vec::new();
        store
            .memory_list(|i| v.push(i.content()[..6].to_string()))
            .unwrap();
        v.sort();
        v
    };
    let mut store = mount_flipped(&image, header_at + 12 + 1, 3, config()).unwrap();
    let want = ["note 0", "note 1", "note 3", "note 4", "note 5"];
    assert_eq!(names(&mut store), want);
    store.check().unwrap();
    let flash = store.into_flash();
    let mut store = S::mount(flash, config(), MountMode::ExistingOnly).unwrap();
    assert_eq!(names(&mut store), want, "after a second mount");
}

/// Where the chunk header of the memory put holding `content` starts: the
/// last word-aligned put kind byte (0x30 or, for an item that replaced
/// none, 0x34; with its first-and-last flags) before the content.
fn put_header_before(image: &SimFlash, content: &[u8]) -> usize {
    let bytes = image.image();
    let at = bytes
        .windows(content.len())
        .position(|w| w == content)
        .expect("the content is on flash");
    (at.saturating_sub(96)..at)
        .rev()
        .find(|&p| p % 4 == 0 && matches!(bytes[p], 0x30 | 0x34) && bytes[p + 1] == 0x03)
        .expect("a memory put header before it")
}

/// An image holding six memory items, `note N: <text>` (`{n}` in `text`
/// becomes N), tagged `tag`.
fn six_notes(text: &str, tag: &str) -> SimFlash {
    let flash = Esp32Flash::new(SimFlash::new(Preset::Esp32.model(16 * 4096).unwrap())).unwrap();
    let mut store = S::format(flash, config()).unwrap();
    for n in 0..6u32 {
        let c = format!("note {n}: {}", text.replace("{n}", &n.to_string()));
        store
            .memory_store(&ItemInput::new(&c).tags(tag), n, false)
            .unwrap();
    }
    store.into_flash().into_inner()
}

/// Mounts a copy of `image` with bit `bit` of byte `at` flipped.
fn mount_flipped(
    image: &SimFlash,
    at: usize,
    bit: u8,
    config: Config,
) -> Result<S, clawmem::Error<clawmem_sim::SimError>> {
    let mut rotten = image.clone();
    rotten.flip_bit(at, bit).unwrap();
    S::mount(
        Esp32Flash::new(rotten).unwrap(),
        config,
        MountMode::ExistingOnly,
    )
}

fn user(body: &[u8]) -> Record<'_> {
    Record {
        kind: RecordType::User,
        format: BackendFormat::Unknown,
        body,
    }
}

/// Checkpoints every few KiB.
fn busy_config() -> Config {
    Config {
        checkpoint_interval_bytes: 0,
        session_size_limit_bytes: 16 * 1024,
        ..Config::default()
    }
}

const NAMED: [&[u8]; 4] = [
    b"{\"named\":0,\"text\":\"in the first batch\"}",
    b"{\"named\":1}",
    b"{\"named\":2}",
    b"{\"named\":3}",
];

/// `chat:named` (four records, its first batch written first), then enough
/// of `chat:other` for checkpoints to list it. Returns the image and where
/// `chat:named`'s first batch starts.
fn named_image() -> (SimFlash, usize) {
    let flash = Esp32Flash::new(SimFlash::new(Preset::Esp32.model(32 * 4096).unwrap())).unwrap();
    let mut store = S::format(flash, busy_config()).unwrap();
    store
        .append("chat:named", &[user(NAMED[0])], false)
        .unwrap();
    for n in 0..30 {
        let body = format!("{{\"other\":{n},\"text\":\"{}\"}}", "o".repeat(120));
        store
            .append("chat:other", &[user(body.as_bytes())], false)
            .unwrap();
    }
    for body in &NAMED[1..] {
        store.append("chat:named", &[user(body)], false).unwrap();
    }
    let image = store.into_flash().into_inner();
    let bytes = image.image();
    let id_at = bytes.windows(10).position(|w| w == b"chat:named").unwrap();
    // Chunk header (12), uid, prev, count byte, id length: then the id.
    (image, id_at - 10 - 12)
}

fn names(store: &mut S) -> (Vec<String>, usize) {
    let mut names = Vec::new();
    let lost = store
        .for_each_session(|id, _| names.push(id.to_string()))
        .unwrap();
    names.sort();
    (names, lost)
}

fn bodies(
    store: &mut S,
    id: &str,
) -> Result<(Vec<Vec<u8>>, u32), clawmem::Error<clawmem_sim::SimError>> {
    let mut buf = vec![0u8; 64 * 1024];
    let h = store.history(id, BackendFormat::Unknown, &mut buf)?;
    Ok((
        h.iter().map(|r| r.body.to_vec()).collect(),
        h.damaged_records(),
    ))
}

/// A session's first batch holds the only copy of its name. When a bit of
/// that name, of its CRC or of the uid rots in a session a checkpoint
/// already lists, a lookup still finds the session: the flipped bit is
/// located by the batch's CRC and the correction confirmed by the name's
/// own CRC. Only that batch's record is lost. The read rebuilds the
/// session's index under the right name, so the next mount meets no damage.
#[test]
fn a_session_whose_name_rots_is_still_found_and_repaired() {
    let (image, batch) = named_image();
    let id_len = 10;
    // uid (4 bytes), then the id and the CRC after it.
    let mut bits = (batch + 12..batch + 16).collect::<Vec<_>>();
    bits.extend(batch + 22..batch + 22 + id_len + 4);
    let want: Vec<Vec<u8>> = NAMED[1..].iter().map(|b| b.to_vec()).collect();
    for at in bits {
        for bit in 0..8u8 {
            let ctx = format!("flip 0x{at:x} bit {bit}");
            let mut store = mount_flipped(&image, at, bit, busy_config()).expect(&ctx);
            // The checkpoint lists the session: the mount did not read its
            // first batch.
            assert_eq!(store.mount_report().recovered_names, 0, "{ctx}");
            assert_eq!(
                names(&mut store),
                (vec!["chat:named".to_string(), "chat:other".to_string()], 0),
                "{ctx}"
            );
            let (got, damaged) = bodies(&mut store, "chat:named").expect(&ctx);
            assert_eq!(got, want, "{ctx}");
            assert_eq!(damaged, 1, "{ctx}");
            // The read rebuilt the session under its name: a fresh mount
            // finds it whole, with no damage left.
            let flash = store.into_flash();
            let mut store = S::mount(flash, busy_config(), MountMode::ExistingOnly).unwrap();
            let (got, damaged) = bodies(&mut store, "chat:named").expect(&ctx);
            assert_eq!((got, damaged), (want.clone(), 0), "{ctx}: after the repair");
            store.check().expect(&ctx);
        }
    }
}

/// A session whose name is damaged beyond repair (two flipped bits) can be
/// neither listed nor found. Garbage collection drops it when the ring
/// reaches it, instead of failing every later write for want of a name to
/// relocate it under.
#[test]
fn a_session_whose_name_is_lost_does_not_stop_garbage_collection() {
    let (mut image, batch) = named_image();
    image.flip_bit(batch + 22, 0).unwrap();
    image.flip_bit(batch + 22 + 10, 3).unwrap();
    let mut store = S::mount(
        Esp32Flash::new(image).unwrap(),
        busy_config(),
        MountMode::ExistingOnly,
    )
    .unwrap();
    assert_eq!(names(&mut store), (vec!["chat:other".to_string()], 1));
    assert!(matches!(
        store.history("chat:named", BackendFormat::Unknown, &mut [0u8; 4096]),
        Err(clawmem::Error::NotFound)
    ));
    // Four times the partition: the ring turns over and over. Sessions are
    // deleted as they fill, as a device's agent would.
    let mut last = Vec::new();
    for n in 0..2000u32 {
        let id = format!("chat:turn:{}", n / 40);
        let body = format!("{{\"turn\":{n},\"text\":\"{}\"}}", "t".repeat(200));
        store
            .append(&id, &[user(body.as_bytes())], true)
            .unwrap_or_else(|e| panic!("append {n}: {e:?}"));
        if n % 40 == 39 && n < 1960 {
            store.delete_session(&id).unwrap();
        }
        if n >= 1960 {
            last.push(body.into_bytes());
        }
    }
    assert_eq!(store.damaged_sessions_dropped(), 1);
    assert_eq!(names(&mut store).1, 0);
    let flash = store.into_flash();
    let mut store = S::mount(flash, busy_config(), MountMode::ExistingOnly).unwrap();
    assert_eq!(bodies(&mut store, "chat:turn:49").unwrap(), (last, 0));
    assert_eq!(names(&mut store).1, 0);
    store.check().unwrap();
}

/// Every bit of the head sector's header: the mount finds the head all the
/// same (its chunks are sound and newer than the sector before it), seals
/// it, and goes on writing in the next sector; nothing is lost.
#[test]
fn a_rotten_head_sector_header_loses_nothing() {
    let (image, _) = named_image();
    let bytes = image.image();
    let head = (0..32)
        .rev()
        .find(|s| bytes[s * 4096..s * 4096 + 24].iter().any(|b| *b != 0xFF))
        .unwrap();
    let want: Vec<Vec<u8>> = NAMED.iter().map(|b| b.to_vec()).collect();
    for at in head * 4096..head * 4096 + 24 {
        for bit in 0..8u8 {
            let ctx = format!("flip 0x{at:x} bit {bit}");
            let mut store = mount_flipped(&image, at, bit, busy_config()).expect(&ctx);
            assert_eq!(store.mount_report().damaged_headers, 1, "{ctx}");
            assert_eq!(
                bodies(&mut store, "chat:named").expect(&ctx),
                (want.clone(), 0),
                "{ctx}"
            );
            store
                .append("chat:named", &[user(b"{\"after\":1}")], false)
                .expect(&ctx);
            let flash = store.into_flash();
            let mut store = S::mount(flash, busy_config(), MountMode::ExistingOnly).expect(&ctx);
            let (got, _) = bodies(&mut store, "chat:named").expect(&ctx);
            assert_eq!(got.len(), 5, "{ctx}");
            assert_eq!(
                bodies(&mut store, "chat:other").expect(&ctx).0.len(),
                30,
                "{ctx}"
            );
            // The damage is still on flash, and `check()` reports it.
            assert!(
                matches!(
                    store.check(),
                    Err(clawmem::Error::Corrupted {
                        what: "a sector in use has a wrong or missing header",
                        ..
                    })
                ),
                "{ctx}"
            );
        }
    }
}

/// Every bit of a memory index: at most the item whose entry was hit is
/// lost. An index that fails its CRC is read entry by entry, each entry kept when the put it names checks
/// out and holds its id; an index the mount passed by is found through the
/// record linking to it. The mount then compacts memory, so a second mount
/// meets a sound index.
#[test]
fn a_rotten_memory_index_loses_at_most_the_entry_hit() {
    let flash = Esp32Flash::new(SimFlash::new(Preset::Esp32.model(16 * 4096).unwrap())).unwrap();
    let mut store = S::format(flash, config()).unwrap();
    let mut want = Vec::new();
    for n in 0..11u32 {
        let c = format!("indexed note {n}: {}", "i".repeat(n as usize * 3));
        store
            .memory_store(&ItemInput::new(&c).tags("idx"), n, false)
            .unwrap();
        want.push(c.trim().to_string());
        if n == 7 {
            store.memory_compact().unwrap();
        }
    }
    want.sort();
    let image = store.into_flash().into_inner();
    let bytes = image.image();
    // The index: the only chunk of kind 0x33, first and last in one.
    let index = (0..bytes.len())
        .step_by(4)
        .find(|&p| bytes[p] == 0x33 && bytes[p + 1] & 0x0F == 0x03)
        .expect("an index chunk");
    let len = usize::from(u16::from_le_bytes([bytes[index + 2], bytes[index + 3]]));
    let list = |store: &mut S| {
        let mut got = Vec::new();
        store
            .memory_list(|i| got.push(i.content().to_string()))
            .unwrap();
        got.sort();
        got
    };
    for at in index..index + 12 + len {
        for bit in 0..8u8 {
            let ctx = format!("flip 0x{at:x} bit {bit}");
            let mut store = mount_flipped(&image, at, bit, config()).expect(&ctx);
            // At most the item whose entry the flip hit (its id or its
            // put's address no longer match) is missing; never a stranger.
            let got = list(&mut store);
            assert!(got.iter().all(|g| want.contains(g)), "{ctx}: {got:?}");
            assert!(got.len() + 1 >= want.len(), "{ctx}: {got:?}");
            let flash = store.into_flash();
            let mut store = S::mount(flash, config(), MountMode::ExistingOnly).expect(&ctx);
            assert!(!store.mount_report().salvaged_memory_index, "{ctx}");
            assert_eq!(list(&mut store), got, "{ctx}: second mount");
        }
    }
}

/// A chunk of the reference image: its address, kind, flags, payload length
/// and the size it takes.
#[derive(Clone, Copy)]
struct RawChunk {
    at: usize,
    kind: u8,
    first: bool,
    len: usize,
    size: usize,
}

/// Every chunk of `img`, sector by sector, found by walking the chunk
/// headers (write unit `w`; the sector header padded to it).
fn chunks(img: &[u8], w: usize) -> Vec<RawChunk> {
    let sector = 4096;
    let first = 24usize.div_ceil(w) * w;
    let mut out = Vec::new();
    for start in (0..img.len()).step_by(sector) {
        let end = start + sector;
        let mut pos = start + first;
        while pos + 12 <= end && img[pos] != 0xFF {
            let len = ((img[pos + 1] as usize >> 4) << 16)
                | u16::from_le_bytes([img[pos + 2], img[pos + 3]]) as usize;
            let size = (12 + len).div_ceil(w) * w;
            if pos + size > end {
                break;
            }
            out.push(RawChunk {
                at: pos,
                kind: img[pos],
                first: img[pos + 1] & 1 != 0,
                len,
                size,
            });
            pos += size;
        }
    }
    out
}

fn u32_at(img: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(img[at..at + 4].try_into().unwrap())
}

/// Sets the `len` bytes at `at` to `value` by flipping the bits that differ
/// (rot at rest: no flash call, no counter moves).
fn rot_to(image: &mut SimFlash, at: usize, value: &[u8]) {
    let now = image.image();
    for (i, want) in value.iter().enumerate() {
        let diff = now[at + i] ^ want;
        for bit in 0..8u8 {
            if diff & (1 << bit) != 0 {
                image.flip_bit(at + i, bit).unwrap();
            }
        }
    }
}

/// Records lost from the reference's sessions, read three ways from
/// `image`: whole reads on a fresh mount, streamed reads on another fresh
/// mount, and whole reads on a mount after the first one's reads repaired
/// what they found.
fn session_losses<F: Part>(r: &Reference, image: &SimFlash) -> [usize; 3] {
    fn check(id: &str, want: &[Vec<u8>], got: &[Vec<u8>], how: &str) -> usize {
        let mut w = want.iter();
        for g in got {
            assert!(
                w.any(|x| x == g),
                "{how}: {id}: a record never written, or out of order"
            );
        }
        want.len() - got.len()
    }
    let mount = |img: SimFlash| {
        Store::<F, 8>::mount(F::wrap(img), config(), MountMode::ExistingOnly)
            .expect("the damaged image mounts")
    };
    // The whole read through a buffer of the size it asks for, as a
    // firmware lends it: a read that finds the chain again must ask for
    // more room, not count what does not fit as damaged.
    let whole = |store: &mut Store<F, 8>, how: &str| {
        let mut lost = 0;
        for (id, want) in &r.sessions {
            let mut buf = vec![0u8; 1];
            let mut got: Vec<Vec<u8>> = Vec::new();
            for _ in 0..8 {
                let read = store
                    .history(id, BackendFormat::Unknown, &mut buf)
                    .map(|h| h.iter().map(|x| x.body.to_vec()).collect::<Vec<_>>());
                match read {
                    Ok(g) => {
                        got = g;
                        break;
                    }
                    Err(clawmem::Error::BufferTooSmall { needed }) if needed > buf.len() => {
                        buf = vec![0u8; needed];
                    }
                    Err(_) => break,
                }
            }
            lost += check(id, want, &got, how);
        }
        lost
    };
    let mut store = mount(image.clone());
    let read = whole(&mut store, "whole");
    let mut store = mount(store.into_flash().sim());
    let repaired = whole(&mut store, "after the repair");
    let mut store = mount(image.clone());
    let mut streamed = 0;
    let mut buf = vec![0u8; 64 * 1024];
    for (id, want) in &r.sessions {
        let mut got = Vec::new();
        if let Ok(mut st) = store.history_stream(id, BackendFormat::Unknown, &mut buf) {
            while let Some(rec) = store.history_next(&mut st, &mut buf).unwrap() {
                got.push(rec.body.to_vec());
            }
        }
        streamed += check(id, want, &got, "streamed");
    }
    [read, streamed, repaired]
}

/// Rots the bytes at `offset` of the session batch whose first chunk is at
/// `at` into `value`, and checks that every read (whole, streamed, after the
/// repair) loses at most that batch's records.
fn loses_only_its_batch<F: Part>(r: &Reference, at: usize, offset: usize, value: &[u8], ctx: &str) {
    let records = (r.image.image()[at + 12 + 8] & 0x1F) as usize;
    let mut damaged = r.image.clone();
    rot_to(&mut damaged, at + offset, value);
    let [read, streamed, repaired] = session_losses::<F>(r, &damaged);
    assert!(read <= records, "{ctx}: {read} lost");
    assert!(streamed <= records, "{ctx}: streamed: {streamed} lost");
    assert!(
        repaired <= records,
        "{ctx}: after the repair: {repaired} lost"
    );
}

/// A session batch whose `prev` rots into the address of an older batch of
/// the same session (on 16 B write units most flips of it land on a chunk
/// start): the walk back from the head would pass over the batch in
/// between with no sign of damage. The damaged batch fails its CRC; its
/// pointer is then doubted too and the chain found again by a scan of the
/// log, so only the damaged batch's records are lost: in a whole read, a
/// streamed one, and after the read's repair of the index.
fn back_pointer_into_an_older_batch<F: Part>(w: usize) {
    let r = reference::<F>();
    let img = r.image.image();
    let all = chunks(&img, w);
    let batch_at = |a: u32| {
        all.iter()
            .find(|c| c.at == a as usize && c.first && (c.kind == 0x10 || c.kind == 0x11))
    };
    let mut cases = 0;
    for b in all.iter().filter(|c| c.kind == 0x10 && c.first) {
        let uid = u32_at(&img, b.at + 12);
        let Some(p) = batch_at(u32_at(&img, b.at + 16)).filter(|p| p.kind == 0x10) else {
            continue;
        };
        if u32_at(&img, p.at + 12) != uid {
            continue;
        }
        let older = u32_at(&img, p.at + 16);
        if batch_at(older).is_none_or(|o| u32_at(&img, o.at + 12) != uid) {
            continue;
        }
        let ctx = format!("{}: prev of 0x{:x} -> 0x{older:x}", F::PRESET.name(), b.at);
        loses_only_its_batch::<F>(&r, b.at, 16, &older.to_le_bytes(), &ctx);
        cases += 1;
    }
    assert!(
        cases >= 20,
        "{}: only {cases} batches to damage",
        F::PRESET.name()
    );
}

#[test]
fn a_back_pointer_into_an_older_batch_loses_only_its_batch() {
    back_pointer_into_an_older_batch::<Esp32Flash>(4);
    back_pointer_into_an_older_batch::<Esp32EncryptedFlash>(16);
}

/// A chunk whose length rots so that the chunk reaches its sector's end:
/// the scan that finds a chain again must not take that chunk's word for
/// it (it passes over every chunk after it in the sector) unless its CRC
/// checks out. Every session batch's length is so damaged in turn; only
/// that batch's records may be lost, however the reads find the chain.
fn length_to_the_sectors_end<F: Part>(w: usize) {
    let r = reference::<F>();
    let img = r.image.image();
    let mut cases = 0;
    for c in chunks(&img, w)
        .into_iter()
        .filter(|c| c.kind == 0x10 && c.first)
    {
        let end = c.at - c.at % 4096 + 4096;
        if c.at + c.size == end {
            continue;
        }
        let len = end - c.at - 12;
        if len >> 16 != c.len >> 16 {
            continue;
        }
        let ctx = format!("{}: length of 0x{:x} -> {len}", F::PRESET.name(), c.at);
        loses_only_its_batch::<F>(&r, c.at, 2, &(len as u16).to_le_bytes(), &ctx);
        cases += 1;
    }
    assert!(
        cases >= 20,
        "{}: only {cases} batches to damage",
        F::PRESET.name()
    );
}

#[test]
fn a_length_that_reaches_the_sectors_end_loses_only_its_batch() {
    length_to_the_sectors_end::<Esp32Flash>(4);
    length_to_the_sectors_end::<Esp32EncryptedFlash>(16);
}

/// A store whose sessions' batches cross sector ends: `pad` bytes of a
/// first record shift every later batch, so that over a range of pads the
/// chunks that end a sector, or continue a batch in the next one, take
/// many lengths (a power of two among them). Returns the image and what
/// each session holds.
fn crossing_image(pad: usize) -> (SimFlash, BTreeMap<String, Vec<Vec<u8>>>) {
    let flash = Esp32Flash::new(SimFlash::new(Preset::Esp32.model(8 * 4096).unwrap())).unwrap();
    let mut store = S::format(flash, config()).unwrap();
    let mut sessions: BTreeMap<String, Vec<Vec<u8>>> = BTreeMap::new();
    let mut put = |store: &mut S, id: &str, body: Vec<u8>| {
        store.append(id, &[user(&body)], false).unwrap();
        sessions.entry(id.to_string()).or_default().push(body);
    };
    put(&mut store, "chat:pad", "p".repeat(pad + 1).into_bytes());
    for n in 0..60u32 {
        let body = format!(
            "{{\"n\":{n},\"text\":\"{}\"}}",
            "x".repeat(60 + (n * 13 % 50) as usize)
        );
        put(
            &mut store,
            &format!("chat:cross:{}", n % 4),
            body.into_bytes(),
        );
    }
    store.check().unwrap();
    (store.into_flash().into_inner(), sessions)
}

/// A session batch's chunk at a sector end (its first, not its last) or
/// the continuation after it, whose length or flags byte rots by one bit:
/// the chunk fails its CRC, and no read may return a record that was not
/// written (a length rotted to 0 once let the verified read skip that
/// chunk's CRC and read the bodies at a shifted offset).
#[test]
fn a_rotten_length_of_a_chunk_that_crosses_a_sector_end_returns_no_wrong_record() {
    let (mut flips, mut to_zero) = (0, [0; 2]);
    for pad in (0..160).step_by(4) {
        let (image, sessions) = crossing_image(pad);
        let img = image.image();
        let all = chunks(&img, 4);
        for c in all.iter().filter(|c| c.kind == 0x10 && c.first) {
            let end = c.at - c.at % 4096 + 4096;
            if c.at + c.size != end || img[c.at + 1] & 2 != 0 {
                continue;
            }
            // Its continuation: the next sector's first chunk.
            let Some(cont) = all.iter().find(|n| n.at == end + 24) else {
                continue;
            };
            for (k, at) in [c.at, cont.at].into_iter().enumerate() {
                for byte in 1..4 {
                    for bit in 0..8u8 {
                        let mut rotten = image.clone();
                        rotten.flip_bit(at + byte, bit).unwrap();
                        let h = rotten.image();
                        let len = ((h[at + 1] as usize >> 4) << 16)
                            | u16::from_le_bytes([h[at + 2], h[at + 3]]) as usize;
                        to_zero[k] += usize::from(len == 0);
                        let ctx = format!("pad {pad}: flip 0x{:x} bit {bit}", at + byte);
                        let Ok(mut store) = S::mount(
                            Esp32Flash::new(rotten).unwrap(),
                            config(),
                            MountMode::ExistingOnly,
                        ) else {
                            continue;
                        };
                        let mut buf = vec![0u8; 64 * 1024];
                        for (id, want) in &sessions {
                            if let Ok(h) = store.history(id, BackendFormat::Unknown, &mut buf) {
                                let mut w = want.iter();
                                for g in h.iter() {
                                    assert!(
                                        w.any(|x| x.as_slice() == g.body),
                                        "{ctx}: {id}: a record never written, or out of order: {:?}",
                                        String::from_utf8_lossy(g.body)
                                    );
                                }
                            }
                            let mut got = Vec::new();
                            if let Ok(mut st) =
                                store.history_stream(id, BackendFormat::Unknown, &mut buf)
                            {
                                while let Ok(Some(rec)) = store.history_next(&mut st, &mut buf) {
                                    got.push(rec.body.to_vec());
                                }
                            }
                            let mut w = want.iter();
                            for g in &got {
                                assert!(
                                    w.any(|x| x == g),
                                    "{ctx}: {id}: streamed a record never written, or out of order: {:?}",
                                    String::from_utf8_lossy(g)
                                );
                            }
                        }
                        flips += 1;
                    }
                }
            }
        }
    }
    // Lengths rotted to 0: of a first chunk, of a continuation.
    println!("{flips} flips, {to_zero:?} of a length to 0");
    assert!(
        to_zero[0] >= 1 && to_zero[1] >= 1,
        "flips of a length to 0: {to_zero:?}"
    );
}
