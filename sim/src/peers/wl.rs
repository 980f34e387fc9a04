//! A model of ESP-IDF's `wear_levelling` component (`WL_Flash`) on a
//! [`SimFlash`]: the layer that ESP-IDF's FAT on SPI flash sits on.
//!
//! Layout of the partition, as `WL_Flash::config` lays it out:
//!
//! ```text
//! [ data area: L logical sectors + 1 dummy ][ state copy 1 ][ state copy 2 ][ config ]
//! ```
//!
//! - A state copy is a 48-byte header followed by one 16-byte record per
//!   dummy move of the current lap; it takes
//!   `ceil((48 + sectors * 16) / sector)` sectors (two sectors for a 1 MiB
//!   partition of 4 KiB sectors).
//! - The config takes one sector, written at format time.
//! - Every sector erase of the data area counts an access; after
//!   `max_count` accesses (ESP-IDF's `updaterate`, 16) the dummy sector moves
//!   before the erase is mapped: the sector after it is copied into it, the
//!   move's 16-byte record slot is programmed in both state copies (ESP-IDF
//!   programs its first byte; the simulated flash programs whole words), and
//!   `pos` advances. When `pos` wraps, `move_count` grows and both state copies are
//!   erased and rewritten.
//! - A logical sector `l` lives at
//!   `r = (L - move_count + l) mod L`, plus one if `r >= pos`.
//!
//! Writes are sector writes: [`WearLevel::write_sector`] erases the physical
//! sector and programs it whole, as ESP-IDF's FAT glue does for every sector
//! it writes (`wl_erase_range` then `wl_write`).

use crate::flash::{SimError, SimFlash};

/// Size of the state header, as ESP-IDF's `wl_state_t`.
const STATE_HEADER: usize = 48;
/// Size of one dummy-move record slot (`wr_size`, 16).
const RECORD: usize = 16;
/// ESP-IDF's `WL_DEFAULT_UPDATERATE`.
pub const DEFAULT_UPDATERATE: u32 = 16;
const MAGIC: u32 = 0x574c_5354; // "WLST"

/// The wear-levelling layer over a flash it owns.
#[derive(Clone, Debug)]
pub struct WearLevel {
    flash: SimFlash,
    sector: usize,
    /// Logical sectors (the data area without the dummy).
    logical: usize,
    /// Sectors of one state copy.
    state_sectors: usize,
    /// The dummy's physical index in the data area.
    pos: usize,
    move_count: usize,
    access_count: u32,
    max_count: u32,
}

fn io(e: SimError) -> String {
    e.to_string()
}

impl WearLevel {
    /// The layout for `flash`, ESP-IDF's move period (`updaterate` 16).
    fn layout(flash: &SimFlash) -> Result<(usize, usize, usize, u32), String> {
        let g = flash.model().geometry;
        let sector = g.erase_size;
        let sectors = g.sector_count;
        let state_sectors = (STATE_HEADER + sectors * RECORD).div_ceil(sector);
        let data = sectors
            .checked_sub(2 * state_sectors + 1)
            .filter(|d| *d >= 3)
            .ok_or_else(|| format!("{sectors} sectors are too few for wear levelling"))?;
        // `initSections`: `flash_size / state_size * updaterate`, replaced by
        // `updaterate` itself whenever that is set (it is, to 16).
        Ok((sector, data - 1, state_sectors, DEFAULT_UPDATERATE))
    }

    /// Formats the layer: erases the state copies and writes the state and
    /// config, as ESP-IDF does on first use of a partition. The data area is
    /// left as it is.
    pub fn format(flash: SimFlash) -> Result<Self, String> {
        let (sector, logical, state_sectors, max_count) = Self::layout(&flash)?;
        let mut wl = WearLevel {
            flash,
            sector,
            logical,
            state_sectors,
            pos: 0,
            move_count: 0,
            access_count: 0,
            max_count,
        };
        wl.write_state()?;
        let cfg = wl.config_addr();
        wl.flash
            .erase(cfg as u32, (cfg + sector) as u32)
            .map_err(io)?;
        let mut c = vec![0xFF; 32];
        c[..4].copy_from_slice(&MAGIC.to_le_bytes());
        c[4..8].copy_from_slice(&(sector as u32).to_le_bytes());
        c[8..12].copy_from_slice(&(wl.logical as u32).to_le_bytes());
        c[12..16].copy_from_slice(&max_count.to_le_bytes());
        wl.flash.program(cfg as u32, &c).map_err(io)?;
        Ok(wl)
    }

    /// Mounts a formatted layer: reads the state and counts the move records
    /// of the current lap to find `pos` (the access count starts at 0, as it
    /// lives in RAM only).
    pub fn mount(mut flash: SimFlash) -> Result<Self, String> {
        let (sector, logical, state_sectors, max_count) = Self::layout(&flash)?;
        let base = (logical + 1) * sector;
        let mut head = [0u8; STATE_HEADER];
        flash.read(base as u32, &mut head).map_err(io)?;
        let word = |i: usize| u32::from_le_bytes(head[i * 4..i * 4 + 4].try_into().unwrap());
        if word(0) != MAGIC {
            return Err("wear levelling: no valid state".into());
        }
        let move_count = word(1) as usize;
        let mut pos = 0;
        let mut rec = [0u8; RECORD];
        while pos < logical + 1 {
            let at = base + STATE_HEADER + pos * RECORD;
            flash.read(at as u32, &mut rec).map_err(io)?;
            if rec.iter().all(|b| *b == 0xFF) {
                break;
            }
            pos += 1;
        }
        Ok(WearLevel {
            flash,
            sector,
            logical,
            state_sectors,
            pos,
            move_count,
            access_count: 0,
            max_count,
        })
    }

    /// Sets the number of sector erases between two dummy moves.
    pub fn set_move_period(&mut self, erases: u32) {
        self.max_count = erases.max(1);
    }

    /// Logical sectors available to the file system.
    pub fn sectors(&self) -> usize {
        self.logical
    }

    /// Sector size in bytes.
    pub fn sector_size(&self) -> usize {
        self.sector
    }

    /// The dummy's physical index and the laps completed.
    pub fn position(&self) -> (usize, usize) {
        (self.pos, self.move_count)
    }

    /// The flash underneath.
    pub fn flash(&self) -> &SimFlash {
        &self.flash
    }

    /// Unmounts and returns the flash.
    pub fn into_flash(self) -> SimFlash {
        self.flash
    }

    fn config_addr(&self) -> usize {
        (self.logical + 1 + 2 * self.state_sectors) * self.sector
    }

    fn state_addr(&self, copy: usize) -> usize {
        (self.logical + 1 + copy * self.state_sectors) * self.sector
    }

    /// The physical sector of logical sector `l`.
    pub fn physical(&self, l: usize) -> usize {
        let n = self.logical;
        let r = (n - self.move_count % n + l) % n;
        if r >= self.pos {
            r + 1
        } else {
            r
        }
    }

    /// Erases and rewrites both state copies (header only: no records).
    fn write_state(&mut self) -> Result<(), String> {
        let mut head = vec![0xFF; STATE_HEADER];
        head[..4].copy_from_slice(&MAGIC.to_le_bytes());
        head[4..8].copy_from_slice(&(self.move_count as u32).to_le_bytes());
        head[8..12].copy_from_slice(&((self.logical + 1) as u32).to_le_bytes());
        head[12..16].copy_from_slice(&self.max_count.to_le_bytes());
        for copy in 0..2 {
            let a = self.state_addr(copy);
            self.flash
                .erase(a as u32, (a + self.state_sectors * self.sector) as u32)
                .map_err(io)?;
            self.flash.program(a as u32, &head).map_err(io)?;
        }
        Ok(())
    }

    /// Counts one access and moves the dummy when due (`WL_Flash::updateWL`).
    fn update(&mut self) -> Result<(), String> {
        self.access_count += 1;
        if self.access_count < self.max_count {
            return Ok(());
        }
        self.access_count = 0;
        let s = self.sector;
        let from = if self.pos >= self.logical {
            0
        } else {
            self.pos + 1
        };
        let mut buf = vec![0u8; s];
        self.flash.read((from * s) as u32, &mut buf).map_err(io)?;
        let dummy = self.pos * s;
        self.flash
            .erase(dummy as u32, (dummy + s) as u32)
            .map_err(io)?;
        self.flash.program(dummy as u32, &buf).map_err(io)?;
        let rec = [0u8; RECORD];
        for copy in 0..2 {
            let a = self.state_addr(copy) + STATE_HEADER + self.pos * RECORD;
            self.flash.program(a as u32, &rec).map_err(io)?;
        }
        self.pos += 1;
        if self.pos > self.logical {
            self.pos = 0;
            self.move_count += 1;
            if self.move_count >= self.logical {
                self.move_count = 0;
            }
            self.write_state()?;
        }
        Ok(())
    }

    /// Reads logical sector `l` whole into `buf`.
    pub fn read_sector(&mut self, l: usize, buf: &mut [u8]) -> Result<(), String> {
        if l >= self.logical || buf.len() != self.sector {
            return Err(format!("wear levelling: bad read of sector {l}"));
        }
        let p = self.physical(l) * self.sector;
        self.flash.read(p as u32, buf).map_err(io)
    }

    /// Writes logical sector `l` whole: erase, then program.
    pub fn write_sector(&mut self, l: usize, data: &[u8]) -> Result<(), String> {
        if l >= self.logical || data.len() != self.sector {
            return Err(format!("wear levelling: bad write of sector {l}"));
        }
        // `WL_Flash::erase_sector` counts the access (and may move the
        // dummy) before it maps the address.
        self.update()?;
        let p = self.physical(l) * self.sector;
        self.flash
            .erase(p as u32, (p + self.sector) as u32)
            .map_err(io)?;
        self.flash.program(p as u32, data).map_err(io)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Preset;

    fn flash() -> SimFlash {
        SimFlash::new(Preset::Esp32.model(64 * 4096).unwrap())
    }

    fn pattern(l: usize, gen: u8) -> Vec<u8> {
        (0..4096).map(|i| (i as u8) ^ (l as u8) ^ gen).collect()
    }

    #[test]
    fn layout_of_a_small_partition() {
        let wl = WearLevel::format(flash()).unwrap();
        // 64 sectors: one state copy is one sector (48 + 64 * 16 <= 4096),
        // config one sector, one dummy.
        assert_eq!(wl.sectors(), 64 - 2 - 1 - 1);
        assert_eq!(wl.position(), (0, 0));
    }

    #[test]
    fn the_dummy_moves_and_the_mapping_stays_a_bijection() {
        let mut wl = WearLevel::format(flash()).unwrap();
        wl.set_move_period(3);
        let n = wl.sectors();
        let before: Vec<usize> = (0..n).map(|l| wl.physical(l)).collect();
        for i in 0..7 {
            wl.write_sector(i % n, &pattern(i % n, 0)).unwrap();
        }
        assert_eq!(
            wl.position(),
            (2, 0),
            "7 writes at a period of 3: two moves"
        );
        let after: Vec<usize> = (0..n).map(|l| wl.physical(l)).collect();
        assert_ne!(before, after, "the mapping moved");
        let mut seen = after.clone();
        seen.sort_unstable();
        seen.dedup();
        assert_eq!(seen.len(), n, "no two logical sectors share a physical one");
        assert!(!after.contains(&wl.position().0), "the dummy holds no data");
    }

    #[test]
    fn data_survives_dummy_moves_laps_and_remounts() {
        let mut wl = WearLevel::format(flash()).unwrap();
        wl.set_move_period(1);
        let n = wl.sectors();
        for l in 0..n {
            wl.write_sector(l, &pattern(l, 1)).unwrap();
        }
        // More than a full lap of moves: every sector is shifted.
        for k in 0..(n + 5) {
            let l = k % 4;
            wl.write_sector(l, &pattern(l, 2)).unwrap();
        }
        assert!(wl.position().1 >= 1, "a lap completed");
        let (pos, laps) = wl.position();
        let mut wl = WearLevel::mount(wl.into_flash()).unwrap();
        assert_eq!(wl.position(), (pos, laps), "mount recovers the state");
        let mut buf = vec![0; 4096];
        for l in 0..n {
            wl.read_sector(l, &mut buf).unwrap();
            let gen = if l < 4 { 2 } else { 1 };
            assert_eq!(buf, pattern(l, gen), "sector {l}");
        }
        // The moves spread the erases: the data area's sectors were all erased.
        let counts = &wl.flash().stats().erase_counts;
        assert!(counts[..n + 1].iter().all(|c| *c >= 1));
    }
}
