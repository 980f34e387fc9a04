//! Power cuts at every program and erase call of a workload, on several
//! geometries, each followed by a fresh mount (never the engine's RAM state).
//!
//! Checked after every cut: acknowledged appends and deletes are all there
//! (durability); the operation in flight is all-or-nothing and a second
//! mount gives the same answer (atomicity); `check()` passes; and a write
//! that fits succeeds afterwards (progress).

use std::collections::BTreeMap;

use clawmem::memory::ItemInput;
use clawmem::profile::ProfileDoc;
use clawmem::{BackendFormat, Config, Error, MountMode, Record, RecordType, Store};
use clawmem_sim::{CutPoint, Geometry, Model, Nor, PowerCut, Preset, SimFlash, Tear, WriteRule};

#[derive(Clone, Debug)]
enum Op {
    Append(usize, Vec<u8>, RecordType),
    Delete(usize),
    MemStore(String),
    MemForget(String),
    Profile(String),
    /// Idle-time maintenance (erases ahead, a due checkpoint, collection).
    Maintain(u32),
}

/// What a remount must show: session histories, active memory contents,
/// and the user profile document.
#[derive(Clone, Debug, Default, PartialEq)]
struct Model_ {
    sessions: BTreeMap<usize, Vec<Vec<u8>>>,
    memory: std::collections::BTreeSet<String>,
    profile: Option<String>,
}

fn workload(n: usize, seed: u64, max_body: u64, max_session: usize) -> Vec<Op> {
    let mut x = seed;
    let mut rnd = move |m: u64| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x % m
    };
    let mut ops = Vec::new();
    let mut sizes = [0usize; 4];
    let mut memory: Vec<String> = Vec::new();
    for i in 0..n {
        match rnd(10) {
            0 => {
                // Stored contents are trimmed: keep the model's trimmed too.
                let c = format!("fact {i} about the user: {}", "k".repeat(rnd(60) as usize))
                    .trim()
                    .to_string();
                memory.push(c.clone());
                ops.push(Op::MemStore(c));
                continue;
            }
            1 if !memory.is_empty() => {
                let c = memory.remove(rnd(memory.len() as u64) as usize);
                ops.push(Op::MemForget(c));
                continue;
            }
            2 if i % 3 == 0 => {
                ops.push(Op::Profile(format!("# User\n\n- version {i}\n")));
                continue;
            }
            3 if i % 2 == 0 => {
                ops.push(Op::Maintain(1 + rnd(4) as u32));
                continue;
            }
            _ => {}
        }
        let s = rnd(4) as usize;
        // Sessions are deleted now and then, and always before they outgrow
        // a few KiB, so the live data stays well inside the partition.
        if rnd(40) == 0 || sizes[s] > max_session {
            ops.push(Op::Delete(s));
            sizes[s] = 0;
            continue;
        }
        let len = 20 + rnd(max_body) as usize;
        let body: Vec<u8> = format!("{{\"n\":{i},\"pad\":\"{}\"}}", "y".repeat(len)).into_bytes();
        sizes[s] += body.len() + 1;
        ops.push(Op::Append(s, body, RecordType::User));
    }
    ops
}

fn id(s: usize) -> String {
    format!("chat:cut:{s}")
}

fn apply_model(m: &mut Model_, op: &Op) {
    match op {
        Op::Append(s, body, _) => m.sessions.entry(*s).or_default().push(body.clone()),
        Op::Delete(s) => {
            m.sessions.remove(s);
        }
        Op::MemStore(c) => {
            m.memory.insert(c.clone());
        }
        Op::MemForget(c) => {
            m.memory.remove(c);
        }
        Op::Profile(b) => m.profile = Some(b.clone()),
        Op::Maintain(_) => {}
    }
}

fn run_op<F: embedded_storage::nor_flash::NorFlash, const N: usize>(
    store: &mut Store<F, N>,
    op: &Op,
) -> Result<(), Error<F::Error>> {
    match op {
        Op::Append(s, body, kind) => store
            .append(
                &id(*s),
                &[Record {
                    kind: *kind,
                    format: BackendFormat::OpenAiCompatible,
                    body,
                }],
                false,
            )
            .map(|_| ()),
        Op::Delete(s) => match store.delete_session(&id(*s)) {
            Err(Error::NotFound) => Ok(()),
            r => r,
        },
        Op::MemStore(c) => store
            .memory_store(&ItemInput::new(c).tags("facts"), 0, false)
            .map(|_| ()),
        Op::MemForget(c) => {
            let mut target = None;
            store.memory_list(|i| {
                if i.content() == c {
                    target = Some(i.id());
                }
            })?;
            match target {
                Some(t) => store.memory_forget(t).map(|_| ()),
                None => Ok(()),
            }
        }
        Op::Profile(b) => store.profile_write(ProfileDoc::User, b),
        Op::Maintain(n) => store.maintain(*n).map(|_| ()),
    }
}

fn read_all<F: embedded_storage::nor_flash::NorFlash, const N: usize>(
    store: &mut Store<F, N>,
) -> Model_ {
    let mut out = Model_::default();
    store
        .memory_list(|i| {
            out.memory.insert(i.content().to_string());
        })
        .unwrap();
    let mut buf = vec![0u8; 8192];
    let n = store.profile_read(ProfileDoc::User, &mut buf).unwrap();
    let body = String::from_utf8(buf[..n].to_vec()).unwrap();
    out.profile = (body != ProfileDoc::User.default_contents()).then_some(body);
    let mut buf = vec![0u8; 256 * 1024];
    for s in 0..4 {
        match store.history(&id(s), BackendFormat::Unknown, &mut buf) {
            Ok(h) => {
                assert_eq!(h.damaged_records(), 0);
                out.sessions
                    .insert(s, h.iter().map(|r| r.body.to_vec()).collect());
            }
            Err(Error::NotFound) => {}
            Err(e) => panic!("history of session {s}: {e:?}"),
        }
    }
    out
}

/// Runs the sweep for one geometry; returns (cut points, runs).
fn sweep<const W: usize, const E: usize, const M: bool>(
    model: Model,
    config: Config,
    ops: &[Op],
    tears: &[Tear],
) -> (u64, u64) {
    let fresh = || {
        let flash = Nor::<W, E, M>::new(SimFlash::new(model.clone())).unwrap();
        Store::<_, 8>::format(flash, config).unwrap().into_flash()
    };
    // A clean run counts the cut points.
    let base = fresh();
    let mut clean = base.clone();
    clean.flash_mut().arm_power_cut(PowerCut {
        seed: 0,
        at: CutPoint::Op(u64::MAX),
        tear: Tear::Prefix(0),
    });
    let mut store = Store::<_, 8>::mount(clean, config, MountMode::ExistingOnly).unwrap();
    for op in ops {
        run_op(&mut store, op).unwrap();
    }
    store.check().unwrap();
    let total = store.flash().flash().ops_since_arm();
    assert_eq!(store.flash().flash().stats().write_budget_violations, 0);
    let mut runs = 0;
    for cut in 0..total {
        for (t, tear) in tears.iter().enumerate() {
            let replay = PowerCut {
                seed: cut * 31 + t as u64,
                at: CutPoint::Op(cut),
                tear: *tear,
            };
            let mut flash = base.clone();
            flash.flash_mut().arm_power_cut(replay);
            let mut store = Store::<_, 8>::mount(flash, config, MountMode::ExistingOnly).unwrap();
            let mut before = Model_::default();
            let mut in_flight = None;
            for op in ops {
                match run_op(&mut store, op) {
                    Ok(()) => apply_model(&mut before, op),
                    Err(_) => {
                        in_flight = Some(op.clone());
                        break;
                    }
                }
            }
            let mut flash = store.into_flash();
            assert_eq!(
                flash.flash().stats().write_budget_violations,
                0,
                "write budget violated ({replay})"
            );
            flash.flash_mut().restore_power();
            let mut store = Store::<_, 8>::mount(flash, config, MountMode::ExistingOnly)
                .unwrap_or_else(|e| panic!("mount after {replay}: {e:?}"));
            let got = read_all(&mut store);
            let mut after = before.clone();
            if let Some(op) = &in_flight {
                apply_model(&mut after, op);
            }
            if got != before && got != after {
                let diff = |a: &Model_, name: &str| {
                    let mut d = String::new();
                    for s in 0..4 {
                        let (x, y) = (a.sessions.get(&s), got.sessions.get(&s));
                        if x != y {
                            d += &format!(
                                "\n  {name}: session {s}: expected {} records, got {}",
                                x.map_or(0, |v| v.len()),
                                y.map_or(0, |v| v.len())
                            );
                        }
                    }
                    if a.memory != got.memory {
                        d += &format!(
                            "\n  {name}: memory expected {:?}\n  got {:?}",
                            a.memory, got.memory
                        );
                    }
                    if a.profile != got.profile {
                        d += &format!("\n  {name}: profile {:?} got {:?}", a.profile, got.profile);
                    }
                    d
                };
                panic!(
                    "{replay}: state is neither before nor after the op in flight {:?}{}{}",
                    in_flight.map(|o| match o {
                        Op::Append(s, b, _) => format!("append to {s} ({} B)", b.len()),
                        o => format!("{o:?}"),
                    }),
                    diff(&before, "before"),
                    diff(&after, "after")
                );
            }
            store
                .check()
                .unwrap_or_else(|e| panic!("check after {replay}: {e:?}"));
            // A second mount gives the same answer.
            let flash = store.into_flash();
            let mut store = Store::<_, 8>::mount(flash, config, MountMode::ExistingOnly).unwrap();
            assert_eq!(read_all(&mut store), got, "{replay}: second mount differs");
            // Progress: a write that fits succeeds.
            store
                .append(
                    "chat:cut:after",
                    &[Record {
                        kind: RecordType::User,
                        format: BackendFormat::Unknown,
                        body: b"{\"after\":true}",
                    }],
                    false,
                )
                .unwrap_or_else(|e| panic!("{replay}: write after recovery: {e:?}"));
            assert_eq!(store.flash().flash().stats().write_budget_violations, 0);
            runs += 1;
        }
    }
    (total, runs)
}

const TEARS: [Tear; 4] = [Tear::Prefix(0), Tear::Prefix(7), Tear::Bits, Tear::Random];

#[test]
fn every_cut_esp32() {
    let config = Config {
        session_size_limit_bytes: 4096,
        ..Config::default()
    };
    let model = Preset::Esp32.model(16 * 4096).unwrap();
    let (cuts, runs) = sweep::<4, 4096, true>(model, config, &workload(300, 7, 400, 3000), &TEARS);
    println!("esp32: {cuts} cut points, {runs} runs");
    assert!(cuts > 300, "the workload must wrap the ring: {cuts}");
}

/// ESP32 with flash encryption: 16 B blocks, each written once.
#[test]
fn every_cut_esp32_encrypted() {
    let config = Config {
        session_size_limit_bytes: 4096,
        ..Config::default()
    };
    let model = Preset::Esp32Encrypted.model(16 * 4096).unwrap();
    let (cuts, runs) =
        sweep::<16, 4096, false>(model, config, &workload(300, 7, 400, 3000), &TEARS);
    println!("esp32-encrypted: {cuts} cut points, {runs} runs");
    assert!(cuts > 300, "the workload must wrap the ring: {cuts}");
}

#[test]
fn every_cut_write_once_32_byte_words() {
    let config = Config {
        session_size_limit_bytes: 4096,
        ..Config::default()
    };
    let t = Preset::Stm32h7.default_model().timings;
    let model = Model::custom(Geometry::new(32, 4096, 16).unwrap(), WriteRule::Once, t);
    let (cuts, runs) =
        sweep::<32, 4096, false>(model, config, &workload(200, 11, 400, 3000), &TEARS);
    println!("write-once 32 B: {cuts} cut points, {runs} runs");
}

#[test]
fn every_cut_stm32l4() {
    let config = Config {
        session_size_limit_bytes: 2048,
        ..Config::default()
    };
    let model = Preset::Stm32l4.model(24 * 2048).unwrap();
    let (cuts, runs) = sweep::<8, 2048, false>(model, config, &workload(200, 5, 200, 1500), &TEARS);
    println!("stm32l4: {cuts} cut points, {runs} runs");
}

#[test]
fn every_cut_tiny_sectors_byte_writes() {
    let config = Config {
        session_size_limit_bytes: 1024,
        ..Config::default()
    };
    let t = Preset::Generic.default_model().timings;
    let model = Model::custom(Geometry::new(1, 256, 64).unwrap(), WriteRule::Unlimited, t);
    let (cuts, runs) = sweep::<1, 256, true>(model, config, &workload(200, 3, 100, 800), &TEARS);
    println!("1 B / 256 B: {cuts} cut points, {runs} runs");
}

/// A torn write at the head costs only the bytes it reached: the mount after
/// the cut resumes writing in the same sector, past the torn chunk, instead
/// of sealing the sector (issue 12, item 4). Each later mount passes over the
/// torn chunk without applying it, also after a second cut tears the first
/// write after the resume. `tears`: (program call of the torn append, tear).
fn torn_head_resumes<const W: usize, const E: usize, const M: bool>(
    model: Model,
    tears: &[(u64, Tear)],
) {
    let config = Config {
        session_size_limit_bytes: 8192,
        ..Config::default()
    };
    let flash = Nor::<W, E, M>::new(SimFlash::new(model)).unwrap();
    let mut store = Store::<_, 8>::format(flash, config).unwrap();
    let mut model_ = Model_::default();
    for i in 0..3 {
        let op = Op::Append(0, format!("{{\"n\":{i}}}").into_bytes(), RecordType::User);
        run_op(&mut store, &op).unwrap();
        apply_model(&mut model_, &op);
    }
    let base = store.into_flash();
    let torn = Op::Append(1, vec![b'x'; 700], RecordType::ToolResult);
    let small = |n: usize| {
        Op::Append(
            2,
            format!("{{\"after\":{n}}}").into_bytes(),
            RecordType::User,
        )
    };
    let mount = |f| Store::<_, 8>::mount(f, config, MountMode::ExistingOnly).unwrap();
    // Mounts `flash`, runs `op` with power failing at its program call
    // `call`, and returns the flash as the cut left it, power back.
    let cut_during = |mut flash: Nor<W, E, M>, op: &Op, call: u64, tear: Tear, what: &str| {
        flash.flash_mut().arm_power_cut(PowerCut {
            seed: 11 + call,
            at: CutPoint::Op(call),
            tear,
        });
        let mut store = mount(flash);
        assert!(
            run_op(&mut store, op).is_err(),
            "{what}: the cut must hit {op:?}"
        );
        let mut flash = store.into_flash();
        flash.flash_mut().restore_power();
        flash
    };
    let used = mount(base.clone()).space().used_sectors;
    for &(call, tear) in tears {
        let what = format!("call {call}, {tear:?}");
        let mut store = mount(cut_during(base.clone(), &torn, call, tear, &what));
        let r = store.mount_report();
        assert!(r.resumed_head && !r.sealed_head, "{what}: {r:?}");
        assert_eq!(
            read_all(&mut store),
            model_,
            "{what}: the torn append is not applied"
        );
        let mut expect = model_.clone();
        for n in 0..3 {
            run_op(&mut store, &small(n)).unwrap();
            apply_model(&mut expect, &small(n));
        }
        assert_eq!(
            store.space().used_sectors,
            used,
            "{what}: written in the same sector"
        );
        store.check().unwrap();
        let mut store = mount(store.into_flash());
        let r = store.mount_report();
        assert!(
            !r.resumed_head && !r.sealed_head,
            "{what}: second mount {r:?}"
        );
        assert_eq!(read_all(&mut store), expect, "{what}: after the resume");
        store.check().unwrap();

        // A second cut tears the first write after the resume.
        let flash = cut_during(base.clone(), &torn, call, tear, &what);
        let big = Op::Append(3, vec![b'y'; 600], RecordType::ToolResult);
        let mut flash = cut_during(mount(flash).into_flash(), &big, 1, Tear::Prefix(0), &what);
        for _ in 0..2 {
            let mut store = mount(flash);
            assert_eq!(read_all(&mut store), model_, "{what}: after the second cut");
            store.check().unwrap();
            assert_eq!(store.flash().flash().stats().write_budget_violations, 0);
            flash = store.into_flash();
        }
        let mut store = mount(flash);
        run_op(&mut store, &small(0)).unwrap();
        let mut expect = model_.clone();
        apply_model(&mut expect, &small(0));
        assert_eq!(
            read_all(&mut mount(store.into_flash())),
            expect,
            "{what}: progress"
        );
    }
}

/// The tears: the header and the first program piece landed, the rest not
/// (the chunk reads with its length and fails its CRC); only three bytes of
/// the header landed (it does not decode); a random part of the first
/// piece's bits landed.
const HEAD_TEARS: [(u64, Tear); 3] = [(1, Tear::Prefix(0)), (0, Tear::Prefix(3)), (0, Tear::Bits)];

#[test]
fn a_torn_head_resumes_in_its_sector_esp32() {
    torn_head_resumes::<4, 4096, true>(Preset::Esp32.model(16 * 4096).unwrap(), &HEAD_TEARS);
}

#[test]
fn a_torn_head_resumes_in_its_sector_esp32_encrypted() {
    torn_head_resumes::<16, 4096, false>(
        Preset::Esp32Encrypted.model(16 * 4096).unwrap(),
        &HEAD_TEARS,
    );
}

#[test]
fn a_torn_head_resumes_in_its_sector_stm32l4() {
    torn_head_resumes::<8, 2048, false>(Preset::Stm32l4.model(32 * 2048).unwrap(), &HEAD_TEARS);
}
