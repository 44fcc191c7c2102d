use super::*;

#[test]
fn every_metric_is_named_oncegate() {
    let metrics = Metrics::new();
    assert!(metrics.names().len() >= 20);
    for name in metrics.names() {
        assert!(name.starts_with("oncegate_"), "{name}");
    }
}

#[test]
fn config_rejects_bad_namespaces_and_huge_bounds() {
    let mut config = MetricsConfig::default();
    assert!(config.validate().is_ok());
    config.namespaces = vec!["bad key".into()];
    let (field, _) = config.validate().unwrap_err();
    assert_eq!(field, "metrics.namespaces[0]");
    config.namespaces.clear();
    config.max_label_values = 1_000_000;
    assert!(config.validate().is_err());
}
