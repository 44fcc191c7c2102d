//! The simulated downstream target: it counts the effects it applied per
//! event, the only number that tells duplicates and losses apart.
//!
//! A request is applied when the target finishes it, whatever became of
//! the caller meanwhile (a crashed caller's request still lands). A target
//! that honours keys remembers each key from the moment a request with it
//! arrives: a second request while the first is in progress gets 409, one
//! after it finished gets the stored 200, and neither applies anything
//! again. A probe reads by reference: found, proven absent, or (for an
//! event no probe can see) undecidable.

use axum::http::{HeaderMap, StatusCode};

use crate::clock::Millis;
use crate::outbox::classify::Attempted;

/// What a caller eventually sees.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Reply {
    /// The target answered with this status.
    Status(u16),
    /// The request was sent and no answer came back in time.
    Lost,
}

impl Reply {
    /// The attempt in the dispatcher's own terms, for classification.
    pub(super) fn attempted(self) -> Attempted {
        match self {
            Self::Status(code) => Attempted::Answered {
                status: StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
                headers: HeaderMap::new(),
                body: b"{}".to_vec(),
            },
            Self::Lost => Attempted::LostAfterSend("timed out after the request was sent".into()),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum KeyState {
    Unseen,
    InProgress,
    Done,
}

/// A request the target is still working on.
#[derive(Debug, Clone, Copy)]
struct Pending {
    event: usize,
    keyed: bool,
}

/// The target.
#[derive(Debug)]
pub(super) struct Target {
    honours: bool,
    applied: Vec<u32>,
    keys: Vec<KeyState>,
    pending: Vec<Pending>,
    /// Requests received, probes included.
    pub(super) requests: u64,
}

/// What the caller will see of one request, and when.
#[derive(Debug, Clone, Copy)]
pub(super) struct Exchange {
    /// The answer, or its loss.
    pub(super) reply: Reply,
    /// When the caller sees it.
    pub(super) after: Millis,
    /// A request to apply once the target finishes, `after_apply` from now.
    pub(super) apply: Option<(usize, Millis)>,
}

impl Target {
    pub(super) fn new(events: usize, honours: bool) -> Self {
        Self {
            honours,
            applied: vec![0; events],
            keys: vec![KeyState::Unseen; events],
            pending: Vec::new(),
            requests: 0,
        }
    }

    /// Receives a request for `event`'s effect that takes `work` ms; a
    /// `keyed` request carries the event's idempotency key. `lose_answer`
    /// drops the answer after the effect is applied; `timeout` is the
    /// caller's patience.
    pub(super) fn receive(
        &mut self,
        event: usize,
        keyed: bool,
        work: Millis,
        lose_answer: bool,
        timeout: Millis,
    ) -> Exchange {
        self.requests += 1;
        if keyed && self.honours {
            match self.keys[event] {
                // Stripe-style: a concurrent request with the same key is a conflict.
                KeyState::InProgress => return quick(Reply::Status(409)),
                // Replayed: the stored answer, nothing applied again.
                KeyState::Done => return quick(Reply::Status(200)),
                KeyState::Unseen => self.keys[event] = KeyState::InProgress,
            }
        }
        let request = self.pending.len();
        self.pending.push(Pending { event, keyed });
        let (reply, after) = if lose_answer || work > timeout {
            (Reply::Lost, timeout)
        } else {
            (Reply::Status(200), work)
        };
        Exchange {
            reply,
            after,
            apply: Some((request, work)),
        }
    }

    /// The target finishes a request: the effect happens.
    pub(super) fn apply(&mut self, request: usize) {
        let Pending { event, keyed } = self.pending[request];
        self.applied[event] += 1;
        if keyed && self.honours {
            self.keys[event] = KeyState::Done;
        }
    }

    /// A read by reference: 200 found, 404 absent, 503 undecidable.
    pub(super) fn probe(&mut self, event: usize, blind: bool) -> Reply {
        self.requests += 1;
        Reply::Status(match (blind, self.applied[event]) {
            (true, _) => 503,
            (false, 0) => 404,
            (false, _) => 200,
        })
    }

    /// How many times `event`'s effect was applied.
    pub(super) fn applied(&self, event: usize) -> u32 {
        self.applied[event]
    }
}

fn quick(reply: Reply) -> Exchange {
    Exchange {
        reply,
        after: 5,
        apply: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_honouring_target_applies_a_key_once() {
        let mut t = Target::new(1, true);
        let first = t.receive(0, true, 100, false, 10_000);
        assert_eq!(first.reply, Reply::Status(200));
        let during = t.receive(0, true, 100, false, 10_000);
        assert_eq!(during.reply, Reply::Status(409));
        t.apply(first.apply.unwrap().0);
        let after = t.receive(0, true, 100, false, 10_000);
        assert_eq!(
            (after.reply, after.apply.is_none()),
            (Reply::Status(200), true)
        );
        assert_eq!(t.applied(0), 1);
        assert_eq!(t.requests, 3);
    }

    #[test]
    fn an_ignoring_target_applies_every_request_even_with_a_lost_answer() {
        let mut t = Target::new(1, false);
        let a = t.receive(0, true, 100, true, 10_000);
        assert_eq!((a.reply, a.after), (Reply::Lost, 10_000));
        let b = t.receive(0, true, 20_000, false, 10_000);
        assert_eq!(b.reply, Reply::Lost, "slower than the caller's timeout");
        assert_eq!(t.probe(0, false), Reply::Status(404), "not applied yet");
        t.apply(a.apply.unwrap().0);
        t.apply(b.apply.unwrap().0);
        assert_eq!(t.applied(0), 2);
        assert_eq!(t.probe(0, false), Reply::Status(200));
        assert_eq!(t.probe(0, true), Reply::Status(503));
    }
}
