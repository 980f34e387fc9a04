//! The clawmem engine under arbitrary operations, power cuts, images and bit
//! flips, each mounted afresh from the simulated flash.
//!
//! Three entry points, one per fuzz target:
//!
//! - [`run_ops`]: a sequence of appends, deletes, memory stores and forgets,
//!   profile writes, remounts and armed power cuts on a small partition,
//!   against a reference model of what was acknowledged. After every cut the
//!   flash is powered up again and mounted afresh (the engine's RAM state is
//!   dropped): mount must succeed, the state must be the one before or the
//!   one after the operation in flight, `check()` must pass, a second mount
//!   must read the same, and the model adopts that state. Every remount and
//!   the end of the run compare the whole state with the model.
//! - [`mount_image`]: arbitrary bytes as a partition image, mounted in every
//!   mode and then used through every reading and writing call: no panic, no
//!   hang, an erased partition mounted with `ExistingOnly` is `NotFormatted`.
//! - [`flip_bits`]: bit flips over a reference image holding sessions, memory
//!   items and a profile, then everything read back: a record, item or
//!   document returned is always one that was written.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::OnceLock;

use arbitrary::Arbitrary;
use clawmem::memory::ItemInput;
use clawmem::profile::ProfileDoc;
use clawmem::{BackendFormat, Config, Error, MountMode, Record, RecordType, Store};
use clawmem_sim::{
    CutPoint, Esp32Flash, Geometry, Model, Nor, PowerCut, Preset, SimFlash, Tear, WriteRule,
};
use embedded_storage::nor_flash::NorFlash;

/// Sessions the operations address.
pub const SESSIONS: u8 = 4;
/// Ops past this many are ignored, to bound one run.
pub const OPS_MAX: usize = 96;

/// The simulated part.
#[derive(Arbitrary, Clone, Copy, Debug, PartialEq, Eq)]
pub enum GeometryChoice {
    /// 4-byte words, 4 KiB sectors, 8 sectors, rewrites allowed.
    Esp32,
    /// 1-byte words, 256-byte sectors, 48 sectors.
    Tiny,
    /// 32-byte words written once, 4 KiB sectors, 8 sectors.
    WriteOnce,
    /// ESP32 with flash encryption: 16-byte blocks written once, 4 KiB
    /// sectors, 8 sectors.
    Esp32Encrypted,
}

/// One step of a run.
#[derive(Arbitrary, Clone, Debug)]
pub enum Op {
    /// Appends a record of `20 + len * 4` bytes to session `s % 4`.
    Append {
        /// Session.
        s: u8,
        /// Body size.
        len: u8,
        /// Whether the record ends a turn.
        final_: bool,
    },
    /// Deletes session `s % 4`.
    Delete {
        /// Session.
        s: u8,
    },
    /// Stores a memory item of about `len` bytes.
    MemStore {
        /// Content size.
        len: u8,
    },
    /// Forgets the `pick`-th active item (by content order), if any.
    MemForget {
        /// Which item.
        pick: u8,
    },
    /// Writes the user profile.
    Profile {
        /// Makes the document unique.
        version: u8,
    },
    /// Drops the engine and mounts the flash afresh.
    Remount,
    /// Arms a power cut at the `after`-th program or erase call from now.
    Cut {
        /// Calls before the cut.
        after: u8,
        /// Tear: 0 nothing lands, 1 a prefix, 2 random bits, 3 random words.
        tear: u8,
        /// Prefix length for tear 1, seed otherwise.
        seed: u8,
    },
    /// Idle-time maintenance with a budget of `steps % 8` steps.
    Maintain {
        /// Budget.
        steps: u8,
    },
}

/// A run: a part and its operations.
#[derive(Arbitrary, Clone, Debug)]
pub struct OpsInput {
    /// The part.
    pub geometry: GeometryChoice,
    /// The operations.
    pub ops: Vec<Op>,
}

/// What was acknowledged: session histories, active memory contents and the
/// user profile.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct State {
    /// Records per session.
    pub sessions: BTreeMap<u8, Vec<Vec<u8>>>,
    /// Active memory contents.
    pub memory: BTreeSet<String>,
    /// The user profile, if written.
    pub profile: Option<String>,
}

/// What a run exercised.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OpsTally {
    /// Power cuts that fired and were recovered from.
    pub cuts: u64,
    /// Fresh mounts.
    pub remounts: u64,
    /// Operations acknowledged.
    pub acked: u64,
    /// Operations refused without a cut (a full partition, for example).
    pub refused: u64,
}

fn config() -> Config {
    Config {
        session_size_limit_bytes: 1536,
        ..Config::default()
    }
}

fn config_for<const E: usize>() -> Config {
    Config {
        session_size_limit_bytes: if E < 1024 { 768 } else { 1536 },
        ..Config::default()
    }
}

fn session_id(s: u8) -> String {
    format!("chat:fz:{s}")
}

fn body(n: usize, len: u8) -> Vec<u8> {
    format!("{{\"n\":{n},\"pad\":\"{}\"}}", "z".repeat(len as usize * 4)).into_bytes()
}

fn read_all<F: NorFlash, const N: usize>(store: &mut Store<F, N>, ctx: &str) -> State {
    let mut out = State::default();
    store
        .memory_list(|i| {
            out.memory.insert(i.content().to_string());
        })
        .unwrap_or_else(|e| panic!("{ctx}: memory list: {e:?}"));
    let mut buf = vec![0u8; 4096];
    let n = store
        .profile_read(ProfileDoc::User, &mut buf)
        .unwrap_or_else(|e| panic!("{ctx}: profile read: {e:?}"));
    let doc = String::from_utf8(buf[..n].to_vec()).expect("profile is UTF-8");
    out.profile = (doc != ProfileDoc::User.default_contents()).then_some(doc);
    let mut buf = vec![0u8; 64 * 1024];
    for s in 0..SESSIONS {
        match store.history(&session_id(s), BackendFormat::Unknown, &mut buf) {
            Ok(h) => {
                assert_eq!(h.damaged_records(), 0, "{ctx}: damaged records in {s}");
                out.sessions
                    .insert(s, h.iter().map(|r| r.body.to_vec()).collect());
            }
            Err(Error::NotFound) => {}
            Err(e) => panic!("{ctx}: history of session {s}: {e:?}"),
        }
    }
    out
}

/// [`read_all`] with a pending power cut held back: reading may write
/// (a profile never written is stored with its default contents, as
/// ESP-Claw creates the missing file), and a cut there would be a cut inside
/// the checker, not inside the operation under test. The cut is re-armed
/// with the calls it had left.
fn read_all_paused<const W: usize, const E: usize, const M: bool>(
    store: &mut Store<Nor<W, E, M>, 8>,
    ctx: &str,
) -> State {
    let sim = store.flash_mut().flash_mut();
    let armed = sim.armed_power_cut();
    let seen = sim.ops_since_arm();
    sim.restore_power();
    let got = read_all(store, ctx);
    if let Some(mut cut) = armed {
        if let CutPoint::Op(n) = cut.at {
            cut.at = CutPoint::Op(n.saturating_sub(seen));
        }
        store.flash_mut().flash_mut().arm_power_cut(cut);
    }
    got
}

/// What differs between two states, briefly.
pub fn diff(got: &State, want: &State) -> String {
    let mut d = String::new();
    for s in 0..SESSIONS {
        let (g, w) = (got.sessions.get(&s), want.sessions.get(&s));
        if g != w {
            d += &format!(
                "\n  session {s}: {} records, expected {}",
                g.map_or(0, Vec::len),
                w.map_or(0, Vec::len)
            );
        }
    }
    if got.memory != want.memory {
        d += &format!(
            "\n  memory: extra {:?}, missing {:?}",
            got.memory.difference(&want.memory).collect::<Vec<_>>(),
            want.memory.difference(&got.memory).collect::<Vec<_>>()
        );
    }
    if got.profile != want.profile {
        d += &format!("\n  profile {:?}, expected {:?}", got.profile, want.profile);
    }
    d
}

/// The state after `op` acknowledged on `state`, or `None` when the engine
/// may legitimately choose (an append that compacted or blocked its
/// session), in which case the caller reads it back.
fn after(state: &State, op: &Op, n: usize) -> Option<State> {
    let mut s = state.clone();
    match op {
        Op::Append { s: k, len, .. } => s
            .sessions
            .entry(k % SESSIONS)
            .or_default()
            .push(body(n, *len)),
        Op::Delete { s: k } => {
            s.sessions.remove(&(k % SESSIONS));
        }
        Op::MemStore { len } => {
            s.memory.insert(memory_content(n, *len));
        }
        Op::MemForget { pick } => {
            if let Some(c) = pick_item(state, *pick) {
                s.memory.remove(&c);
            }
        }
        Op::Profile { version } => s.profile = Some(profile_doc(*version, n)),
        Op::Remount | Op::Cut { .. } | Op::Maintain { .. } => {}
    }
    Some(s)
}

fn memory_content(n: usize, len: u8) -> String {
    format!("fact {n}: {}", "m".repeat(len as usize % 96))
        .trim()
        .to_string()
}

fn profile_doc(version: u8, n: usize) -> String {
    format!("# User\n\n- version {version} at {n}\n")
}

fn pick_item(state: &State, pick: u8) -> Option<String> {
    let len = state.memory.len();
    (len > 0).then(|| state.memory.iter().nth(pick as usize % len).cloned())?
}

/// Runs one mutating op. `Ok(true)` when the session's history is no longer
/// predictable (compaction or blocking), `Ok(false)` otherwise.
fn run_op<F: NorFlash, const N: usize>(
    store: &mut Store<F, N>,
    state: &State,
    op: &Op,
    n: usize,
) -> Result<bool, Error<F::Error>> {
    match op {
        Op::Append { s, len, final_ } => {
            let b = body(n, *len);
            let out = store.append(
                &session_id(s % SESSIONS),
                &[Record {
                    kind: if *final_ {
                        RecordType::AssistantFinal
                    } else {
                        RecordType::User
                    },
                    format: BackendFormat::Unknown,
                    body: &b,
                }],
                *final_,
            )?;
            Ok(out.compacted || out.blocked)
        }
        Op::Delete { s } => match store.delete_session(&session_id(s % SESSIONS)) {
            Err(Error::NotFound) => Ok(false),
            r => r.map(|_| false),
        },
        Op::MemStore { len } => store
            .memory_store(
                &ItemInput::new(&memory_content(n, *len)).tags("facts"),
                n as u32,
                false,
            )
            .map(|_| false),
        Op::MemForget { pick } => {
            let Some(c) = pick_item(state, *pick) else {
                return Ok(false);
            };
            let mut target = None;
            store.memory_list(|i| {
                if i.content() == c {
                    target = Some(i.id());
                }
            })?;
            match target {
                Some(t) => store.memory_forget(t).map(|_| false),
                None => Ok(false),
            }
        }
        Op::Profile { version } => store
            .profile_write(ProfileDoc::User, &profile_doc(*version, n))
            .map(|_| false),
        Op::Maintain { steps } => {
            let budget = u32::from(steps % 8);
            let m = store.maintain(budget)?;
            assert!(m.steps <= budget, "maintain went over its budget");
            Ok(false)
        }
        Op::Remount | Op::Cut { .. } => Ok(false),
    }
}

/// Whether `got` is what compaction may leave of `want`: an ordered
/// subsequence that keeps the newest record.
fn compacted_from(got: &[Vec<u8>], want: &[Vec<u8>]) -> bool {
    if got.is_empty() {
        return true;
    }
    if got.last() != want.last() {
        return false;
    }
    let mut w = want.iter();
    got.iter().all(|g| w.any(|x| x == g))
}

/// Runs `input`; panics on any divergence from the model.
pub fn run_ops(input: &OpsInput) -> OpsTally {
    let t = Preset::Generic.default_model().timings;
    match input.geometry {
        GeometryChoice::Esp32 => run_on::<4, 4096, true>(
            Model::custom(Geometry::new(4, 4096, 8).unwrap(), WriteRule::Unlimited, t),
            &input.ops,
        ),
        GeometryChoice::Tiny => run_on::<1, 256, true>(
            Model::custom(Geometry::new(1, 256, 48).unwrap(), WriteRule::Unlimited, t),
            &input.ops,
        ),
        GeometryChoice::WriteOnce => run_on::<32, 4096, false>(
            Model::custom(Geometry::new(32, 4096, 8).unwrap(), WriteRule::Once, t),
            &input.ops,
        ),
        GeometryChoice::Esp32Encrypted => {
            run_on::<16, 4096, false>(Preset::Esp32Encrypted.model(8 * 4096).unwrap(), &input.ops)
        }
    }
}

fn remount<const W: usize, const E: usize, const M: bool>(
    flash: Nor<W, E, M>,
    ctx: &str,
) -> Store<Nor<W, E, M>, 8> {
    Store::mount(flash, config_for::<E>(), MountMode::ExistingOnly)
        .unwrap_or_else(|e| panic!("{ctx}: mount: {e:?}"))
}

fn run_on<const W: usize, const E: usize, const M: bool>(model: Model, ops: &[Op]) -> OpsTally {
    let flash = Nor::<W, E, M>::new(SimFlash::new(model)).unwrap();
    let mut store = Store::<_, 8>::format(flash, config_for::<E>()).unwrap();
    let mut state = State::default();
    let mut tally = OpsTally::default();
    for (n, op) in ops.iter().take(OPS_MAX).enumerate() {
        let ctx = format!("op {n} {op:?}");
        match op {
            Op::Remount => {
                // A cut still armed is dropped: a cut inside mount is a
                // double cut, which the crash-consistency tests cover.
                let mut flash = store.into_flash();
                flash.flash_mut().restore_power();
                store = remount(flash, &ctx);
                tally.remounts += 1;
                let got = read_all(&mut store, &ctx);
                assert!(got == state, "{ctx}: remount:{}", diff(&got, &state));
                continue;
            }
            Op::Cut { after, tear, seed } => {
                let tear = match tear % 4 {
                    0 => Tear::Prefix(0),
                    1 => Tear::Prefix(*seed as usize),
                    2 => Tear::Bits,
                    _ => Tear::Random,
                };
                store.flash_mut().flash_mut().arm_power_cut(PowerCut {
                    seed: u64::from(*seed),
                    at: CutPoint::Op(u64::from(*after % 32)),
                    tear,
                });
                continue;
            }
            _ => {}
        }
        match run_op(&mut store, &state, op, n) {
            Ok(unpredictable) => {
                tally.acked += 1;
                let next = after(&state, op, n).expect("mutating op");
                if unpredictable {
                    // Compaction chose what to keep: read it back and check
                    // it is a legal outcome.
                    let got = read_all_paused(&mut store, &ctx);
                    let Op::Append { s, .. } = op else {
                        unreachable!()
                    };
                    let k = s % SESSIONS;
                    let want = next.sessions.get(&k).cloned().unwrap_or_default();
                    let have = got.sessions.get(&k).cloned().unwrap_or_default();
                    assert!(
                        compacted_from(&have, &want),
                        "{ctx}: compaction kept records that were not the session's"
                    );
                    let mut expect = next;
                    if have.is_empty() {
                        expect.sessions.remove(&k);
                    } else {
                        expect.sessions.insert(k, have);
                    }
                    assert!(
                        got == expect,
                        "{ctx}: compaction changed another value:{}",
                        diff(&got, &expect)
                    );
                    state = got;
                } else {
                    state = next;
                }
            }
            Err(e) if store.flash().flash().is_powered() => {
                // Refused without a cut: nothing may have changed.
                tally.refused += 1;
                let got = read_all_paused(&mut store, &ctx);
                assert!(
                    got == state,
                    "{ctx}: a refused op ({e:?}) changed the state:{}",
                    diff(&got, &state)
                );
            }
            Err(_) => {
                tally.cuts += 1;
                let mut flash = store.into_flash();
                assert_eq!(flash.flash().stats().write_budget_violations, 0, "{ctx}");
                flash.flash_mut().restore_power();
                let mut fresh = remount(flash, &ctx);
                tally.remounts += 1;
                let got = read_all(&mut fresh, &ctx);
                let next = after(&state, op, n).expect("mutating op");
                let legal = got == state
                    || got == next
                    || matches!(op, Op::Append { s, .. } if {
                        // The append may have compacted on its way.
                        let k = s % SESSIONS;
                        let mut rest_got = got.clone();
                        let mut rest_next = next.clone();
                        let have = rest_got.sessions.remove(&k).unwrap_or_default();
                        let want = rest_next.sessions.remove(&k).unwrap_or_default();
                        rest_got == rest_next && compacted_from(&have, &want)
                    });
                assert!(
                    legal,
                    "{ctx}: after a cut the state is neither before nor after; against before:{}\n against after:{}",
                    diff(&got, &state),
                    diff(&got, &next)
                );
                fresh
                    .check()
                    .unwrap_or_else(|e| panic!("{ctx}: check after a cut: {e:?}"));
                let mut again = remount(fresh.into_flash(), &ctx);
                tally.remounts += 1;
                let second = read_all(&mut again, &ctx);
                assert!(
                    second == got,
                    "{ctx}: second mount differs:{}",
                    diff(&second, &got)
                );
                state = got;
                store = again;
            }
        }
    }
    // The end: a fresh mount shows exactly the model, and passes check().
    let mut flash = store.into_flash();
    flash.flash_mut().restore_power();
    let mut store = remount(flash, "end");
    tally.remounts += 1;
    let got = read_all(&mut store, "end");
    assert!(got == state, "end: state differs:{}", diff(&got, &state));
    store
        .check()
        .unwrap_or_else(|e| panic!("end: check: {e:?}"));
    tally
}

/// An image to mount: a part and its bytes (repeated or cut to the part's
/// size; the rest erased).
#[derive(Arbitrary, Clone, Debug)]
pub struct ImageInput {
    /// The part.
    pub geometry: GeometryChoice,
    /// Copy the sector headers of a valid image before the bytes, so the
    /// input reaches past the header checks.
    pub valid_headers: bool,
    /// The bytes.
    pub bytes: Vec<u8>,
}

/// Mounts an arbitrary image in every mode and uses it; panics only if the
/// engine does.
pub fn mount_image(input: &ImageInput) {
    let t = Preset::Generic.default_model().timings;
    match input.geometry {
        GeometryChoice::Esp32 => image_on::<4, 4096, true>(
            Model::custom(Geometry::new(4, 4096, 8).unwrap(), WriteRule::Unlimited, t),
            input,
        ),
        GeometryChoice::Tiny => image_on::<1, 256, true>(
            Model::custom(Geometry::new(1, 256, 48).unwrap(), WriteRule::Unlimited, t),
            input,
        ),
        GeometryChoice::WriteOnce => image_on::<32, 4096, false>(
            Model::custom(Geometry::new(32, 4096, 8).unwrap(), WriteRule::Once, t),
            input,
        ),
        GeometryChoice::Esp32Encrypted => {
            image_on::<16, 4096, false>(Preset::Esp32Encrypted.model(8 * 4096).unwrap(), input)
        }
    }
}

fn image_on<const W: usize, const E: usize, const M: bool>(model: Model, input: &ImageInput) {
    let cap = model.geometry.capacity();
    let mut bytes = vec![0xFF; cap];
    if !input.bytes.is_empty() {
        for (i, b) in bytes.iter_mut().enumerate() {
            *b = input.bytes[i % input.bytes.len()];
        }
        // Leave a tail erased, where an engine would write next.
        let keep = input.bytes.len().min(cap);
        bytes[keep..].fill(0xFF);
    }
    if input.valid_headers {
        let flash = Nor::<W, E, M>::new(SimFlash::new(model.clone())).unwrap();
        let img = Store::<_, 8>::format(flash, config_for::<E>())
            .unwrap()
            .into_flash()
            .into_inner()
            .image();
        let s = model.geometry.erase_size;
        for sector in 0..cap / s {
            let head = &img[sector * s..sector * s + 24.min(s)];
            if head.iter().any(|b| *b != 0xFF) {
                bytes[sector * s..sector * s + head.len()].copy_from_slice(head);
            }
        }
    }
    let blank = bytes.iter().all(|b| *b == 0xFF);
    for mode in [MountMode::ExistingOnly, MountMode::FormatIfBlank] {
        let sim = SimFlash::from_image(&model, &bytes).unwrap();
        let flash = Nor::<W, E, M>::new(sim).unwrap();
        match Store::<_, 8>::mount(flash, config_for::<E>(), mode) {
            Ok(mut store) => {
                assert!(
                    !(blank && mode == MountMode::ExistingOnly),
                    "an erased partition mounted without formatting"
                );
                exercise(&mut store);
            }
            Err(e) => {
                if blank && mode == MountMode::ExistingOnly {
                    assert!(matches!(e, Error::NotFormatted), "blank: {e:?}");
                }
            }
        }
    }
}

/// Every reading call and a few writes; results are ignored, panics are not.
fn exercise<F: NorFlash, const N: usize>(store: &mut Store<F, N>) {
    let mut buf = vec![0u8; 16 * 1024];
    let mut ids = Vec::new();
    let _ = store.for_each_session(|id, _| ids.push(id.to_string()));
    ids.push(session_id(0));
    for id in &ids {
        let _ = store.history(id, BackendFormat::AnthropicCompatible, &mut buf);
        let _ = store.session_info(id);
    }
    let _ = store.memory_list(|_| {});
    let _ = store.memory_catalog(|_, _| {});
    let _ = store.memory_recall(&["facts"], 8, 99, |_| {});
    let mut md = String::new();
    let _ = store.write_memory_md(&mut md);
    for doc in [ProfileDoc::Soul, ProfileDoc::Identity, ProfileDoc::User] {
        let _ = store.profile_read(doc, &mut buf);
    }
    let _ = store.check();
    let _ = store.append(
        &session_id(1),
        &[Record {
            kind: RecordType::User,
            format: BackendFormat::Unknown,
            body: b"{\"after\":1}",
        }],
        true,
    );
    let _ = store.memory_store(&ItemInput::new("after the damage").tags("facts"), 1, false);
    let _ = store.profile_write(ProfileDoc::User, "# User\n\n- after\n");
    if let Some(id) = ids.first() {
        let _ = store.delete_session(id);
    }
    let _ = store.check();
}

/// Bits to flip in the reference image.
#[derive(Arbitrary, Clone, Debug)]
pub struct FlipInput {
    /// (address within the written region, bit) pairs.
    pub flips: Vec<(u16, u8)>,
}

/// The reference image of [`flip_bits`] and what it holds.
pub struct Reference {
    /// The flash after the workload.
    pub image: SimFlash,
    /// Bytes up to the last programmed one.
    pub used: usize,
    /// Every record written per session, in order.
    pub sessions: BTreeMap<String, Vec<Vec<u8>>>,
    /// Every memory content stored.
    pub memory: Vec<String>,
    /// The profile written.
    pub profile: String,
}

/// Builds (once) the reference image: three sessions, memory items and a
/// profile on an 8-sector ESP32 partition.
pub fn reference() -> &'static Reference {
    static REF: OnceLock<Reference> = OnceLock::new();
    REF.get_or_init(|| {
        let flash = Esp32Flash::new(SimFlash::new(Preset::Esp32.model(8 * 4096).unwrap())).unwrap();
        let mut store = Store::<_, 8>::format(flash, config()).unwrap();
        let mut sessions: BTreeMap<String, Vec<Vec<u8>>> = BTreeMap::new();
        for n in 0..60u8 {
            let id = session_id(n % 3);
            let b = body(n as usize, n % 24);
            store
                .append(
                    &id,
                    &[Record {
                        kind: RecordType::User,
                        format: BackendFormat::OpenAiCompatible,
                        body: &b,
                    }],
                    false,
                )
                .unwrap();
            sessions.entry(id).or_default().push(b);
        }
        let mut memory = Vec::new();
        for n in 0..8u8 {
            let c = memory_content(n as usize, n * 7);
            store
                .memory_store(&ItemInput::new(&c).tags("facts"), u32::from(n), false)
                .unwrap();
            memory.push(c);
        }
        let profile = profile_doc(1, 0);
        store.profile_write(ProfileDoc::User, &profile).unwrap();
        store.check().unwrap();
        let image = store.into_flash().into_inner();
        let used = image.image().iter().rposition(|b| *b != 0xFF).unwrap_or(0) + 1;
        Reference {
            image,
            used,
            sessions,
            memory,
            profile,
        }
    })
}

/// Flips the bits, mounts and reads everything back; panics on a value that
/// was never written. Returns how many records were lost.
pub fn flip_bits(input: &FlipInput) -> usize {
    let r = reference();
    let mut image = r.image.clone();
    for (at, bit) in input.flips.iter().take(64) {
        image.flip_bit(*at as usize % r.used, bit % 8).unwrap();
    }
    let flash = Esp32Flash::new(image).unwrap();
    let Ok(mut store) = Store::<_, 8>::mount(flash, config(), MountMode::ExistingOnly) else {
        return r.sessions.values().map(Vec::len).sum();
    };
    let mut lost = 0;
    let mut buf = vec![0u8; 64 * 1024];
    for (id, want) in &r.sessions {
        match store.history(id, BackendFormat::Unknown, &mut buf) {
            Ok(h) => {
                let mut w = want.iter();
                let mut got = 0;
                for rec in h.iter() {
                    assert!(
                        w.any(|x| x.as_slice() == rec.body),
                        "{id}: a record never written, or out of order: {:?}",
                        String::from_utf8_lossy(rec.body)
                    );
                    got += 1;
                }
                lost += want.len() - got;
            }
            Err(_) => lost += want.len(),
        }
    }
    let _ = store.memory_list(|i| {
        assert!(
            r.memory.iter().any(|m| m == i.content()),
            "a memory item never stored: {:?}",
            i.content()
        );
    });
    let mut doc = vec![0u8; 4096];
    if let Ok(n) = store.profile_read(ProfileDoc::User, &mut doc) {
        let d = &doc[..n];
        assert!(
            d == r.profile.as_bytes() || d == ProfileDoc::User.default_contents().as_bytes(),
            "a profile never written: {:?}",
            String::from_utf8_lossy(d)
        );
    }
    let _ = store.check();
    lost
}
