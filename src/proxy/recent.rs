//! The answers of keys this process completed lately, kept in memory, so
//! that a retry (n8n's *Retry On Fail* comes seconds after the first try)
//! is replayed without a database read.
//!
//! Why an entry can stand for the database's read: a completed run is
//! final (no move leaves `completed`), and the answer kept beside it does
//! not change while its window lasts. Retention removes neither before
//! the run's archive window (a day at the least) has passed since its last
//! change, far beyond [`HORIZON_MS`]. So an entry is used only for the
//! same scoped key and fingerprint, and only until the earlier of its
//! answer's window end and [`HORIZON_MS`] after the completion began; by
//! the injected clock, as the database's reads are. Anything else (no
//! entry, another fingerprint, an entry past its time) reads the database
//! as before. A retry that reaches another node reads its database too:
//! only this process's completions are remembered.
//!
//! The memory is bounded by bytes (`[[proxies]] replay_cache_bytes`): an
//! entry weighs its key, fingerprint, headers and body; the least useful
//! go first, and an answer larger than the bound allows is not kept.

use std::sync::Arc;

use quick_cache::sync::Cache;
use quick_cache::Weighter;

use super::Answer;
use crate::clock::Millis;

/// The longest an entry is used after its completion began.
pub const HORIZON_MS: Millis = 10 * 60 * 1_000;

/// The shortest archive window retention allows
/// (`retention.archive_after_days` is at least 1): no completed run or
/// kept answer is removed sooner after the run's last change.
const SHORTEST_ARCHIVE_MS: Millis = 86_400_000;

const _: () = assert!(HORIZON_MS < SHORTEST_ARCHIVE_MS);

/// Bytes counted for an entry beside its strings and body.
const ENTRY_OVERHEAD: u64 = 128;

/// One remembered answer.
#[derive(Debug)]
struct Entry {
    payload_hash: String,
    answer: Answer,
    until: Millis,
}

/// What an entry weighs: roughly the bytes it holds.
#[derive(Debug, Clone, Copy)]
struct Bytes;

impl Weighter<String, Arc<Entry>> for Bytes {
    fn weight(&self, key: &String, entry: &Arc<Entry>) -> u64 {
        let headers: usize = entry
            .answer
            .headers
            .iter()
            .map(|(n, v)| n.len() + v.len())
            .sum();
        let held = key.len() + entry.payload_hash.len() + headers + entry.answer.body.len();
        ENTRY_OVERHEAD + held as u64
    }
}

/// The recent answers of one proxy, by scoped key.
pub struct RecentAnswers {
    cache: Option<Cache<String, Arc<Entry>, Bytes>>,
}

impl std::fmt::Debug for RecentAnswers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let held = self.cache.as_ref().map_or(0, Cache::len);
        f.debug_struct("RecentAnswers")
            .field("held", &held)
            .finish()
    }
}

impl RecentAnswers {
    /// Remembers at most `bytes` of answers; 0 remembers none.
    pub fn new(bytes: usize) -> Self {
        let cache = (bytes > 0).then(|| {
            // A low guess at the count (4 KiB an entry): the table grows as
            // it fills, and the bytes bound it.
            let estimated = (bytes / 4_096).clamp(16, 1 << 18);
            Cache::with_weighter(estimated, bytes as u64, Bytes)
        });
        Self { cache }
    }

    /// Remembers `answer`, kept for `key` completed with `payload_hash`
    /// by a completion that began at `began` and keeps it `window_ms`.
    pub fn remember(
        &self,
        key: &str,
        payload_hash: &str,
        answer: &Answer,
        began: Millis,
        window_ms: Millis,
    ) {
        let Some(cache) = &self.cache else { return };
        let entry = Entry {
            payload_hash: payload_hash.to_owned(),
            answer: answer.clone(),
            until: began.saturating_add(window_ms.min(HORIZON_MS)),
        };
        cache.insert(key.to_owned(), Arc::new(entry));
    }

    /// The answer remembered for `key` with `payload_hash`, if it is
    /// still good at `now`.
    pub fn replay(&self, key: &str, payload_hash: &str, now: Millis) -> Option<Answer> {
        let entry = self.cache.as_ref()?.get(key)?;
        (entry.payload_hash == payload_hash && now < entry.until).then(|| entry.answer.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(body: &str) -> Answer {
        Answer {
            status: 201,
            headers: vec![("content-type".into(), "application/json".into())],
            body: body.as_bytes().to_vec(),
        }
    }

    #[test]
    fn an_answer_is_replayed_for_its_fingerprint_until_its_window_or_the_horizon_ends() {
        let recent = RecentAnswers::new(1 << 20);
        recent.remember("alice:k1", "sha256:a", &answer("{\"id\":1}"), 1_000, 5_000);
        assert_eq!(
            recent.replay("alice:k1", "sha256:a", 5_999),
            Some(answer("{\"id\":1}"))
        );
        assert_eq!(
            recent.replay("alice:k1", "sha256:a", 6_000),
            None,
            "window over"
        );
        assert_eq!(
            recent.replay("alice:k1", "sha256:b", 2_000),
            None,
            "another body"
        );
        assert_eq!(
            recent.replay("bob:k1", "sha256:a", 2_000),
            None,
            "another key"
        );

        recent.remember(
            "alice:k2",
            "sha256:a",
            &answer("{}"),
            1_000,
            SHORTEST_ARCHIVE_MS,
        );
        let last = 1_000 + HORIZON_MS - 1;
        assert!(recent.replay("alice:k2", "sha256:a", last).is_some());
        assert_eq!(
            recent.replay("alice:k2", "sha256:a", last + 1),
            None,
            "horizon over"
        );
    }

    #[test]
    fn nothing_is_remembered_without_room() {
        let off = RecentAnswers::new(0);
        off.remember("k", "h", &answer("{}"), 0, 60_000);
        assert_eq!(off.replay("k", "h", 1), None);

        let small = RecentAnswers::new(4_096);
        small.remember("big", "h", &answer(&"x".repeat(10_000)), 0, 60_000);
        assert_eq!(small.replay("big", "h", 1), None, "larger than the bound");
        for i in 0..1_000 {
            small.remember(&format!("k{i}"), "h", &answer("{}"), 0, 60_000);
        }
        let held = (0..1_000)
            .filter(|i| small.replay(&format!("k{i}"), "h", 1).is_some())
            .count();
        assert!(held > 0 && held < 1_000, "bounded by bytes: {held} held");
    }
}
