//! The lab's vocabulary: strategies, downstream behaviours and faults.

use serde::{Serialize, Serializer};

/// A way of handling webhook deliveries, from none to oncegate's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Strategy {
    /// (a) Act on every delivery.
    NoGuard,
    /// (b) Look the event up, act, then write a "seen" flag.
    SeenAfter,
    /// (c) Look the event up, insert a "seen" row, act (two statements: a race).
    LookupInsert,
    /// (d) One atomic insert claims the event; no states, no leases.
    AtomicClaim,
    /// (e) The atomic claim with states and leases; the owner acts inline.
    Leases,
    /// (f) (e) plus an outbox: the effect is committed with the claim and
    /// sent by a dispatcher with a downstream idempotency key.
    Outbox,
    /// (g) (f) plus reconciliation of unknown outcomes: never resend
    /// blindly; probe, or park for a person.
    Reconcile,
}

impl Strategy {
    /// Every strategy, in order.
    pub const ALL: [Self; 7] = [
        Self::NoGuard,
        Self::SeenAfter,
        Self::LookupInsert,
        Self::AtomicClaim,
        Self::Leases,
        Self::Outbox,
        Self::Reconcile,
    ];

    /// The letter the docs use (docs/lab.md).
    pub fn letter(self) -> &'static str {
        ["a", "b", "c", "d", "e", "f", "g"][self.index()]
    }

    /// The command-line and JSON name.
    pub fn slug(self) -> &'static str {
        [
            "no-guard",
            "seen-after",
            "lookup-insert",
            "atomic-claim",
            "leases",
            "outbox",
            "reconcile",
        ][self.index()]
    }

    /// A short title.
    pub fn title(self) -> &'static str {
        [
            "no guard",
            "seen flag after the effect",
            "lookup, then insert",
            "atomic claim, no states",
            "claim with states and leases",
            "+ outbox and downstream key",
            "+ reconciliation of unknowns",
        ][self.index()]
    }

    /// The downstream behaviours this strategy is simulated against. Only
    /// the outbox strategies send a key, so only for them does it matter
    /// whether the target honours one.
    pub fn downstreams(self) -> &'static [Downstream] {
        match self {
            Self::Outbox | Self::Reconcile => &[Downstream::KeyHonoured, Downstream::KeyIgnored],
            _ => &[Downstream::NoKey],
        }
    }

    pub(crate) fn index(self) -> usize {
        self as usize
    }
}

/// What the downstream target does with an idempotency key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Downstream {
    /// The strategy sends no key: the target applies every request.
    NoKey,
    /// A key is sent and the target deduplicates by it.
    KeyHonoured,
    /// A key is sent and the target ignores it (most email and CRM APIs);
    /// it can be probed by reference.
    KeyIgnored,
}

impl Downstream {
    /// The JSON name.
    pub fn slug(self) -> &'static str {
        match self {
            Self::NoKey => "no-key",
            Self::KeyHonoured => "key-honoured",
            Self::KeyIgnored => "key-ignored",
        }
    }

    /// Words for tables.
    pub fn title(self) -> &'static str {
        match self {
            Self::NoKey => "no key sent",
            Self::KeyHonoured => "target honours key",
            Self::KeyIgnored => "target ignores key",
        }
    }

    pub(crate) fn index(self) -> usize {
        self as usize
    }
}

/// Where a crash hits, relative to the side effect.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CrashPoint {
    /// After the guard, before the effect is sent.
    Before,
    /// After the target applied the effect, before it is recorded.
    After,
}

impl CrashPoint {
    /// The command-line name.
    pub fn slug(self) -> &'static str {
        match self {
            Self::Before => "before",
            Self::After => "after",
        }
    }
}

/// A fault, as chosen on the command line (crash points apart).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FaultKind {
    /// See [`Fault::Concurrent`].
    Concurrent,
    /// See [`Fault::LostAck`].
    LostAck,
    /// See [`Fault::Crash`].
    Crash,
    /// See [`Fault::Timeout`].
    Timeout,
    /// See [`Fault::Storm`].
    Storm,
}

impl FaultKind {
    /// Every kind.
    pub const ALL: [Self; 5] = [
        Self::Concurrent,
        Self::LostAck,
        Self::Crash,
        Self::Timeout,
        Self::Storm,
    ];

    /// The command-line name.
    pub fn slug(self) -> &'static str {
        match self {
            Self::Concurrent => "concurrent",
            Self::LostAck => "lost-ack",
            Self::Crash => "crash",
            Self::Timeout => "timeout",
            Self::Storm => "storm",
        }
    }
}

/// What goes wrong for a hit event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Fault {
    /// The provider sends 2–4 copies within 5 ms.
    Concurrent,
    /// The first 2xx acknowledgement is lost; the provider redelivers.
    LostAck,
    /// The process crashes at this point of the event's first attempt,
    /// losing everything in memory, and restarts a second later.
    Crash(CrashPoint),
    /// The target commits the effect, then its answer is lost (a timeout).
    Timeout,
    /// 5–12 copies over 3 s while the target is slow (1–6 s a call).
    Storm,
}

impl Fault {
    /// Every fault, with a crash fault per given crash point.
    pub fn all(crash_points: &[CrashPoint]) -> Vec<Self> {
        Self::of_kinds(&FaultKind::ALL, crash_points)
    }

    /// The faults of these kinds, crash faults once per crash point.
    pub fn of_kinds(kinds: &[FaultKind], crash_points: &[CrashPoint]) -> Vec<Self> {
        let mut faults = Vec::new();
        for kind in kinds {
            match kind {
                FaultKind::Concurrent => faults.push(Self::Concurrent),
                FaultKind::LostAck => faults.push(Self::LostAck),
                FaultKind::Crash => faults.extend(crash_points.iter().map(|p| Self::Crash(*p))),
                FaultKind::Timeout => faults.push(Self::Timeout),
                FaultKind::Storm => faults.push(Self::Storm),
            }
        }
        faults
    }

    /// The JSON name.
    pub fn slug(self) -> &'static str {
        match self {
            Self::Concurrent => "concurrent",
            Self::LostAck => "lost-ack",
            Self::Crash(CrashPoint::Before) => "crash-before",
            Self::Crash(CrashPoint::After) => "crash-after",
            Self::Timeout => "timeout",
            Self::Storm => "storm",
        }
    }

    /// A short title.
    pub fn title(self) -> &'static str {
        match self {
            Self::Concurrent => "concurrent duplicate deliveries",
            Self::LostAck => "redelivery after a lost acknowledgement",
            Self::Crash(CrashPoint::Before) => "crash before the side effect",
            Self::Crash(CrashPoint::After) => "crash after the side effect, before recording",
            Self::Timeout => "timeout after the target committed",
            Self::Storm => "retry storm against a slow target",
        }
    }

    /// One sentence on what the simulator does.
    pub fn description(self) -> &'static str {
        match self {
            Self::Concurrent => {
                "The provider sends 2 to 4 copies of a hit event within 5 ms, as parallel \
                 provider workers or a replay do."
            }
            Self::LostAck => {
                "The handler answers 2xx, but the acknowledgement never reaches the provider, \
                 which redelivers 10 s later."
            }
            Self::Crash(CrashPoint::Before) => {
                "The process dies after the guard and before the side effect of a hit event's \
                 first attempt, losing all in-memory work (other events in flight too), and \
                 restarts 1 s later."
            }
            Self::Crash(CrashPoint::After) => {
                "The process dies after the target applied a hit event's side effect and before \
                 anything was recorded, losing all in-memory work, and restarts 1 s later."
            }
            Self::Timeout => {
                "The target applies the side effect of a hit event's first request, then the \
                 answer is lost: the caller sees a timeout after 10 s."
            }
            Self::Storm => {
                "The provider sends 5 to 12 copies of a hit event over 3 s while the target takes \
                 1 to 6 s per call, so copies overlap the work in flight and follow it."
            }
        }
    }

    pub(crate) fn index(self) -> usize {
        match self {
            Self::Concurrent => 0,
            Self::LostAck => 1,
            Self::Crash(CrashPoint::Before) => 2,
            Self::Crash(CrashPoint::After) => 3,
            Self::Timeout => 4,
            Self::Storm => 5,
        }
    }
}

macro_rules! serialize_as_slug {
    ($($t:ty),*) => {$(
        impl Serialize for $t {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(self.slug())
            }
        }
    )*};
}

serialize_as_slug!(Strategy, Downstream, Fault);
