//! The SQL both backends run, written once, one file per part.
//!
//! Statements use `$N` placeholders on SQLite and PostgreSQL alike. They
//! differ in a few spellings only, supplied by [`Dialect`]: the current
//! time (`$1` bound from the injected clock on SQLite; `og_now_ms($1)` on
//! PostgreSQL, which is the database's `now()` unless a test binds a
//! time), the two-argument minimum, JSON row sets and planner hints.
//!
//! Every statement that writes `runs` is in [`runs`], so the guards that
//! keep the move table true can be read in one place.

pub mod approval;
pub mod audit;
pub mod console;
pub mod deadletter;
pub mod deliveries;
pub mod gauges;
pub mod health;
pub mod ingress;
pub mod jobs;
pub mod outbox;
pub mod proxy;
pub mod recovery;
pub mod retention;
pub mod runs;
pub mod tokens;

/// The spellings that differ between backends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    /// SQLite 3.35 or later.
    Sqlite,
    /// PostgreSQL 12 or later.
    Postgres,
}

impl Dialect {
    /// The current time in milliseconds, as a statement spells it (`$1`
    /// is always the time slot).
    pub(crate) fn now(self) -> &'static str {
        match self {
            Self::Sqlite => "$1",
            Self::Postgres => "og_now_ms($1)",
        }
    }

    /// Rows read from a JSON array of objects bound as `param`, as a
    /// table `v` with the given `(column, PostgreSQL type)`s: each
    /// object's keys are the column names. One statement then writes a
    /// whole batch (SQLite `json_each`, PostgreSQL `jsonb_to_recordset`).
    /// Name the columns so that none clashes with the table the statement
    /// writes (a `v_` prefix), or unqualified names become ambiguous.
    pub(crate) fn json_rows(self, param: &str, columns: &[(&str, &str)]) -> String {
        match self {
            Self::Sqlite => {
                let cols: Vec<String> = columns
                    .iter()
                    .map(|(c, _)| format!("value->>'{c}' AS {c}"))
                    .collect();
                format!("(SELECT {} FROM json_each({param})) AS v", cols.join(", "))
            }
            Self::Postgres => {
                let cols: Vec<String> = columns.iter().map(|(c, t)| format!("{c} {t}")).collect();
                format!(
                    "jsonb_to_recordset({param}::jsonb) AS v({})",
                    cols.join(", ")
                )
            }
        }
    }

    /// `column` in a condition that must not pick the index: a planner
    /// would otherwise walk a state index (every `pending` effect, every
    /// `approved` run) instead of looking a batch's rows up by key. SQLite
    /// does so always; PostgreSQL when the table's statistics lag behind
    /// it (a fresh table, a burst before autovacuum's next ANALYZE). A
    /// unary `+` (SQLite) or an expression (PostgreSQL) keeps it off.
    pub(crate) fn unindexed(self, column: &str) -> String {
        match self {
            Self::Sqlite => format!("+{column}"),
            Self::Postgres => format!("({column} || '')"),
        }
    }

    /// The two-argument minimum.
    pub(crate) fn least(self) -> &'static str {
        match self {
            Self::Sqlite => "MIN",
            Self::Postgres => "LEAST",
        }
    }

    /// A statement run first in a transaction that turns the named planner
    /// methods off for it (PostgreSQL; SQLite has no such settings).
    pub(crate) fn planner_off(self, settings: &[&str]) -> Option<String> {
        match self {
            Self::Sqlite => None,
            Self::Postgres => Some(format!(
                "SELECT {}",
                settings
                    .iter()
                    .map(|s| format!("set_config('{s}', 'off', true)"))
                    .collect::<Vec<_>>()
                    .join(", ")
            )),
        }
    }

    /// A column compared byte by byte (PostgreSQL's "C" collation), so the
    /// database's own collation cannot change an order or a prefix range.
    pub(crate) fn bytewise(self, column: &str) -> String {
        match self {
            Self::Sqlite => column.to_owned(),
            Self::Postgres => format!("{column} COLLATE \"C\""),
        }
    }
}

/// The `runs` columns every statement returns, in [`RunRow`] order.
///
/// [`RunRow`]: crate::db::rows::RunRow
pub(crate) const RUN_COLUMNS: &str =
    "namespace, run_key, business_key, state, prev_state, payload_hash, \
    lease_owner, lease_expires_at, lease_started_at, version, attempts, result, last_error, \
    reason, operation, correlation_id, workflow_version, source_url, execution_ref, \
    requested_by, claimed_by, audit_seq, audit_head, created_at, updated_at, archived_at, \
    reclaims, budget_started_at";

/// The `effects` columns statements return, in [`EffectRow`] order.
///
/// [`EffectRow`]: crate::db::rows::EffectRow
pub(crate) const EFFECT_COLUMNS: &str =
    "id, namespace, run_key, operation, effect_type, target, method, url, \
    headers, body, idempotency_key, spec, state, not_before, next_attempt_at, attempts, \
    external_ref, last_status, last_class, last_error, first_sent_at, created_at, role, \
    schema_version";

/// Every statement, spelled for one backend, with the redaction rules
/// every write applies before storage (carried here because every write
/// path receives the statements).
#[derive(Debug, Clone)]
pub struct Statements {
    /// The backend.
    pub dialect: Dialect,
    /// Every statement that writes `runs`, and the run reads.
    pub runs: runs::RunStatements,
    /// Audit entries, chains, checkpoints and verifications.
    pub audit: audit::AuditStatements,
    /// Effects, attempts, the kill switch.
    pub outbox: outbox::OutboxStatements,
    /// Target health: pauses, probes, disables.
    pub health: health::HealthStatements,
    /// Raw deliveries.
    pub ingress: ingress::IngressStatements,
    /// The deliveries log.
    pub deliveries: deliveries::DeliveryStatements,
    /// Dead letters and replacement links.
    pub deadletter: deadletter::DeadLetterStatements,
    /// Bulk replay jobs.
    pub jobs: jobs::JobStatements,
    /// Challenges, sessions, model outputs.
    pub approval: approval::ApprovalStatements,
    /// Retention: candidates, whole rows, slimming, scrubbing, maintenance leases.
    pub retention: retention::RetentionStatements,
    /// The scrape-time gauges and the console's dashboard counts.
    pub gauges: gauges::GaugeStatements,
    /// The Idempotency-Key proxy's kept answers.
    pub proxy: proxy::ProxyStatements,
    /// Stored API tokens (only digests).
    pub tokens: tokens::TokenStatements,
    /// The redaction rules every write applies before storage.
    pub redactor: std::sync::Arc<crate::audit::Redactor>,
    /// The ledger's recovery rules, which the claim and the recovery moves
    /// bind per namespace (carried here for the same reason).
    pub ledger: std::sync::Arc<crate::ledger::LedgerConfig>,
}

impl Statements {
    /// The statements spelled for `dialect`, with no redaction.
    pub fn new(dialect: Dialect) -> Self {
        Self {
            dialect,
            runs: runs::RunStatements::new(dialect),
            audit: audit::AuditStatements::new(dialect),
            outbox: outbox::OutboxStatements::new(dialect),
            health: health::HealthStatements::new(dialect),
            ingress: ingress::IngressStatements::new(),
            deliveries: deliveries::DeliveryStatements::new(),
            deadletter: deadletter::DeadLetterStatements::new(dialect),
            jobs: jobs::JobStatements::new(dialect),
            approval: approval::ApprovalStatements::new(dialect),
            retention: retention::RetentionStatements::new(),
            gauges: gauges::GaugeStatements::new(dialect),
            proxy: proxy::ProxyStatements::new(dialect),
            tokens: tokens::TokenStatements::new(),
            redactor: std::sync::Arc::new(crate::audit::Redactor::none()),
            ledger: std::sync::Arc::default(),
        }
    }

    /// The same statements with `redactor` applied before storage.
    #[must_use]
    pub fn redacting(self, redactor: std::sync::Arc<crate::audit::Redactor>) -> Self {
        Self { redactor, ..self }
    }

    /// The same statements binding `ledger`'s recovery rules.
    #[must_use]
    pub fn recovering(self, ledger: std::sync::Arc<crate::ledger::LedgerConfig>) -> Self {
        Self { ledger, ..self }
    }
}

/// `$first, $first+1, …` for `n` parameters.
pub(crate) fn placeholders(first: usize, n: usize) -> String {
    (first..first + n)
        .map(|i| format!("${i}"))
        .collect::<Vec<_>>()
        .join(", ")
}
