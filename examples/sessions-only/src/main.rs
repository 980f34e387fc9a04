//! clawmem without its optional features, on images the full engine wrote.
//!
//! A firmware may build clawmem with `default-features = false` (sessions
//! only) and still meet a partition that a full build wrote. This program
//! checks the two promises of such a build (`scripts/sessions-only.sh`
//! drives it on images written by `clawmem-sim replay`, and checks the
//! result with `clawmem-sim export`):
//!
//! - `refuse IMAGE`: an image that holds long-term memory is refused at
//!   mount with `Error::Config`, and not one byte of it changes;
//! - `churn IMAGE`: an image without memory (sessions and profiles) is
//!   mounted and every session's history read; then sessions of its own are
//!   appended until the ring has wrapped `ROUNDS` times, so that garbage
//!   collection relocates every record and object of the image, and deleted
//!   again; every original history reads back the same after each round and
//!   after a fresh mount, and the image is written back. The script then
//!   compares what the full engine exports from it (profiles included,
//!   which this build cannot read) with the export from before.
//!
//! The flash is a RAM image with the ESP32 preset's geometry (4-byte words,
//! 4 KiB sectors) that enforces NOR rules: reads and programs aligned,
//! programs only clear bits, erases whole sectors.

use std::cell::RefCell;
use std::process::ExitCode;
use std::rc::Rc;

use clawmem::{BackendFormat, Config, Error, MountMode, Record, RecordType, Store};
use embedded_storage::nor_flash::{
    ErrorType, NorFlash, NorFlashError, NorFlashErrorKind, ReadNorFlash,
};

const WORD: usize = 4;
const SECTOR: usize = 4096;
/// How many times the churn wraps the ring.
const ROUNDS: usize = 3;

/// The image, shared so that it can be looked at after a mount that
/// failed (and so took the flash with it).
struct RamFlash(Rc<RefCell<Vec<u8>>>);

#[derive(Debug)]
struct FlashError(NorFlashErrorKind);

impl NorFlashError for FlashError {
    fn kind(&self) -> NorFlashErrorKind {
        self.0
    }
}

impl ErrorType for RamFlash {
    type Error = FlashError;
}

impl RamFlash {
    fn check(&self, offset: u32, len: usize, align: usize) -> Result<usize, FlashError> {
        let at = offset as usize;
        if !at.is_multiple_of(align) || !len.is_multiple_of(align) {
            return Err(FlashError(NorFlashErrorKind::NotAligned));
        }
        match at.checked_add(len) {
            Some(end) if end <= self.0.borrow().len() => Ok(at),
            _ => Err(FlashError(NorFlashErrorKind::OutOfBounds)),
        }
    }
}

impl ReadNorFlash for RamFlash {
    const READ_SIZE: usize = 1;
    fn read(&mut self, offset: u32, bytes: &mut [u8]) -> Result<(), FlashError> {
        let at = self.check(offset, bytes.len(), 1)?;
        bytes.copy_from_slice(&self.0.borrow()[at..at + bytes.len()]);
        Ok(())
    }
    fn capacity(&self) -> usize {
        self.0.borrow().len()
    }
}

impl NorFlash for RamFlash {
    const WRITE_SIZE: usize = WORD;
    const ERASE_SIZE: usize = SECTOR;
    fn write(&mut self, offset: u32, bytes: &[u8]) -> Result<(), FlashError> {
        let at = self.check(offset, bytes.len(), WORD)?;
        for (cell, b) in self.0.borrow_mut()[at..at + bytes.len()]
            .iter_mut()
            .zip(bytes)
        {
            // NOR: a program only clears bits.
            *cell &= *b;
        }
        Ok(())
    }
    fn erase(&mut self, from: u32, to: u32) -> Result<(), FlashError> {
        let len = (to as usize)
            .checked_sub(from as usize)
            .ok_or(FlashError(NorFlashErrorKind::OutOfBounds))?;
        let at = self.check(from, len, SECTOR)?;
        self.0.borrow_mut()[at..at + len].fill(0xFF);
        Ok(())
    }
}

type Engine = Store<RamFlash, 64>;

fn mount(image: Rc<RefCell<Vec<u8>>>) -> Result<Engine, String> {
    Engine::mount(RamFlash(image), Config::default(), MountMode::ExistingOnly)
        .map_err(|e| format!("mount failed: {e}"))
}

/// Every session's id and its history, as (kind, format, body) records.
type Histories = Vec<(String, Vec<(RecordType, BackendFormat, Vec<u8>)>)>;

fn histories(store: &mut Engine) -> Result<Histories, String> {
    let mut ids: Vec<String> = Vec::new();
    store
        .for_each_session(&mut |id: &str, _| ids.push(id.to_string()))
        .map_err(|e| format!("listing sessions: {e}"))?;
    ids.sort();
    let mut buf = vec![0u8; 1 << 20];
    let mut out = Vec::new();
    for id in ids {
        let h = store
            .history(&id, BackendFormat::Unknown, &mut buf)
            .map_err(|e| format!("history of {id}: {e}"))?;
        if h.damaged_records() != 0 {
            return Err(format!(
                "history of {id}: {} damaged records",
                h.damaged_records()
            ));
        }
        let records = h
            .iter()
            .map(|r| (r.kind, r.format, r.body.to_vec()))
            .collect();
        out.push((id, records));
    }
    Ok(out)
}

fn refuse(image: Vec<u8>) -> Result<(), String> {
    let shared = Rc::new(RefCell::new(image.clone()));
    match Engine::mount(
        RamFlash(shared.clone()),
        Config::default(),
        MountMode::ExistingOnly,
    ) {
        Ok(_) => {
            Err("a store holding long-term memory mounted without the `memory` feature".into())
        }
        Err(Error::Config(what)) if what.contains("memory") => {
            if *shared.borrow() != image {
                return Err("the refused image changed".into());
            }
            println!("refused, the image unchanged: {what}");
            Ok(())
        }
        Err(e) => Err(format!("refused with the wrong error: {e}")),
    }
}

fn churn(image: Vec<u8>) -> Result<Vec<u8>, String> {
    let shared = Rc::new(RefCell::new(image));
    let mut store = mount(shared.clone())?;
    let original = histories(&mut store)?;
    if original.is_empty() {
        return Err("the image holds no session".into());
    }
    let capacity = store.flash().capacity();
    let body = vec![b'x'; 1500];
    let mut n = 0u32;
    for round in 0..ROUNDS {
        // Enough bytes to wrap the ring once, over sessions of a few KiB
        // each (deleted as they grow, as a user following the gate would).
        let mut written = 0;
        let mut k = 0;
        while written < capacity {
            let id = format!("churn-{round}-{k}");
            for _ in 0..6 {
                let record = Record {
                    kind: RecordType::User,
                    format: BackendFormat::OpenAiCompatible,
                    body: &body,
                };
                store
                    .append(&id, &[record], true)
                    .map_err(|e| format!("append to {id}: {e}"))?;
                written += body.len();
                n += 1;
            }
            store
                .delete_session(&id)
                .map_err(|e| format!("delete {id}: {e}"))?;
            k += 1;
        }
        if histories(&mut store)? != original {
            return Err(format!("round {round}: a history changed"));
        }
        store
            .check()
            .map_err(|e| format!("round {round}: check: {e}"))?;
    }
    drop(store);
    let mut store = mount(shared.clone())?;
    if histories(&mut store)? != original {
        return Err("after a fresh mount: a history changed".into());
    }
    println!(
        "{} sessions kept through {n} appends ({ROUNDS} wraps of the ring) and a fresh mount",
        original.len()
    );
    drop(store);
    let out = shared.borrow().clone();
    Ok(out)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    let result = match args.as_slice() {
        [_, cmd, path] if cmd == "refuse" || cmd == "churn" => std::fs::read(path)
            .map_err(|e| format!("{path}: {e}"))
            .and_then(|image| {
                if cmd == "refuse" {
                    refuse(image)
                } else {
                    churn(image).and_then(|out| {
                        std::fs::write(path, out).map_err(|e| format!("{path}: {e}"))
                    })
                }
            }),
        _ => Err("usage: clawmem-sessions-only (refuse|churn) IMAGE".into()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("clawmem-sessions-only: {e}");
            ExitCode::FAILURE
        }
    }
}
