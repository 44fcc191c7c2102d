//! Reading this process's counters back, for the operator console: the
//! numbers the database cannot tell (a duplicate delivery writes nothing,
//! by design, so only the process that answered it counts it).

use prometheus::core::Collector;

use super::Metrics;

impl Metrics {
    /// Claims this process answered as duplicates since it started (outcomes
    /// `duplicate` and `duplicate_of`, API and webhooks), per namespace
    /// label, largest first.
    pub fn duplicate_claims(&self) -> Vec<(String, u64)> {
        let mut out: Vec<(String, u64)> = Vec::new();
        for family in self.claims.collect() {
            for metric in family.get_metric() {
                let label = |name: &str| {
                    metric
                        .get_label()
                        .iter()
                        .find(|l| l.name() == name)
                        .map(|l| l.value().to_owned())
                        .unwrap_or_default()
                };
                let outcome = label("outcome");
                if outcome != "duplicate" && outcome != "duplicate_of" {
                    continue;
                }
                let count = metric.get_counter().get_value() as u64;
                let namespace = label("namespace");
                match out.iter_mut().find(|(n, _)| *n == namespace) {
                    Some((_, total)) => *total += count,
                    None => out.push((namespace, count)),
                }
            }
        }
        out.retain(|(_, n)| *n > 0);
        out.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn duplicates_are_summed_per_namespace() {
        let m = Metrics::new();
        m.claims.with_label_values(&["crm", "duplicate"]).inc_by(3);
        m.claims.with_label_values(&["crm", "duplicate_of"]).inc();
        m.claims.with_label_values(&["crm", "claimed"]).inc_by(9);
        m.claims.with_label_values(&["shop", "duplicate"]).inc_by(7);
        assert_eq!(
            m.duplicate_claims(),
            vec![("shop".to_owned(), 7), ("crm".to_owned(), 4)]
        );
    }
}
