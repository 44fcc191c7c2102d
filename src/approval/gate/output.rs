//! Model output recorded as the run's next attempt after validation
//! against its operation's schema (DESIGN.md §6): an invalid output counts
//! against `max_repairs`, and past it the run fails for good.

use serde_json::Value;

use super::{Gate, GateError};
use crate::ledger::{Lease, OwnerCall};
use crate::metrics::ValidationFailure;
use crate::validate::port::NewOutput;

/// A model output as the owner posts it (the model's fields checked).
#[derive(Debug, Clone)]
pub struct ModelOutput {
    /// The operation whose schema applies (default: the run's operation).
    pub operation: Option<String>,
    /// The model output.
    pub output: Value,
    /// `hosted`, `self_hosted`, `rule_based`, …
    pub provider_class: String,
    /// Model name.
    pub model: String,
    /// Model revision or version.
    pub revision: String,
}

/// A valid output, recorded.
#[derive(Debug, Clone)]
pub struct OutputAccepted {
    /// Which attempt this was.
    pub attempt: i64,
    /// The lease to present next (unchanged).
    pub lease: Option<Lease>,
}

impl Gate<'_> {
    /// Records `out` as the run's next attempt, validated against its
    /// operation's schema and then reduced to the fields it keeps.
    ///
    /// # Errors
    /// [`GateError::OutputInvalid`] (recorded all the same),
    /// [`GateError::Invalid`] when no schema applies, a lost lease.
    pub async fn record_output(
        &self,
        call: &OwnerCall,
        out: ModelOutput,
    ) -> Result<OutputAccepted, GateError> {
        let operation = match out.operation {
            Some(op) => op,
            None => self
                .runs
                .get_run(&call.namespace, &call.key)
                .await?
                .and_then(|run| run.metadata.operation)
                .ok_or_else(|| {
                    GateError::invalid(
                        "operation",
                        "name the operation (the run's claim named none)",
                    )
                })?,
        };
        let contract = self.schemas.contract(&operation).ok_or_else(|| {
            GateError::invalid(
                "operation",
                format!("operation {operation:?} registers no output schema"),
            )
        })?;
        let violations = contract.violations(&out.output);
        // Minimisation: judged whole, stored (and redacted, and shown on
        // the card) only as the fields the operation keeps.
        let new = NewOutput {
            operation,
            output: contract.minimise(out.output),
            violations: violations.clone(),
            provider_class: out.provider_class,
            model: out.model,
            revision: out.revision,
        };
        let recorded = self
            .outputs
            .record_output(call, &new, contract.max_repairs)
            .await?;
        if violations.is_empty() {
            self.metrics.output_valid(&new.operation);
            return Ok(OutputAccepted {
                attempt: recorded.attempt,
                lease: recorded.moved.lease,
            });
        }
        let failure = if recorded.exhausted {
            self.metrics.run_moved(&recorded.moved.run);
            tracing::warn!(operation = %new.operation, attempts = recorded.attempt,
                "model output still invalid past max_repairs; the run failed for good");
            ValidationFailure::RepairsExhausted
        } else {
            ValidationFailure::Invalid
        };
        self.metrics.validation_failed(&new.operation, failure);
        let allowed = i64::from(contract.max_repairs) + 1;
        Err(GateError::OutputInvalid {
            violations,
            attempt: recorded.attempt,
            repairs_left: (allowed - recorded.attempt).max(0),
            exhausted: recorded.exhausted,
        })
    }
}
