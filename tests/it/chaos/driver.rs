//! A webhook provider: signed Stripe-style deliveries, each event with its
//! own id, redelivered until acknowledged, with random duplicate
//! redeliveries (sequential and concurrent) of events already sent.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use futures_util::future::join_all;
use rand::seq::SliceRandom;
use rand::Rng;
use rand_chacha::ChaCha8Rng;

use super::supervisor::Supervisor;
use super::verdict::{Item, Mode};
use crate::ingress::{stripe_event, stripe_signature, SECRET};

/// One business event of one source.
#[derive(Debug, Clone)]
pub struct Event {
    pub source: &'static str,
    pub id: String,
    pub body: Vec<u8>,
    /// A delivery of it got a 2xx.
    pub acked: bool,
    /// Deliveries sent (including duplicates).
    pub deliveries: u32,
}

impl Event {
    /// The idempotency key its forward carries downstream.
    pub fn key(&self) -> String {
        format!("{}:{}:forward", self.source, self.id)
    }
}

/// What the provider saw.
#[derive(Debug, Default)]
pub struct Tally {
    pub deliveries: usize,
    /// Deliveries of an event already sent at least once.
    pub duplicates: usize,
    /// Answers by status; 0 = no answer (connection refused or reset).
    pub statuses: BTreeMap<u16, usize>,
}

/// The provider side of one chaos run.
pub struct Provider {
    pub events: Vec<Event>,
    pub tally: Tally,
    client: reqwest::Client,
    cursor: usize,
}

/// Deliveries in flight at once.
const CONCURRENCY: usize = 8;
/// Chance that a round also redelivers an event already sent.
const REDELIVERY: f64 = 0.25;
/// Chance that a round sends one delivery twice at the same moment.
const CONCURRENT_DUPLICATE: f64 = 0.15;

impl Provider {
    /// `per_source` events for each source.
    pub fn new(sources: &[&'static str], per_source: usize) -> Self {
        let mut events = Vec::new();
        for i in 0..per_source {
            for source in sources {
                let id = format!("evt_{i:05}");
                let body = stripe_event(&id, "charge.succeeded", &format!("ch_{i}"));
                events.push(Event {
                    source,
                    id,
                    body,
                    acked: false,
                    deliveries: 0,
                });
            }
        }
        let client = reqwest::Client::builder()
            .timeout(Duration::from_secs(20))
            .build()
            .unwrap();
        Self {
            events,
            tally: Tally::default(),
            client,
            cursor: 0,
        }
    }

    pub fn all_acked(&self) -> bool {
        self.events.iter().all(|e| e.acked)
    }

    /// Picks a round: the next unacknowledged events, plus random
    /// redeliveries of events already sent.
    fn pick(&mut self, rng: &mut ChaCha8Rng) -> Vec<usize> {
        let n = self.events.len();
        let mut round = Vec::new();
        for step in 0..n {
            let i = (self.cursor + step) % n;
            if !self.events[i].acked && !round.contains(&i) {
                round.push(i);
                if round.len() == CONCURRENCY {
                    break;
                }
            }
        }
        if let Some(&last) = round.last() {
            self.cursor = (last + 1) % n;
        }
        let sent: Vec<usize> = (0..n).filter(|&i| self.events[i].deliveries > 0).collect();
        if rng.gen_bool(REDELIVERY) {
            if let Some(&i) = sent.choose(rng) {
                round.push(i);
            }
        }
        if rng.gen_bool(CONCURRENT_DUPLICATE) {
            if let Some(&i) = round.first() {
                round.push(i);
            }
        }
        round
    }

    /// Sends one round to `base` concurrently and records the answers.
    pub async fn round(&mut self, base: &str, rng: &mut ChaCha8Rng) {
        let round = self.pick(rng);
        let sends = round.iter().map(|&i| {
            let e = &self.events[i];
            let t = chrono::Utc::now().timestamp();
            self.client
                .post(format!("{base}/hooks/{}", e.source))
                .header("content-type", "application/json")
                .header("stripe-signature", stripe_signature(SECRET, t, &e.body))
                .body(e.body.clone())
                .send()
        });
        let answers = join_all(sends).await;
        for (&i, answer) in round.iter().zip(answers) {
            let status = answer.map(|r| r.status().as_u16()).unwrap_or(0);
            let event = &mut self.events[i];
            self.tally.deliveries += 1;
            if event.deliveries > 0 {
                self.tally.duplicates += 1;
            }
            event.deliveries += 1;
            *self.tally.statuses.entry(status).or_default() += 1;
            if (200..300).contains(&status) {
                event.acked = true;
            }
        }
    }

    /// Delivers until every event is acknowledged, restarting whatever dies.
    pub async fn deliver_all(
        &mut self,
        sup: &mut Supervisor,
        rng: &mut ChaCha8Rng,
        limit: Duration,
    ) {
        let deadline = Instant::now() + limit;
        while !self.all_acked() {
            assert!(
                Instant::now() < deadline,
                "events still unacknowledged after {limit:?}"
            );
            let base = sup.base().await;
            self.round(&base, rng).await;
            sup.reap().await;
        }
    }

    /// Asserts the provider got no answer but `allowed` statuses (0: none).
    pub fn assert_answers(&self, allowed: &[u16]) {
        let statuses = &self.tally.statuses;
        assert!(
            statuses.keys().all(|s| allowed.contains(s)),
            "answers outside {allowed:?}: {statuses:?}"
        );
    }

    /// The events as items to check: source `hon` honours keys, `ign` not.
    pub fn items(&self) -> Vec<Item> {
        self.events
            .iter()
            .map(|e| Item {
                namespace: e.source.into(),
                run_key: e.id.clone(),
                key: e.key(),
                mode: if e.source == "hon" {
                    Mode::Honours
                } else {
                    Mode::Ignores
                },
                acked: e.acked,
            })
            .collect()
    }
}
