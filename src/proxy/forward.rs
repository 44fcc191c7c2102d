//! The forward of a claimed key and how its outcome settles the key: a
//! stored answer completes the run; an answer that proves nothing was done
//! (or comes from an upstream that honours keys) leaves it retryable; a
//! lost or ambiguous answer leaves it unknown, never to be resent blindly.

use super::answer::{self, Answer, Upstream};
use super::error::ProxyError;
use super::prepared::Prepared;
use super::request::Inbound;
use super::service::{Proxy, Reply};
use crate::ledger::storage::StoreError;
use crate::ledger::{OwnerCall, OwnerMove, PayloadHash};
use crate::outbox::classify::{classify, Outcome};
use crate::outbox::egress::EgressUrl;
use crate::outbox::EffectSpec;

/// Sends `req` once to `url` with the target's client (no redirects, the
/// target's timeouts); reads the answer within the proxy's bound.
pub(super) async fn send(
    p: &Prepared,
    req: &Inbound,
    url: &EgressUrl,
    upstream_key: Option<&str>,
) -> Upstream {
    let target = &p.target.config;
    let mut headers = req.upstream_headers(target, upstream_key);
    // A pass-through without a key still gets a unique webhook-id.
    let id = upstream_key.map_or_else(
        || format!("msg_{}", uuid::Uuid::new_v4().simple()),
        str::to_owned,
    );
    if let Err(why) = p.target.sign(&mut headers, &id, &req.body) {
        return Upstream::NotSent(why);
    }
    let request = p
        .target
        .client()
        .request(req.method.clone(), url.url().clone())
        .headers(headers)
        .body(req.body.clone());
    match request.send().await {
        Ok(response) => answer::read(response, &p.config, target).await,
        Err(err) if err.is_connect() || err.is_builder() => Upstream::NotSent(describe(err)),
        Err(err) => Upstream::LostAfterSend(describe(err)),
    }
}

/// An upstream answer as a reply, or the problem that stands for it.
pub(super) fn whole(sent: Upstream) -> Result<Answer, ProxyError> {
    match sent {
        Upstream::Whole(answer) => Ok(answer),
        Upstream::Partial { status, why } => Err(ProxyError::AnswerUnreadable { status, why }),
        Upstream::NotSent(e) => Err(ProxyError::NotSent(e)),
        Upstream::LostAfterSend(e) => Err(ProxyError::LostAfterSend(e)),
    }
}

/// A transport error in words, with its causes (no URL), sanitised: it
/// goes back to the caller.
fn describe(err: reqwest::Error) -> String {
    crate::ledger::service::sanitise_error(&crate::outbox::sender::describe(err))
}

/// One claimed key's forward.
pub(super) struct Forward<'a> {
    pub(super) proxy: &'a Proxy<'a>,
    pub(super) p: &'a Prepared,
    pub(super) call: OwnerCall,
    /// The request's fingerprint (the claim's payload hash).
    pub(super) payload_hash: &'a PayloadHash,
}

impl Forward<'_> {
    /// Sends the request under the target's limits and kill switch and
    /// settles the key by what came back.
    pub(super) async fn run(self, req: &Inbound, url: &EgressUrl) -> Result<Reply, ProxyError> {
        let slot = match self.proxy.slot(self.p).await {
            Ok(slot) => slot,
            Err(busy) => return Err(self.not_sent(busy).await),
        };
        // Re-checked right before the send, from a value at most 2 s old.
        let target = &self.p.target.config.name;
        if !self.proxy.switch.allows(target).await {
            return Err(self
                .not_sent(ProxyError::ActionsDisabled(target.clone()))
                .await);
        }
        let upstream_key = format!("{}:{}", self.call.namespace, self.call.key);
        let sent = send(self.p, req, url, Some(&upstream_key)).await;
        drop(slot);
        self.settle(sent).await
    }

    /// Nothing was sent: the key may be forwarded by a retry.
    async fn not_sent(&self, why: ProxyError) -> ProxyError {
        let error = why.to_string();
        self.record(
            self.proxy
                .ledger
                .finish(&self.call, &OwnerMove::FailRetryable { error }),
        )
        .await;
        why
    }

    /// Records what `sent` means for the key and answers the caller. A
    /// failed record never costs the caller the upstream's answer: the key
    /// then stays `processing`, and once its lease ends the next request
    /// finds it interrupted (unknown), never forwards it again.
    async fn settle(&self, sent: Upstream) -> Result<Reply, ProxyError> {
        let stores = match &sent {
            Upstream::Whole(a) => self.p.config.stores(a.status),
            Upstream::Partial { status, .. } => self.p.config.stores(*status),
            Upstream::NotSent(_) | Upstream::LostAfterSend(_) => false,
        };
        let ledger = self.proxy.ledger;
        match sent {
            Upstream::Whole(answer) if stores => {
                let window = self.p.config.retention.0;
                let began = self.proxy.clock.now_ms();
                let done = self
                    .proxy
                    .store
                    .complete_with_answer(&self.call, &answer, window);
                if self.record(done).await.is_some() {
                    let (key, hash) = (self.call.key.as_str(), self.payload_hash.as_str());
                    self.p.recent.remember(key, hash, &answer, began, window);
                }
                Ok(Reply::Fresh(answer))
            }
            Upstream::Partial { status, why } if stores => {
                let error = format!("the upstream answered {status} but {why}; answer not kept");
                self.record(ledger.finish(&self.call, &OwnerMove::FailTerminal { error }))
                    .await;
                Err(ProxyError::AnswerUnreadable { status, why })
            }
            Upstream::NotSent(e) => Err(self.not_sent(ProxyError::NotSent(e)).await),
            sent => {
                if self.proves_nothing_done(&sent) {
                    let error = format!("the upstream {}", describe_upstream(&sent));
                    self.record(ledger.finish(&self.call, &OwnerMove::FailRetryable { error }))
                        .await;
                } else {
                    let reason = format!("the upstream {}", describe_upstream(&sent));
                    let evidence = sent.evidence();
                    let unknown = self
                        .proxy
                        .store
                        .outcome_unknown(&self.call, &reason, &evidence);
                    self.record(unknown).await;
                }
                whole(sent).map(Reply::PassedThrough)
            }
        }
    }

    /// Whether an unstored answer lets a retry go upstream again: the
    /// target honours keys (a retry carries the same one), or the answer
    /// proves nothing was done (the outbox's transient class: 429, 503
    /// with `Retry-After`, a status the target maps transient; or a 4xx
    /// refusal). Anything else (a 3xx, a 5xx, no answer) is unknown.
    fn proves_nothing_done(&self, sent: &Upstream) -> bool {
        let target = &self.p.target.config;
        match classify(target, &EffectSpec::default(), &sent.attempted()) {
            Outcome::Transient { .. } | Outcome::RetrySafe { .. } => true,
            Outcome::Permanent => {
                matches!(sent, Upstream::Whole(a) if (400..500).contains(&a.status))
                    || matches!(sent, Upstream::Partial { status, .. } if (400..500).contains(status))
            }
            Outcome::Success { .. } | Outcome::Rejected { .. } | Outcome::Ambiguous { .. } => false,
        }
    }

    /// What was recorded, or `None` and a log line for a failed record
    /// (the caller still gets its answer).
    async fn record<T>(
        &self,
        write: impl std::future::Future<Output = Result<T, StoreError>>,
    ) -> Option<T> {
        write
            .await
            .map_err(|err| {
                tracing::error!(
                    namespace = %self.call.namespace,
                    error = %err,
                    "the proxy could not record a key's outcome; it stays processing and \
                     becomes unknown when its lease ends"
                );
            })
            .ok()
    }
}

/// What came back, in words (for the run's error and the dead letter).
fn describe_upstream(sent: &Upstream) -> String {
    match sent {
        Upstream::Whole(a) => format!("answered {}", a.status),
        Upstream::Partial { status, why } => format!("answered {status} but {why}"),
        Upstream::NotSent(e) => format!("could not be reached: {e}"),
        Upstream::LostAfterSend(e) => format!("did not answer after the request was sent: {e}"),
    }
}
