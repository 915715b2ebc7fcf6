//! Flow-finish events: where the arrows from launches land.

use crate::index::event::{pack, unpack, NONE};
use crate::index::keys::{KeyId, Num};

/// A flow-finish (`ac2g`, `ph: "f"`) event: where the arrow from a launch lands.
#[derive(Clone, Debug)]
pub(crate) struct Flow {
    pub(crate) ordinal: u32,
    pub(crate) pid: KeyId,
    pub(crate) tid: KeyId,
    /// The lane the reference moves it to.
    pub(crate) new_tid: KeyId,
    /// The tracked event whose final place it takes (cgfast's pipeline).
    pub(crate) follows: u32,
    ts: u64,
    flags: u8,
}

const FLOW_REMOVED: u8 = 1;
const FLOW_TS_SET: u8 = 2;
const FLOW_TS_INT: u8 = 4;

impl Flow {
    pub(crate) fn ts(&self) -> Option<Num> {
        (self.flags & FLOW_TS_SET != 0).then(|| unpack(self.ts, self.flags & FLOW_TS_INT != 0))
    }

    pub(crate) fn removed(&self) -> bool {
        self.flags & FLOW_REMOVED != 0
    }

    pub(crate) fn remove(&mut self) {
        self.flags |= FLOW_REMOVED;
    }

    pub(crate) fn current_tid(&self) -> KeyId {
        if self.new_tid == NONE {
            self.tid
        } else {
            self.new_tid
        }
    }
}

impl Flow {
    /// The flow at `ordinal` in `traceEvents`, on lane `tid` of process `pid`, at `ts`.
    pub(crate) fn observed(ordinal: u32, pid: KeyId, tid: KeyId, ts: Option<Num>) -> Flow {
        let ts = ts.map(pack);
        let (value, int) = ts.unwrap_or((0, false));
        let flags = if ts.is_some() { FLOW_TS_SET | if int { FLOW_TS_INT } else { 0 } } else { 0 };
        Flow { ordinal, pid, tid, new_tid: NONE, follows: NONE, ts: value, flags }
    }
}
