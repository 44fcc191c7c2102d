//! Signed webhook storms with duplicates: each event is delivered two or
//! three times, sometimes two at once, the rest later (some after a
//! kill). Every delivery is retried like a provider would until it gets a
//! 2xx (a killed instance's requests fail).

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use super::client::{retryable, Api, Rng, Tally};
use crate::workloads::stripe_event;

/// How long one delivery is retried before the sender gives up.
const GIVE_UP: Duration = Duration::from_secs(120);

/// Delivers `body` until a 2xx; notes `id` as accepted.
async fn deliver(api: &Api, tally: &Tally, id: &str, body: &str) {
    Tally::bump(&tally.deliveries);
    let deadline = Instant::now() + GIVE_UP;
    while Instant::now() < deadline {
        let (status, answer) = api.hook(tally, body).await;
        if (200..300).contains(&status) {
            if answer["received"] != true {
                tally.violation(format!("event {id}: 2xx without received: {answer}"));
            }
            tally.accepted.lock().unwrap().insert(id.to_owned());
            return;
        }
        if !retryable(status) {
            tally.violation(format!("event {id}: answered {status} {answer}"));
            return;
        }
        Tally::bump(&tally.retried);
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    tally.violation(format!("event {id}: no 2xx within {GIVE_UP:?}"));
}

/// One provider: new events every `pause` until `stop`, then waits for
/// its late redeliveries.
pub async fn storm(
    sender: usize,
    seed: u64,
    pause: Duration,
    api: Arc<Api>,
    tally: Arc<Tally>,
    stop: CancellationToken,
) {
    let mut rng = Rng::new(seed ^ ((sender as u64) << 32));
    let mut later = JoinSet::new();
    let mut seq = 0u64;
    while !stop.is_cancelled() {
        let id = format!("evt_{sender}_{seq:06}");
        seq += 1;
        let body = stripe_event(&id);
        let copies = 2 + rng.below(2);
        let at_once = if rng.chance(30) { 2 } else { 1 };
        if at_once == 2 {
            tokio::join!(
                deliver(&api, &tally, &id, &body),
                deliver(&api, &tally, &id, &body)
            );
        } else {
            deliver(&api, &tally, &id, &body).await;
        }
        for _ in at_once..copies {
            let wait = Duration::from_millis(500 + rng.below(14_500));
            let (api, tally, id, body) = (api.clone(), tally.clone(), id.clone(), body.clone());
            later.spawn(async move {
                tokio::time::sleep(wait).await;
                deliver(&api, &tally, &id, &body).await;
            });
        }
        while later.try_join_next().is_some() {}
        tokio::time::sleep(pause).await;
    }
    while later.join_next().await.is_some() {}
}
