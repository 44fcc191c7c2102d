//! The proxy's use case: one request, from its key to the answer the
//! caller gets (DESIGN.md §10).
//!
//! The key's run lives in the ledger under `proxy:{name}`: a claim decides
//! who forwards; a stored answer is replayed; a key in flight is 409 (or
//! waited for); a key whose forward was interrupted or lost is unknown and
//! is never forwarded again until an operator resolves it.

use std::time::{Duration, Instant};

use serde_json::json;

use super::answer::Answer;
use super::error::ProxyError;
use super::key::ProxyKey;
use super::prepared::{Prepared, Proxies};
use super::request::Inbound;
use super::{InFlight, KeyPolicy, ProxyStore};
use crate::clock::Clock;
use crate::ledger::service::{Ledger, LedgerError};
use crate::ledger::{ClaimOutcome, ClaimRequest, OwnerCall, Run, RunMetadata, RunState};
use crate::outbox::KillSwitch;

/// How often a request in `wait` mode looks at the first one's run.
const WAIT_POLL: Duration = Duration::from_millis(20);

/// What the proxy's calls need.
#[derive(Debug, Clone, Copy)]
pub struct Proxy<'a> {
    /// The configured proxies.
    pub proxies: &'a Proxies,
    /// The ledger: claims and owner moves of the keys' runs.
    pub ledger: Ledger<'a>,
    /// The kept answers and the unknown-outcome move.
    pub store: &'a dyn ProxyStore,
    /// The kill switch, checked before every forward.
    pub switch: &'a KillSwitch,
    /// The injected clock.
    pub clock: &'a dyn Clock,
}

/// Who is calling.
#[derive(Debug, Clone)]
pub struct Caller {
    /// The token's subject: keys are scoped by it.
    pub subject: String,
    /// The request's correlation id, kept on the run.
    pub correlation_id: Option<String>,
}

/// The answer the caller gets.
#[derive(Debug)]
pub enum Reply {
    /// The upstream's answer to this request (stored for replays).
    Fresh(Answer),
    /// The stored answer of the first request with this key.
    Replayed(Answer),
    /// The upstream's answer, not stored (its status is not kept): a retry
    /// goes upstream again, or finds the key unknown.
    PassedThrough(Answer),
    /// The upstream's answer to a request without a key (optional keys).
    Unprotected(Answer),
}

impl Proxy<'_> {
    /// Handles one request to proxy `name`.
    ///
    /// # Errors
    /// [`ProxyError`]: each refusal says whether anything was sent.
    pub async fn handle(
        &self,
        name: &str,
        caller: &Caller,
        req: Inbound,
    ) -> Result<Reply, ProxyError> {
        let p = self
            .proxies
            .get(name)
            .ok_or_else(|| ProxyError::UnknownProxy(name.to_owned()))?;
        let url = req
            .upstream_url(&p.target.config)
            .map_err(|e| ProxyError::PathOutside(e.0))?;
        let Some(key) = ProxyKey::from_headers(&req.headers)? else {
            if p.config.key == KeyPolicy::Required {
                return Err(ProxyError::MissingKey);
            }
            self.allowed(p).await?;
            let _slot = self.slot(p).await?;
            let sent = super::forward::send(p, &req, &url, None).await;
            return super::forward::whole(sent).map(Reply::Unprotected);
        };
        let claim = ClaimRequest {
            namespace: p.namespace.clone(),
            key: key.scoped(&caller.subject)?,
            business_key: None,
            payload_hash: req.fingerprint(&p.config),
            lease_ms: p.lease_ms(),
            metadata: RunMetadata {
                correlation_id: caller.correlation_id.clone(),
                ..RunMetadata::default()
            },
            claimed_by: caller.subject.clone(),
        };
        self.allowed(p).await?;
        if let Some(reply) = self.replay_first(p, &claim).await? {
            return Ok(reply);
        }
        let deadline = Instant::now() + Duration::from_millis(p.config.wait_ms);
        loop {
            let claimed = self.ledger.claim(&claim).await.map_err(|e| match e {
                LedgerError::PayloadConflict { .. } => ProxyError::Reused,
                LedgerError::Store(e) => ProxyError::Store(e),
            })?;
            let run = match claimed.outcome {
                ClaimOutcome::Claimed {
                    run,
                    lease,
                    reclaimed_from,
                } => {
                    let call = OwnerCall {
                        namespace: run.namespace.clone(),
                        key: run.key.clone(),
                        lease,
                        actor: caller.subject.clone(),
                    };
                    if reclaimed_from == Some(RunState::Processing) {
                        return Err(self.interrupted(&call).await);
                    }
                    let forward = super::forward::Forward {
                        proxy: self,
                        p,
                        call,
                        payload_hash: &claim.payload_hash,
                    };
                    return forward.run(&req, &url).await;
                }
                ClaimOutcome::Duplicate(run) => return self.replay(p, &run).await,
                ClaimOutcome::InFlight(run) => run,
                ClaimOutcome::Finished(run) | ClaimOutcome::Exhausted(run) => {
                    return Err(ended(&run))
                }
                ClaimOutcome::DuplicateOf(_) | ClaimOutcome::Conflict(_) => {
                    return Err(ProxyError::Reused)
                }
            };
            if p.config.in_flight == InFlight::Conflict || Instant::now() >= deadline {
                let secs = claimed.retry_after_secs.unwrap_or(1).max(1);
                tracing::debug!(key = %run.key, "proxy key in flight");
                return Err(ProxyError::InFlight {
                    retry_after_secs: u64::try_from(secs).unwrap_or(1),
                });
            }
            tokio::time::sleep(WAIT_POLL.min(deadline - Instant::now())).await;
        }
    }

    /// Refuses while the kill switch holds the target.
    async fn allowed(&self, p: &Prepared) -> Result<(), ProxyError> {
        let target = &p.target.config.name;
        if self.switch.allows(target).await {
            Ok(())
        } else {
            Err(ProxyError::ActionsDisabled(target.clone()))
        }
    }

    /// One of the target's send slots, waited for at most
    /// [`super::SLOT_WAIT_MS`], then paced by its rate limit.
    pub(super) async fn slot<'p>(
        &self,
        p: &'p Prepared,
    ) -> Result<tokio::sync::SemaphorePermit<'p>, ProxyError> {
        let wait = Duration::from_millis(super::SLOT_WAIT_MS);
        let busy = || ProxyError::TargetBusy(p.target.config.name.clone());
        let permit = tokio::time::timeout(wait, p.target.slots.acquire())
            .await
            .map_err(|_| busy())?
            .map_err(|_| busy())?;
        p.target.pace().await;
        Ok(permit)
    }

    /// A completed key's replay from this process's recent answers, or
    /// from one read (its run and the answer kept beside it), counted as
    /// the duplicate claim it stands for; `None`: the claim decides (every
    /// other case, and a replay whose answer the read did not find).
    async fn replay_first(
        &self,
        p: &Prepared,
        claim: &ClaimRequest,
    ) -> Result<Option<Reply>, ProxyError> {
        let (key, hash) = (claim.key.as_str(), claim.payload_hash.as_str());
        let found = match p.recent.replay(key, hash, self.clock.now_ms()) {
            Some(answer) => Some(answer),
            None => {
                let ns = &claim.namespace;
                self.store
                    .replay(ns, &claim.key, &claim.payload_hash)
                    .await?
            }
        };
        Ok(found.map(|answer| {
            self.ledger.replayed(&claim.namespace);
            Reply::Replayed(answer)
        }))
    }

    /// The stored answer of a completed key, or why there is none.
    async fn replay(&self, p: &Prepared, run: &Run) -> Result<Reply, ProxyError> {
        match self.store.stored_answer(&run.namespace, &run.key).await? {
            Some(answer) => Ok(Reply::Replayed(answer)),
            None => Err(ProxyError::AnswerExpired {
                window: crate::clock::format_duration_ms(p.config.retention.0),
            }),
        }
    }

    /// A claim took over a run whose forward never recorded its outcome
    /// (the process stopped, or the lease ran out): unknown, not resent.
    async fn interrupted(&self, call: &OwnerCall) -> ProxyError {
        let reason = "an earlier forward with this key stopped before its answer was recorded \
                      (oncegate restarted or its lease ran out)";
        let evidence = json!({ "interrupted": reason });
        if let Err(err) = self.store.outcome_unknown(call, reason, &evidence).await {
            return ProxyError::Store(err);
        }
        ProxyError::OutcomeUnknown {
            reason: reason.into(),
        }
    }
}

/// What a key whose run ended answers: unknown (dead-lettered, for an
/// operator) or closed (resolved as carried out, or its answer not kept).
fn ended(run: &Run) -> ProxyError {
    let reason = run
        .reason
        .clone()
        .or_else(|| run.last_error.clone())
        .unwrap_or_else(|| run.state.to_string());
    match run.state {
        RunState::DeadLettered => ProxyError::OutcomeUnknown { reason },
        _ => ProxyError::Closed { reason },
    }
}
