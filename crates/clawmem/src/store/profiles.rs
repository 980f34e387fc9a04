//! Profile documents (ESP-Claw's `*.md` profiles: soul, user, memory
//! notes, ...), each stored as an object of type `OBJ_PROFILE` keyed by its
//! tag (`objects.rs` owns objects on flash; this file owns the profile API).
//!
//! Behind the `profiles` feature. A build without it still relocates and
//! checkpoints the profile objects a store holds (they are plain objects to
//! the layers below), so mounting a store written with profiles loses
//! nothing.
//!
//! Power loss: a profile write (and a write-if-absent) is one object write,
//! atomic; the old document, or none, stands until the new one commits.

use core::borrow::BorrowMut;

use embedded_storage::nor_flash::NorFlash;

use super::objects::OBJ_PROFILE;
use super::{Store, Work};
use crate::error::{fail, Error, Fail, Kind};
use crate::profile::ProfileDoc;

impl<F: NorFlash, const MAX_SESSIONS: usize, W: BorrowMut<Work>> Store<F, MAX_SESSIONS, W> {
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
        let r = self.profile_read_inner(doc, out);
        self.surface(r)
    }

    /// [`profile_read`](Self::profile_read) with the engine's error.
    pub(crate) fn profile_read_inner(
        &mut self,
        doc: ProfileDoc,
        out: &mut [u8],
    ) -> Result<usize, Fail> {
        if let Some(n) = self.read_object(OBJ_PROFILE, u32::from(doc.tag()), out)? {
            return Ok(n);
        }
        let default = doc.default_contents();
        let Some(dst) = out.get_mut(..default.len()) else {
            return Err(self.log.parked().buffer_too_small(default.len()));
        };
        match self.profile_write_inner(doc, default) {
            Ok(()) => {}
            Err(e) if e.kind() == Kind::Full => {}
            Err(e) => return Err(e),
        }
        dst.copy_from_slice(default.as_bytes());
        Ok(default.len())
    }

    /// Length of a profile document (its default's if never written).
    pub fn profile_len(&mut self, doc: ProfileDoc) -> Result<usize, Error<F::Error>> {
        let r = self.profile_len_inner(doc);
        self.surface(r)
    }

    /// [`profile_len`](Self::profile_len) with the engine's error.
    pub(crate) fn profile_len_inner(&mut self, doc: ProfileDoc) -> Result<usize, Fail> {
        match self
            .objects
            .get(self.object_index(OBJ_PROFILE, u32::from(doc.tag())))
        {
            Some(o) => Ok(o.len as usize),
            None => Ok(doc.default_contents().len()),
        }
    }

    /// Writes a profile document only if none is stored yet, and says
    /// whether it wrote: how a firmware seeds `soul.md`, `identity.md` and
    /// `user.md` from its recovery copies on first boot without overwriting
    /// what the user changed since (ESP-Claw's `claw_memory_profile_init_defaults`
    /// creates the files that do not exist and leaves the others). Present
    /// means stored: a document [`profile_read`](Self::profile_read) created
    /// with its default counts, so seed before the first read. The size
    /// limit is checked first, present or not ([`Error::TooLarge`]).
    ///
    /// Power loss: as [`profile_write`](Self::profile_write), one atomic
    /// object write; after a cut the document is absent or the new one, so
    /// calling again after the next mount finishes the seeding.
    pub fn profile_write_if_absent(
        &mut self,
        doc: ProfileDoc,
        body: &str,
    ) -> Result<bool, Error<F::Error>> {
        let r = self.profile_write_if_absent_inner(doc, body);
        self.surface(r)
    }

    /// [`profile_write_if_absent`](Self::profile_write_if_absent) with the engine's error.
    pub(crate) fn profile_write_if_absent_inner(
        &mut self,
        doc: ProfileDoc,
        body: &str,
    ) -> Result<bool, Fail> {
        let present = self.object_index(OBJ_PROFILE, u32::from(doc.tag())) < self.objects.len();
        if present && body.len() <= self.config.profile_max_bytes {
            return Ok(false);
        }
        self.profile_write_inner(doc, body)?;
        Ok(true)
    }

    /// Replaces a profile document whole.
    ///
    /// Power loss: atomic; a read after any cut returns the old or the new
    /// document, never a mix.
    pub fn profile_write(&mut self, doc: ProfileDoc, body: &str) -> Result<(), Error<F::Error>> {
        let r = self.profile_write_inner(doc, body);
        self.surface(r)
    }

    /// [`profile_write`](Self::profile_write) with the engine's error.
    pub(crate) fn profile_write_inner(&mut self, doc: ProfileDoc, body: &str) -> Result<(), Fail> {
        if body.len() > self.config.profile_max_bytes {
            let limit = self.config.profile_max_bytes;
            let f = fail!(TooLarge, "profile document");
            return Err(self.log.parked().too_large(f, body.len(), limit));
        }
        self.write_object(OBJ_PROFILE, u32::from(doc.tag()), body.as_bytes(), None)
    }
}
