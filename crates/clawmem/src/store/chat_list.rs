//! Listing the stored chat session maps, for host tools that copy a store
//! out (`clawmem-sim export` writes them as ESP-Claw's `chat_map/` files).
//! Read-only: unlike [`Store::chat_sessions`], a chat that has no map stays
//! without one.

use core::borrow::BorrowMut;

use embedded_storage::nor_flash::NorFlash;

use super::objects::OBJ_CHAT_MAP;
use super::{Store, Work};
use crate::chat::ChatSessions;
use crate::error::{fail, Error, Fail};

impl<F: NorFlash, const MAX_SESSIONS: usize, W: BorrowMut<Work>> Store<F, MAX_SESSIONS, W> {
    /// Calls `f` with every stored chat session map (in the order the store
    /// keeps its objects). Changes nothing.
    pub fn for_each_chat_sessions(
        &mut self,
        f: impl FnMut(&ChatSessions),
    ) -> Result<(), Error<F::Error>> {
        let r = self.list_chat_sessions(f);
        self.surface(r)
    }

    fn list_chat_sessions(&mut self, mut f: impl FnMut(&ChatSessions)) -> Result<(), Fail> {
        let mut k = 0;
        while let Some(o) = self.objects.get(k).copied() {
            k += 1;
            if o.ty != OBJ_CHAT_MAP {
                continue;
            }
            let Some((at, n)) = self.read_chat_map(o.key)? else {
                continue;
            };
            let w: &mut Work = self.work.borrow_mut();
            let map = ChatSessions::decode(&w.scratch[..n]).map_err(|_| {
                self.log.parked().at(
                    fail!(Corrupted, "a stored chat session map does not decode"),
                    at,
                )
            })?;
            f(&map);
        }
        Ok(())
    }
}
