//! `esp-claw-littlefs`: ESP-Claw's files on littlefs 2 (the `littlefs2`
//! crate, which binds the C library; building it needs libclang, hence the
//! `littlefs` cargo feature).
//!
//! The geometry is littlefs2's compile-time `Storage` constants, so this
//! peer runs on the 1 MiB partition of 4 KiB sectors only (the default
//! `esp32` set-up), with esp_littlefs's settings: 128-byte read and program
//! units, a 512-byte cache, block_cycles 512.

use std::cell::RefCell;
use std::rc::Rc;

use littlefs2::consts::{U16, U512};
use littlefs2::driver::Storage;
use littlefs2::fs::{Allocation, Filesystem};
use littlefs2::io::{Error, Result as LfsResult};
use littlefs2::path::PathBuf;

use super::FileStore;
use crate::flash::SimFlash;

/// The block device littlefs sees: the simulated flash, shared.
pub struct Dev(Rc<RefCell<SimFlash>>);

const BLOCK: usize = 4096;
const BLOCKS: usize = 256;

impl Storage for Dev {
    const READ_SIZE: usize = 128;
    const WRITE_SIZE: usize = 128;
    const BLOCK_SIZE: usize = BLOCK;
    const BLOCK_COUNT: usize = BLOCKS;
    const BLOCK_CYCLES: isize = 512;
    type CACHE_SIZE = U512;
    type LOOKAHEAD_SIZE = U16;

    fn read(&mut self, off: usize, buf: &mut [u8]) -> LfsResult<usize> {
        self.0
            .borrow_mut()
            .read(off as u32, buf)
            .map_err(|_| Error::IO)?;
        Ok(buf.len())
    }

    fn write(&mut self, off: usize, data: &[u8]) -> LfsResult<usize> {
        self.0
            .borrow_mut()
            .program(off as u32, data)
            .map_err(|_| Error::IO)?;
        Ok(data.len())
    }

    fn erase(&mut self, off: usize, len: usize) -> LfsResult<usize> {
        self.0
            .borrow_mut()
            .erase(off as u32, (off + len) as u32)
            .map_err(|_| Error::IO)?;
        Ok(len)
    }
}

/// littlefs mounted on a [`SimFlash`].
///
/// littlefs2's `Filesystem` borrows its allocation and storage; each mount
/// leaks those two small boxes (the caches, a pointer to the shared flash)
/// so that the mounted file system can live in this struct.
pub struct LittlefsStore {
    flash: Rc<RefCell<SimFlash>>,
    fs: Option<Filesystem<'static, Dev>>,
    shadow: SimFlash,
}

fn e(err: Error) -> String {
    // LFS_ERR_NOSPC
    if err.code() == -28 {
        format!("{}: littlefs error -28 (NOSPC)", super::NO_SPACE)
    } else {
        format!("littlefs error {}", err.code())
    }
}

fn path(p: &str) -> Result<PathBuf, String> {
    PathBuf::try_from(p).map_err(|err| format!("{p}: {err:?}"))
}

impl LittlefsStore {
    fn mount(flash: &Rc<RefCell<SimFlash>>) -> Result<Filesystem<'static, Dev>, String> {
        let alloc: &'static mut Allocation<Dev> = Box::leak(Box::new(Allocation::new()));
        let dev: &'static mut Dev = Box::leak(Box::new(Dev(Rc::clone(flash))));
        Filesystem::mount(alloc, dev).map_err(e)
    }

    /// Formats and mounts littlefs on `flash`; returns the store and the
    /// bytes that formatting and mounting read.
    pub fn format(flash: SimFlash) -> Result<(Self, u64), String> {
        let g = flash.model().geometry;
        if g.erase_size != BLOCK || g.sector_count != BLOCKS {
            return Err(format!(
                "littlefs2 fixes its geometry at build time: 256 blocks of 4 KiB, not {} of {} B",
                g.sector_count, g.erase_size
            ));
        }
        if !BLOCK.is_multiple_of(g.write_size) || !128usize.is_multiple_of(g.write_size) {
            return Err(format!(
                "write size {} B does not divide 128 B",
                g.write_size
            ));
        }
        let before = flash.stats().read_bytes;
        let flash = Rc::new(RefCell::new(flash));
        Filesystem::format(&mut Dev(Rc::clone(&flash))).map_err(e)?;
        let fs = Self::mount(&flash)?;
        for dir in ["sessions", "memory"] {
            fs.create_dir(&path(dir)?).map_err(e)?;
        }
        let shadow = flash.borrow().snapshot();
        let read = shadow.stats().read_bytes - before;
        Ok((
            LittlefsStore {
                flash,
                fs: Some(fs),
                shadow,
            },
            read,
        ))
    }

    fn fs(&self) -> Result<&Filesystem<'static, Dev>, String> {
        self.fs
            .as_ref()
            .ok_or_else(|| "file system lost".to_string())
    }

    fn done<T>(&mut self, r: Result<T, String>) -> Result<T, String> {
        self.shadow = self.flash.borrow().snapshot();
        r
    }
}

impl FileStore for LittlefsStore {
    fn name(&self) -> String {
        "esp-claw-littlefs".into()
    }

    fn notes(&self) -> Vec<String> {
        vec!["littlefs 2 (littlefs2 0.8): 4 KiB blocks, 128 B read/program units, 512 B cache, block_cycles 512, as esp_littlefs".into()]
    }

    fn flash(&self) -> &SimFlash {
        &self.shadow
    }

    fn read(&mut self, p: &str) -> Result<Option<Vec<u8>>, String> {
        let r = (|| {
            let fs = self.fs()?;
            let pb = path(p)?;
            let got = fs.open_file_and_then(&pb, |f| {
                let mut out = vec![0u8; f.len()?];
                let mut done = 0;
                while done < out.len() {
                    let n = f.read(&mut out[done..])?;
                    if n == 0 {
                        break;
                    }
                    done += n;
                }
                out.truncate(done);
                Ok(out)
            });
            match got {
                Ok(v) => Ok(Some(v)),
                Err(err) if err == Error::NO_SUCH_ENTRY => Ok(None),
                Err(err) => Err(e(err)),
            }
        })();
        self.done(r)
    }

    fn size(&mut self, p: &str) -> Result<Option<u64>, String> {
        let r = (|| match self.fs()?.metadata(&path(p)?) {
            Ok(m) => Ok(Some(m.len() as u64)),
            Err(err) if err == Error::NO_SUCH_ENTRY => Ok(None),
            Err(err) => Err(e(err)),
        })();
        self.done(r)
    }

    fn write(&mut self, p: &str, data: &[u8]) -> Result<(), String> {
        let r = (|| self.fs()?.write(&path(p)?, data).map_err(e))();
        self.done(r)
    }

    fn append(&mut self, p: &str, data: &[u8]) -> Result<(), String> {
        let r = (|| {
            self.fs()?
                .open_file_with_options_and_then(
                    |o| o.write(true).create(true).append(true),
                    &path(p)?,
                    |f| {
                        use littlefs2::io::Write;
                        f.write_all(data)
                    },
                )
                .map_err(e)
        })();
        self.done(r)
    }

    fn remove(&mut self, p: &str) -> Result<(), String> {
        let r = (|| match self.fs()?.remove(&path(p)?) {
            Ok(()) => Ok(()),
            Err(err) if err == Error::NO_SUCH_ENTRY => Ok(()),
            Err(err) => Err(e(err)),
        })();
        self.done(r)
    }

    fn remount(&mut self) -> Result<u64, String> {
        // Dropping the file system unmounts it; everything was closed.
        self.fs = None;
        let before = self.flash.borrow().stats().read_bytes;
        let fs = Self::mount(&self.flash);
        let r = fs.map(|fs| {
            self.fs = Some(fs);
            self.flash.borrow().stats().read_bytes - before
        });
        self.done(r)
    }
}

/// Formats `flash` for `esp-claw-littlefs` and returns its driver.
pub fn driver(flash: SimFlash) -> Result<super::EspClawDriver<LittlefsStore>, String> {
    let (store, read) = LittlefsStore::format(flash)?;
    Ok(super::EspClawDriver::new(store, read))
}
