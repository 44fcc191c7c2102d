//! Outcome classification (DESIGN.md §4): every attempt lands in exactly
//! one class, decided in the table's order of precedence.

use std::time::Duration;

use axum::http::{HeaderMap, StatusCode};
use serde_json::Value;

use super::{EffectSpec, ExternalIdAt, TargetConfig, TargetKind};

/// What an attempt produced, before classification.
#[derive(Debug)]
pub enum Attempted {
    /// The target answered.
    Answered {
        /// Its status.
        status: StatusCode,
        /// Its headers.
        headers: HeaderMap,
        /// Its body (possibly truncated by the caller).
        body: Vec<u8>,
    },
    /// The request never left: connect refused, DNS failure, connect timeout.
    NotSent(String),
    /// The request was sent, then the answer was lost (timeout, reset).
    LostAfterSend(String),
}

/// The route an attempt takes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// 2xx and no business rejection: completed.
    Success {
        /// The target's id for what it created, if found.
        external_ref: Option<String>,
    },
    /// 2xx whose body matches the rejection rule: failed, run failed_terminal.
    Rejected {
        /// Why, in words.
        reason: String,
    },
    /// Not sent, 429, 503 with Retry-After, or mapped transient: retry.
    Transient {
        /// The target's Retry-After, when it gave one.
        retry_after: Option<Duration>,
    },
    /// Other 5xx, 408 or 409 from a target that honours keys: retry with the same key.
    RetrySafe {
        /// The target's Retry-After, when it gave one.
        retry_after: Option<Duration>,
    },
    /// Lost after send, or 5xx/408/409 from a target that does not honour
    /// keys: unknown — reconcile, never blindly resend.
    Ambiguous {
        /// The status the target answered (`None`: no answer came).
        status: Option<u16>,
    },
    /// 3xx and the other 4xx: failed, run dead-lettered.
    Permanent,
}

impl Outcome {
    /// The attempt's class, stored and used as a metric label.
    pub fn class(&self) -> AttemptClass {
        match self {
            Self::Success { .. } => AttemptClass::Success,
            Self::Rejected { .. } => AttemptClass::Rejected,
            Self::Transient { .. } => AttemptClass::Transient,
            Self::RetrySafe { .. } => AttemptClass::RetrySafe,
            Self::Ambiguous { .. } => AttemptClass::Ambiguous,
            Self::Permanent => AttemptClass::Permanent,
        }
    }
}

/// The class an attempt is recorded under: a sent attempt's outcome, a
/// reconciliation probe's finding, or a lease lost with its dispatcher.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AttemptClass {
    /// 2xx and no business rejection.
    Success,
    /// 2xx whose body matched the rejection rule.
    Rejected,
    /// Not sent, 429, 503 with Retry-After, or mapped transient.
    Transient,
    /// 5xx, 408 or 409 from a target that honours keys.
    RetrySafe,
    /// Sent, and the answer was lost (or could mean either).
    Ambiguous,
    /// 3xx and the other 4xx.
    Permanent,
    /// A probe found what the effect created.
    ProbeFound,
    /// A probe proved it was never created.
    ProbeAbsent,
    /// A probe could not tell.
    ProbeUndecided,
    /// The dispatcher holding the lease stopped before recording.
    Lost,
}

impl AttemptClass {
    /// Every class.
    pub const ALL: [Self; 10] = [
        Self::Success,
        Self::Rejected,
        Self::Transient,
        Self::RetrySafe,
        Self::Ambiguous,
        Self::Permanent,
        Self::ProbeFound,
        Self::ProbeAbsent,
        Self::ProbeUndecided,
        Self::Lost,
    ];

    /// The stored name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Success => "success",
            Self::Rejected => "rejected",
            Self::Transient => "transient",
            Self::RetrySafe => "retry_safe",
            Self::Ambiguous => "ambiguous",
            Self::Permanent => "permanent",
            Self::ProbeFound => "probe_found",
            Self::ProbeAbsent => "probe_absent",
            Self::ProbeUndecided => "probe_undecided",
            Self::Lost => "lost",
        }
    }

    /// Whether an effect whose last attempt ended so is unknown: sent with
    /// its answer lost, or a probe that could not decide. Such an effect
    /// must be reconciled, never blindly resent.
    pub fn left_unknown(self) -> bool {
        matches!(self, Self::Ambiguous | Self::Lost | Self::ProbeUndecided)
    }
}

impl std::fmt::Display for AttemptClass {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for AttemptClass {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|c| c.as_str() == s)
            .ok_or_else(|| format!("unknown attempt class {s:?}"))
    }
}

/// The class a target's configuration may map a status to
/// (`status_classes`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StatusClass {
    /// As a 2xx.
    Success,
    /// Retry with backoff.
    Transient,
    /// Retry with the same key (ambiguous when the target ignores keys).
    RetrySafe,
    /// Unknown: reconcile.
    Ambiguous,
    /// Refused for good.
    Permanent,
}

impl StatusClass {
    /// The names a configuration may use.
    pub const NAMES: &'static str = "success, transient, retry_safe, ambiguous, permanent";

    /// Parses a configured name.
    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "success" => Some(Self::Success),
            "transient" => Some(Self::Transient),
            "retry_safe" => Some(Self::RetrySafe),
            "ambiguous" => Some(Self::Ambiguous),
            "permanent" => Some(Self::Permanent),
            _ => None,
        }
    }
}

/// Classifies one attempt against its target and effect.
pub fn classify(target: &TargetConfig, spec: &EffectSpec, attempted: &Attempted) -> Outcome {
    let (status, headers, body) = match attempted {
        Attempted::NotSent(_) => return Outcome::Transient { retry_after: None },
        Attempted::LostAfterSend(_) => return Outcome::Ambiguous { status: None },
        Attempted::Answered {
            status,
            headers,
            body,
        } => (*status, headers, body),
    };
    let retry_after = retry_after(headers);
    if let Some(class) = override_for(target, status) {
        return match class {
            StatusClass::Success => success(spec, headers, body),
            StatusClass::Transient => Outcome::Transient { retry_after },
            StatusClass::RetrySafe if target.honours_keys() => Outcome::RetrySafe { retry_after },
            StatusClass::RetrySafe | StatusClass::Ambiguous => Outcome::Ambiguous {
                status: Some(status.as_u16()),
            },
            StatusClass::Permanent => Outcome::Permanent,
        };
    }
    let code = status.as_u16();
    match code {
        200..=299 => success(spec, headers, body),
        429 => Outcome::Transient { retry_after },
        503 if retry_after.is_some() => Outcome::Transient { retry_after },
        500..=599 | 408 | 409 if target.honours_keys() => Outcome::RetrySafe { retry_after },
        500..=599 | 408 | 409 => Outcome::Ambiguous { status: Some(code) },
        _ => Outcome::Permanent,
    }
}

/// The configured class of a status, or the workflow kind's default
/// (a restarting engine answers 404, 502 or 503: transient).
fn override_for(target: &TargetConfig, status: StatusCode) -> Option<StatusClass> {
    if let Some(class) = target.status_classes.get(status.as_str()) {
        // Checked at start (`TargetConfig::validate`); an unknown name is
        // refused there, so it never reaches a send.
        return StatusClass::parse(class);
    }
    (target.kind == TargetKind::Workflow && matches!(status.as_u16(), 404 | 502 | 503))
        .then_some(StatusClass::Transient)
}

fn success(spec: &EffectSpec, headers: &HeaderMap, body: &[u8]) -> Outcome {
    let json: Option<Value> = serde_json::from_slice(body).ok();
    if let Some(rule) = &spec.reject {
        if json.as_ref().and_then(|j| j.pointer(&rule.pointer)) == Some(&rule.equals) {
            return Outcome::Rejected {
                reason: format!("the target answered {} = {}", rule.pointer, rule.equals),
            };
        }
    }
    let external_ref = match &spec.external_id {
        Some(ExternalIdAt::Header(name)) => headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned),
        Some(ExternalIdAt::Pointer(pointer)) => json
            .as_ref()
            .and_then(|j| j.pointer(pointer))
            .and_then(|v| match v {
                Value::String(s) => Some(s.clone()),
                Value::Number(n) => Some(n.to_string()),
                _ => None,
            }),
        None => None,
    };
    Outcome::Success { external_ref }
}

/// A `Retry-After` in seconds or as an HTTP date, if it parses and is not
/// in the past.
pub fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let value = headers
        .get(axum::http::header::RETRY_AFTER)?
        .to_str()
        .ok()?
        .trim();
    if let Ok(secs) = value.parse::<u64>() {
        return Some(Duration::from_secs(secs));
    }
    let at = chrono::DateTime::parse_from_rfc2822(value).ok()?;
    let wait = at.timestamp_millis() - chrono::Utc::now().timestamp_millis();
    (wait > 0).then(|| Duration::from_millis(wait as u64))
}

#[cfg(test)]
mod tests;
