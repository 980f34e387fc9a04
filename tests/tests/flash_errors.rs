//! Injected flash errors: a read, program or erase error at every call index
//! of a small workload, one-shot and persistent.
//!
//! Checked for each: the error reaches the caller as `Error::Flash` (no
//! panic, no other error); once the fault is cleared, a fresh mount shows
//! every acknowledged op (durability) and the op in flight either whole or
//! not at all (atomicity); `check()` passes; a second mount agrees; a write
//! that fits succeeds; the write budget of the flash is never exceeded.

use std::collections::{BTreeMap, BTreeSet};

use clawmem::memory::ItemInput;
use clawmem::profile::ProfileDoc;
use clawmem::{BackendFormat, Config, Error, MountMode, Record, RecordType, Store};
use clawmem_sim::{
    Geometry, InjectedError, Model, Nor, OpKind, Preset, SimError, SimFlash, WriteRule,
};
use embedded_storage::nor_flash::NorFlash;

#[derive(Clone, Debug)]
enum Op {
    Append(usize, Vec<u8>),
    Delete(usize),
    MemStore(String),
    MemForget(String),
    Profile(String),
}

#[derive(Clone, Debug, Default, PartialEq)]
struct State {
    sessions: BTreeMap<usize, Vec<Vec<u8>>>,
    memory: BTreeSet<String>,
    profile: Option<String>,
}

fn workload(n: usize, max_body: usize) -> Vec<Op> {
    let mut x = 0x9e37_79b9_u64;
    let mut rnd = move |m: u64| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x % m
    };
    let mut ops = Vec::new();
    let mut memory: Vec<String> = Vec::new();
    let mut sizes = [0usize; 3];
    for i in 0..n {
        match rnd(8) {
            0 => {
                let c = format!(
                    "fact {i:03} about the user: {}",
                    "m".repeat(rnd(40) as usize)
                )
                .trim()
                .to_string();
                memory.push(c.clone());
                ops.push(Op::MemStore(c));
            }
            1 if !memory.is_empty() => {
                let c = memory.remove(rnd(memory.len() as u64) as usize);
                ops.push(Op::MemForget(c));
            }
            2 => ops.push(Op::Profile(format!("# User\n\n- version {i}\n"))),
            _ => {
                let s = rnd(3) as usize;
                if sizes[s] > 600 {
                    ops.push(Op::Delete(s));
                    sizes[s] = 0;
                    continue;
                }
                let len = 10 + rnd(max_body as u64) as usize;
                let body = format!("{{\"n\":{i},\"p\":\"{}\"}}", "y".repeat(len)).into_bytes();
                sizes[s] += body.len() + 1;
                ops.push(Op::Append(s, body));
            }
        }
    }
    ops
}

fn sid(s: usize) -> String {
    format!("chat:err:{s}")
}

fn apply(m: &mut State, op: &Op) {
    match op {
        Op::Append(s, b) => m.sessions.entry(*s).or_default().push(b.clone()),
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
    }
}

fn run<F: NorFlash>(store: &mut Store<F, 8>, op: &Op) -> Result<(), Error<F::Error>> {
    match op {
        Op::Append(s, body) => store
            .append(
                &sid(*s),
                &[Record {
                    kind: RecordType::User,
                    format: BackendFormat::OpenAiCompatible,
                    body,
                }],
                false,
            )
            .map(|_| ()),
        Op::Delete(s) => match store.delete_session(&sid(*s)) {
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
            store.memory_forget(target.expect("forget of an item the workload stored"))?;
            Ok(())
        }
        Op::Profile(b) => store.profile_write(ProfileDoc::User, b),
    }
}

fn read_all<F: NorFlash>(store: &mut Store<F, 8>) -> State
where
    F::Error: std::fmt::Debug,
{
    let mut out = State::default();
    store
        .memory_list(|i| {
            out.memory.insert(i.content().to_string());
        })
        .unwrap();
    let mut buf = vec![0u8; 64 * 1024];
    // `profile_len` does not write: a never-written profile stays unwritten.
    if store.profile_len(ProfileDoc::User).unwrap() > 0 {
        let n = store.profile_read(ProfileDoc::User, &mut buf).unwrap();
        let body = String::from_utf8(buf[..n].to_vec()).unwrap();
        out.profile = (body != ProfileDoc::User.default_contents()).then_some(body);
    }
    for s in 0..3 {
        match store.history(&sid(s), BackendFormat::OpenAiCompatible, &mut buf) {
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

/// Calls of each kind the workload makes on a clean run.
fn counts<F>(base: &F, config: Config, ops: &[Op]) -> [u64; 3]
where
    F: NorFlash<Error = SimError> + Clone + Sim,
{
    let mut flash = base.clone();
    flash.sim().reset_counters();
    let mut store = Store::<_, 8>::mount(flash, config, MountMode::ExistingOnly).unwrap();
    for op in ops {
        run(&mut store, op).unwrap();
    }
    store.check().unwrap();
    let mut flash = store.into_flash();
    let s = flash.sim().stats().clone();
    [s.read_calls, s.program_calls, s.erase_calls]
}

trait Sim {
    fn sim(&mut self) -> &mut SimFlash;
}

impl<const W: usize, const E: usize, const M: bool> Sim for Nor<W, E, M> {
    fn sim(&mut self) -> &mut SimFlash {
        self.flash_mut()
    }
}

/// Injects an error at every call index (reads: every `read_stride`-th)
/// of each kind, one-shot and persistent. Returns the number of runs.
fn sweep<F>(base: F, config: Config, ops: &[Op], read_stride: u64) -> u64
where
    F: NorFlash<Error = SimError> + Clone + Sim,
{
    let totals = counts(&base, config, ops);
    assert!(totals[2] > 0, "the workload must erase: {totals:?}");
    let mut runs = 0;
    let mut swallowed = 0;
    for (kind, total) in [OpKind::Read, OpKind::Program, OpKind::Erase]
        .into_iter()
        .zip(totals)
    {
        let stride = if kind == OpKind::Read { read_stride } else { 1 };
        for persistent in [false, true] {
            for at_call in (0..total).step_by(stride as usize) {
                let error = InjectedError {
                    op: kind,
                    at_call,
                    persistent,
                };
                let mut store =
                    Store::<_, 8>::mount(base.clone(), config, MountMode::ExistingOnly).unwrap();
                store.flash_mut().sim().inject_error(error);
                let mut before = State::default();
                let mut in_flight = None;
                for op in ops {
                    match run(&mut store, op) {
                        Ok(()) => apply(&mut before, op),
                        Err(e) => {
                            assert!(
                                matches!(e, Error::Flash(SimError::Injected(_))),
                                "{error}: {op:?} failed with {e:?}"
                            );
                            in_flight = Some(op.clone());
                            break;
                        }
                    }
                }
                // An error the engine absorbed (a best-effort read) must
                // not have cost anything: then every op was acknowledged.
                swallowed += u64::from(in_flight.is_none());
                let mut flash = store.into_flash();
                assert_eq!(
                    flash.sim().stats().write_budget_violations,
                    0,
                    "{error}: write budget violated"
                );
                flash.sim().clear_faults();
                let mut store = Store::<_, 8>::mount(flash, config, MountMode::ExistingOnly)
                    .unwrap_or_else(|e| panic!("{error}: mount after the fault cleared: {e:?}"));
                let got = read_all(&mut store);
                let mut after = before.clone();
                if let Some(op) = &in_flight {
                    apply(&mut after, op);
                }
                assert!(
                    got == before || got == after,
                    "{error}: {in_flight:?} is neither undone nor done:\n got {got:?}\n before {before:?}"
                );
                store
                    .check()
                    .unwrap_or_else(|e| panic!("{error}: check: {e:?}"));
                let flash = store.into_flash();
                let mut store =
                    Store::<_, 8>::mount(flash, config, MountMode::ExistingOnly).unwrap();
                assert_eq!(read_all(&mut store), got, "{error}: second mount differs");
                store
                    .append(
                        "chat:err:after",
                        &[Record {
                            kind: RecordType::User,
                            format: BackendFormat::Unknown,
                            body: b"{\"after\":true}",
                        }],
                        false,
                    )
                    .unwrap_or_else(|e| panic!("{error}: write after recovery: {e:?}"));
                let mut flash = store.into_flash();
                assert_eq!(flash.sim().stats().write_budget_violations, 0, "{error}");
                runs += 1;
            }
        }
    }
    println!("calls {totals:?}, {runs} runs, {swallowed} errors absorbed by the engine");
    runs
}

fn formatted<const W: usize, const E: usize, const M: bool>(
    model: Model,
    config: Config,
) -> Nor<W, E, M> {
    let flash = Nor::<W, E, M>::new(SimFlash::new(model)).unwrap();
    Store::<_, 8>::format(flash, config).unwrap().into_flash()
}

#[test]
fn every_error_byte_writes_256b_sectors() {
    let config = Config {
        session_size_limit_bytes: 512,
        checkpoint_interval_bytes: 2048,
        ..Config::default()
    };
    let t = Preset::Generic.default_model().timings;
    let model = Model::custom(Geometry::new(1, 256, 48).unwrap(), WriteRule::Unlimited, t);
    let base = formatted::<1, 256, true>(model, config);
    sweep(base, config, &workload(60, 60), 1);
}

/// ESP32 with flash encryption: 16 B blocks, each written once.
#[test]
fn every_error_esp32_encrypted() {
    let config = Config {
        session_size_limit_bytes: 700,
        checkpoint_interval_bytes: 2048,
        ..Config::default()
    };
    let model = Preset::Esp32Encrypted.model(12 * 4096).unwrap();
    let base = formatted::<16, 4096, false>(model, config);
    sweep(base, config, &workload(60, 120), 1);
}

#[test]
fn every_error_write_once_32b_words() {
    let config = Config {
        session_size_limit_bytes: 700,
        checkpoint_interval_bytes: 2048,
        ..Config::default()
    };
    let t = Preset::Stm32h7.default_model().timings;
    let model = Model::custom(Geometry::new(32, 2048, 12).unwrap(), WriteRule::Once, t);
    let base = formatted::<32, 2048, false>(model, config);
    sweep(base, config, &workload(60, 120), 1);
}
