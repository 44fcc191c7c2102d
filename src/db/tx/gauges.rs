//! The scrape-time gauges and the console dashboard's counts, read
//! without a transaction; the [`GaugeStore`] port.

use async_trait::async_trait;

use crate::clock::Millis;
use crate::db::exec::Args;
use crate::db::rows::{HealthRow, SwitchRow};
use crate::db::{Backend, Db};
use crate::ledger::storage::Result;
use crate::metrics::port::{GaugeStore, HourCount, OpenDeadLetters};
use crate::outbox::ActionSwitch;

#[async_trait]
impl<B: Backend> GaugeStore for Db<B> {
    async fn stale_processing(&self) -> Result<Vec<(String, i64)>> {
        let rd = self.reader();
        rd.all(&rd.st.gauges.stale_processing, Args::new().bind(rd.now))
            .await
    }

    async fn open_dead_letters(&self) -> Result<Vec<OpenDeadLetters>> {
        let rd = self.reader();
        let rows: Vec<(String, i64, i64)> = rd
            .all(&rd.st.gauges.open_dead_letters, Args::new().bind(rd.now))
            .await?;
        Ok(rows
            .into_iter()
            .map(|(namespace, count, oldest_age_ms)| OpenDeadLetters {
                namespace,
                count,
                oldest_age_ms,
            })
            .collect())
    }

    async fn backlog(&self) -> Result<Vec<(String, String, i64)>> {
        let rd = self.reader();
        rd.all(&rd.st.gauges.backlog, Args::new()).await
    }

    async fn switch_states(&self) -> Result<Vec<(String, bool)>> {
        let rd = self.reader();
        let rows: Vec<SwitchRow> = rd.all(&rd.st.outbox.switches, Args::new()).await?;
        Ok(rows
            .into_iter()
            .map(ActionSwitch::from)
            .map(|s| (s.scope, s.enabled))
            .collect())
    }

    async fn target_health_states(&self) -> Result<Vec<(String, String, i64)>> {
        let rd = self.reader();
        let rows: Vec<HealthRow> = rd.all(&rd.st.health.all, Args::new()).await?;
        Ok(rows
            .into_iter()
            .map(|row| {
                let h = row.into_health();
                let paused = h.paused_total_ms(rd.clock_now);
                (h.target, h.state.as_str().to_owned(), paused)
            })
            .collect())
    }

    async fn gate_waits(&self, since: Millis, limit: i64) -> Result<Vec<i64>> {
        let rd = self.reader();
        let rows: Vec<(i64,)> = rd
            .all(
                &rd.st.gauges.gate_waits,
                Args::new().bind(since).bind(limit),
            )
            .await?;
        Ok(rows.into_iter().map(|(ms,)| ms).collect())
    }

    async fn dead_letters_by_hour(&self, since: Millis) -> Result<Vec<HourCount>> {
        let rd = self.reader();
        let rows: Vec<(i64, i64)> = rd
            .all(&rd.st.gauges.dead_letters_by_hour, Args::new().bind(since))
            .await?;
        Ok(rows
            .into_iter()
            .map(|(hour, count)| HourCount { hour, count })
            .collect())
    }

    async fn pending_challenges(&self) -> Result<i64> {
        let rd = self.reader();
        let (count,): (i64,) = rd
            .one(&rd.st.gauges.pending_challenges, Args::new())
            .await?;
        Ok(count)
    }
}
