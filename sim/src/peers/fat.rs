//! `esp-claw-fat`: FAT (the `fatfs` crate) on a model of ESP-IDF's wear
//! levelling ([`WearLevel`]), as ESP-Claw stores its files.
//!
//! ESP-IDF's FAT glue (`diskio_wl.c`) writes a 4 KiB FAT sector as
//! `wl_erase_range` + `wl_write`: every sector written costs a sector erase
//! and a whole-sector program. FatFs buffers sectors in RAM (its window, the
//! file buffer) and writes them back when it needs the buffer for another
//! sector or the file is synced, the second FAT copied at that point. This
//! model gives FAT the benefit of the doubt: every sector touched by one file
//! operation stays cached and each dirty sector is written back once, when
//! the operation ends (ESP-Claw closes every file it writes).

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::rc::Rc;

use fatfs::{FileSystem, FormatVolumeOptions, FsOptions};

use super::wl::WearLevel;
use super::FileStore;
use crate::flash::SimFlash;

/// The wear-levelling layer with a write-back cache of the sectors one file
/// operation touches.
struct Disk {
    wl: WearLevel,
    /// Cached sectors: logical index -> (contents, dirty).
    window: BTreeMap<usize, (Vec<u8>, bool)>,
}

impl Disk {
    fn sector(&self) -> usize {
        self.wl.sector_size()
    }

    /// Writes every dirty sector back (in address order) and empties the
    /// cache: the `f_sync`/`f_close` at the end of each file operation.
    fn sync(&mut self) -> Result<(), String> {
        for (l, (data, dirty)) in std::mem::take(&mut self.window) {
            if dirty {
                self.wl.write_sector(l, &data)?;
            }
        }
        Ok(())
    }

    /// Sector `l` in the cache; `whole` skips reading it (it is about to be
    /// overwritten whole).
    fn load(&mut self, l: usize, whole: bool) -> Result<&mut (Vec<u8>, bool), String> {
        if !self.window.contains_key(&l) {
            let mut buf = vec![0xFF; self.sector()];
            if !whole {
                self.wl.read_sector(l, &mut buf)?;
            }
            self.window.insert(l, (buf, false));
        }
        Ok(self.window.get_mut(&l).expect("just loaded"))
    }
}

/// The block device fatfs sees: a byte stream over [`Disk`].
struct Stream {
    disk: Rc<RefCell<Disk>>,
    pos: u64,
    len: u64,
}

fn io_err(e: String) -> io::Error {
    io::Error::other(e)
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let mut disk = self.disk.borrow_mut();
        let s = disk.sector() as u64;
        let n = (buf.len() as u64).min(self.len.saturating_sub(self.pos)) as usize;
        let mut done = 0;
        while done < n {
            let at = self.pos + done as u64;
            let (l, off) = ((at / s) as usize, (at % s) as usize);
            let k = (n - done).min(s as usize - off);
            let w = disk.load(l, false).map_err(io_err)?;
            buf[done..done + k].copy_from_slice(&w.0[off..off + k]);
            done += k;
        }
        self.pos += n as u64;
        Ok(n)
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let mut disk = self.disk.borrow_mut();
        let s = disk.sector() as u64;
        let n = (buf.len() as u64).min(self.len.saturating_sub(self.pos)) as usize;
        if n == 0 && !buf.is_empty() {
            return Err(io::Error::new(io::ErrorKind::WriteZero, "end of volume"));
        }
        let mut done = 0;
        while done < n {
            let at = self.pos + done as u64;
            let (l, off) = ((at / s) as usize, (at % s) as usize);
            let k = (n - done).min(s as usize - off);
            let w = disk.load(l, k == s as usize).map_err(io_err)?;
            w.0[off..off + k].copy_from_slice(&buf[done..done + k]);
            w.1 = true;
            done += k;
        }
        self.pos += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Seek for Stream {
    fn seek(&mut self, to: SeekFrom) -> io::Result<u64> {
        let p = match to {
            SeekFrom::Start(p) => p as i128,
            SeekFrom::End(d) => self.len as i128 + d as i128,
            SeekFrom::Current(d) => self.pos as i128 + d as i128,
        };
        if p < 0 || p > self.len as i128 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "seek out of the volume",
            ));
        }
        self.pos = p as u64;
        Ok(self.pos)
    }
}

/// FAT on wear levelling on a [`SimFlash`].
pub struct FatStore {
    disk: Rc<RefCell<Disk>>,
    fs: Option<FileSystem<Stream>>,
    /// A copy of the flash taken after every operation, for [`FileStore::flash`]
    /// (the live one sits behind the file system's `RefCell`). Copies share
    /// the sectors, so this costs a few pointers.
    shadow: SimFlash,
}

fn e(err: io::Error) -> String {
    // fatfs 0.3 says so when it finds no free cluster (`table.rs`).
    if err.kind() == io::ErrorKind::Other && err.to_string() == "No space left on device" {
        format!("{}: no free FAT cluster", super::NO_SPACE)
    } else {
        err.to_string()
    }
}

impl FatStore {
    fn stream(disk: &Rc<RefCell<Disk>>) -> Stream {
        let len = {
            let d = disk.borrow();
            (d.wl.sectors() * d.sector()) as u64
        };
        Stream {
            disk: Rc::clone(disk),
            pos: 0,
            len,
        }
    }

    /// Formats wear levelling and a FAT volume on `flash` (sector size = the
    /// flash's erase size, 512 B to 4 KiB) and mounts it. Returns the
    /// store and the bytes that formatting and mounting read.
    pub fn format(flash: SimFlash) -> Result<(Self, u64), String> {
        let sector = flash.model().geometry.erase_size;
        if !(512..=4096).contains(&sector) || !sector.is_power_of_two() {
            return Err(format!(
                "FAT on wear levelling needs 512 B to 4 KiB sectors, not {sector} B"
            ));
        }
        let before = flash.stats().read_bytes;
        let wl = WearLevel::format(flash)?;
        let total = wl.sectors() as u32;
        let disk = Rc::new(RefCell::new(Disk {
            wl,
            window: BTreeMap::new(),
        }));
        // ESP-IDF formats with one sector per cluster and two FATs.
        let opts = FormatVolumeOptions::new()
            .bytes_per_sector(sector as u16)
            .bytes_per_cluster(sector as u32)
            .total_sectors(total)
            .fats(2);
        fatfs::format_volume(Self::stream(&disk), opts).map_err(e)?;
        disk.borrow_mut().sync()?;
        let fs = FileSystem::new(Self::stream(&disk), FsOptions::new()).map_err(e)?;
        for dir in ["sessions", "memory"] {
            fs.root_dir().create_dir(dir).map_err(e)?;
        }
        let shadow = disk.borrow().wl.flash().snapshot();
        let mut store = FatStore {
            disk,
            fs: Some(fs),
            shadow,
        };
        store.done()?;
        let read = store.shadow.stats().read_bytes - before;
        Ok((store, read))
    }

    fn fs(&self) -> Result<&FileSystem<Stream>, String> {
        self.fs
            .as_ref()
            .ok_or_else(|| "file system lost".to_string())
    }

    /// Ends an operation: writes the window back, refreshes the shadow.
    fn done(&mut self) -> Result<(), String> {
        let mut d = self.disk.borrow_mut();
        d.sync()?;
        self.shadow = d.wl.flash().snapshot();
        Ok(())
    }

    fn finish<T>(&mut self, r: io::Result<T>) -> Result<T, String> {
        let done = self.done();
        let v = r.map_err(e)?;
        done.map(|()| v)
    }
}

fn not_found(err: &io::Error) -> bool {
    err.kind() == io::ErrorKind::NotFound
}

impl FileStore for FatStore {
    fn name(&self) -> String {
        "esp-claw-fat".into()
    }

    fn notes(&self) -> Vec<String> {
        let d = self.disk.borrow();
        vec![format!(
            "FAT (fatfs 0.3) with {} B sectors and clusters, 2 FATs, on ESP-IDF-style wear levelling ({} logical sectors, the dummy sector moves every 16 sector erases); every sector written is erased and programmed whole",
            d.sector(),
            d.wl.sectors()
        )]
    }

    fn flash(&self) -> &SimFlash {
        &self.shadow
    }

    fn read(&mut self, path: &str) -> Result<Option<Vec<u8>>, String> {
        let r = (|| {
            let mut f = match self.fs()?.root_dir().open_file(path) {
                Ok(f) => f,
                Err(err) if not_found(&err) => return Ok(None),
                Err(err) => return Err(e(err)),
            };
            let mut out = Vec::new();
            f.read_to_end(&mut out).map_err(e)?;
            Ok(Some(out))
        })();
        self.done()?;
        r
    }

    fn size(&mut self, path: &str) -> Result<Option<u64>, String> {
        let r = (|| {
            let mut f = match self.fs()?.root_dir().open_file(path) {
                Ok(f) => f,
                Err(err) if not_found(&err) => return Ok(None),
                Err(err) => return Err(e(err)),
            };
            Ok(Some(f.seek(SeekFrom::End(0)).map_err(e)?))
        })();
        self.done()?;
        r
    }

    fn write(&mut self, path: &str, data: &[u8]) -> Result<(), String> {
        let r = (|| -> io::Result<()> {
            let fs = self.fs.as_ref().ok_or_else(|| io::Error::other("lost"))?;
            let mut f = fs.root_dir().create_file(path)?;
            f.truncate()?;
            f.write_all(data)?;
            f.flush()
        })();
        self.finish(r)
    }

    fn append(&mut self, path: &str, data: &[u8]) -> Result<(), String> {
        let r = (|| -> io::Result<()> {
            let fs = self.fs.as_ref().ok_or_else(|| io::Error::other("lost"))?;
            let mut f = fs.root_dir().create_file(path)?;
            f.seek(SeekFrom::End(0))?;
            f.write_all(data)?;
            f.flush()
        })();
        self.finish(r)
    }

    fn remove(&mut self, path: &str) -> Result<(), String> {
        let r = match self.fs()?.root_dir().remove(path) {
            Err(err) if not_found(&err) => Ok(()),
            r => r,
        };
        self.finish(r)
    }

    fn remount(&mut self) -> Result<u64, String> {
        if let Some(fs) = self.fs.take() {
            let r = fs.unmount();
            self.finish(r)?;
        }
        // Power cycle: RAM state (window, access count) is gone.
        let flash = {
            let d = self.disk.borrow();
            d.wl.flash().snapshot()
        };
        let before = flash.stats().read_bytes;
        let wl = WearLevel::mount(flash)?;
        *self.disk.borrow_mut() = Disk {
            wl,
            window: BTreeMap::new(),
        };
        let fs = FileSystem::new(Self::stream(&self.disk), FsOptions::new()).map_err(e)?;
        self.fs = Some(fs);
        self.done()?;
        Ok(self.shadow.stats().read_bytes - before)
    }
}

/// Formats `flash` for `esp-claw-fat` and returns its driver.
pub fn driver(flash: SimFlash) -> Result<super::EspClawDriver<FatStore>, String> {
    let (store, read) = FatStore::format(flash)?;
    Ok(super::EspClawDriver::new(store, read))
}
