//! Tests of the parent module.

use super::builder::Builder;
use super::*;

fn build(now: Option<(i64, &str)>, old: Option<(i64, &str)>) -> (usize, i64, String) {
    let removals = HashSet::new();
    let mut b = Builder {
        removals: &removals,
        digest: HeadDigest::default(),
        upserts: Vec::new(),
        changed: 0,
        anomalies: Vec::new(),
        anomaly_count: 0,
    };
    let own = |h: Option<(i64, &str)>| h.map(|(s, h)| (s, h.to_owned()));
    b.chain("ns", "k", own(now), own(old));
    (b.upserts.len(), b.anomaly_count, b.digest.finish())
}

#[test]
fn heads_move_forward_only() {
    assert_eq!(build(Some((2, "b")), Some((1, "a"))).0, 1);
    assert_eq!(build(Some((1, "a")), Some((1, "a"))).0, 0);
    let (upserts, anomalies, digest) = build(Some((1, "x")), Some((2, "b")));
    assert_eq!((upserts, anomalies), (0, 1));
    // The kept entry is the old head, so the digest does not launder it.
    assert_eq!(digest, build(Some((2, "b")), Some((2, "b"))).2);
    let (upserts, anomalies, _) = build(None, Some((3, "c")));
    assert_eq!((upserts, anomalies), (0, 1));
}

#[test]
fn checkpoint_hash_covers_every_field() {
    let mut c = Checkpoint {
        id: 1,
        created_at: 5,
        chain_count: 2,
        digest: "sha256:00".into(),
        changed: 2,
        removed: 0,
        anomalies: 0,
        reason: "manual".into(),
        prev_hash: None,
        hash: String::new(),
    };
    let h = c.compute_hash();
    c.chain_count = 1;
    assert_ne!(h, c.compute_hash());
}
