//! Small inline SVG charts: no script, no fetched asset, every label
//! escaped by `maud`. Each chart is an image with a title and a text
//! description for screen readers; each bar has its value as a tooltip.

use maud::{html, Markup};

/// One bar: its label under the axis and its value.
#[derive(Debug, Clone, PartialEq)]
pub struct Bar {
    /// Label (shown for some bars when there are many).
    pub label: String,
    /// Height.
    pub value: f64,
}

impl Bar {
    /// A bar.
    pub fn new(label: impl Into<String>, value: f64) -> Self {
        Self {
            label: label.into(),
            value,
        }
    }
}

const W: f64 = 480.0;
const H: f64 = 190.0;
const LEFT: f64 = 40.0;
const RIGHT: f64 = 8.0;
const TOP: f64 = 12.0;
const BOTTOM: f64 = 30.0;

/// The smallest "round" number (1, 2 or 5 × 10ⁿ) at or above `v`.
fn nice_ceiling(v: f64) -> f64 {
    if v <= 1.0 {
        return 1.0;
    }
    let exp = 10f64.powf(v.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .iter()
        .map(|m| m * exp)
        .find(|c| *c >= v)
        .unwrap_or(10.0 * exp)
}

fn fmt_value(v: f64) -> String {
    if (v - v.round()).abs() < 1e-9 {
        format!("{v:.0}")
    } else {
        format!("{v:.1}")
    }
}

/// A vertical bar chart. `id` must be unique on the page; `title` names
/// it; `unit` follows each value in tooltips and the description.
pub fn bar_chart(id: &str, title: &str, unit: &str, bars: &[Bar]) -> Markup {
    let max = nice_ceiling(bars.iter().map(|b| b.value).fold(0.0, f64::max));
    let plot_w = W - LEFT - RIGHT;
    let plot_h = H - TOP - BOTTOM;
    let step = plot_w / bars.len().max(1) as f64;
    let gap = (step * 0.15).min(4.0);
    let every = bars.len().div_ceil(8).max(1);
    let total: f64 = bars.iter().map(|b| b.value).sum();
    let peak = bars.iter().max_by(|a, b| a.value.total_cmp(&b.value));
    let desc = match peak {
        Some(p) if total > 0.0 => format!(
            "{} bars, {} {unit} in all; highest: {} {unit} at {}.",
            bars.len(),
            fmt_value(total),
            fmt_value(p.value),
            p.label
        ),
        _ => format!("{} bars, all zero.", bars.len()),
    };
    let (title_id, desc_id) = (format!("{id}-title"), format!("{id}-desc"));
    html! {
        svg viewBox={ "0 0 " (W) " " (H) } width=(W) height=(H) role="img"
            aria-labelledby={ (title_id) " " (desc_id) } xmlns="http://www.w3.org/2000/svg" {
            title id=(title_id) { (title) }
            desc id=(desc_id) { (desc) }
            @for frac in [0.0, 0.5, 1.0] {
                @let y = TOP + plot_h * (1.0 - frac);
                line x1=(LEFT) x2=(W - RIGHT) y1=(y) y2=(y) stroke="#d9dce1" stroke-width="1" {}
                text x=(LEFT - 4.0) y=(y + 4.0) text-anchor="end" font-size="11" fill="#5c6370" {
                    (fmt_value(max * frac))
                }
            }
            @for (i, bar) in bars.iter().enumerate() {
                @let h = if max > 0.0 { plot_h * bar.value / max } else { 0.0 };
                @let x = LEFT + step * i as f64;
                rect x=(x + gap / 2.0) y=(TOP + plot_h - h) width=((step - gap).max(1.0)) height=(h)
                    fill="#1f5fbf" {
                    title { (bar.label) ": " (fmt_value(bar.value)) " " (unit) }
                }
                @if i % every == 0 {
                    text x=(x + step / 2.0) y=(H - BOTTOM + 16.0) text-anchor="middle" font-size="11" fill="#5c6370" {
                        (bar.label)
                    }
                }
            }
        }
    }
}

/// The `q`-quantile (0–1) of `values` by nearest rank; `None` when empty.
pub fn quantile(values: &[i64], q: f64) -> Option<i64> {
    if values.is_empty() {
        return None;
    }
    let mut sorted = values.to_vec();
    sorted.sort_unstable();
    let rank = (q.clamp(0.0, 1.0) * sorted.len() as f64).ceil() as usize;
    Some(sorted[rank.clamp(1, sorted.len()) - 1])
}

/// Counts `values` (milliseconds) into the buckets bounded by `edges`
/// (seconds, ascending); the last bucket takes everything above.
pub fn histogram(values: &[i64], edges: &[(f64, &str)]) -> Vec<Bar> {
    let mut counts = vec![0.0; edges.len() + 1];
    for v in values {
        let secs = *v as f64 / 1000.0;
        let i = edges
            .iter()
            .position(|(e, _)| secs <= *e)
            .unwrap_or(edges.len());
        counts[i] += 1.0;
    }
    let mut labels: Vec<String> = edges.iter().map(|(_, l)| format!("≤{l}")).collect();
    labels.push(format!(">{}", edges.last().map_or("", |(_, l)| l)));
    labels
        .into_iter()
        .zip(counts)
        .map(|(l, c)| Bar::new(l, c))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_by_nearest_rank() {
        let v: Vec<i64> = (1..=100).collect();
        assert_eq!(quantile(&v, 0.95), Some(95));
        assert_eq!(quantile(&v, 0.5), Some(50));
        assert_eq!(quantile(&[7], 0.95), Some(7));
        assert_eq!(quantile(&[], 0.95), None);
        assert_eq!(quantile(&[3, 1, 2], 1.0), Some(3));
    }

    #[test]
    fn histogram_buckets_and_overflow() {
        let bars = histogram(
            &[500, 20_000, 90_000, 10_000_000],
            &[(60.0, "1m"), (3600.0, "1h")],
        );
        let counts: Vec<f64> = bars.iter().map(|b| b.value).collect();
        assert_eq!(counts, vec![2.0, 1.0, 1.0]);
        assert_eq!(bars[2].label, ">1h");
    }

    #[test]
    fn charts_escape_labels_and_describe_themselves() {
        let svg = bar_chart(
            "c",
            "Title <x>",
            "items",
            &[Bar::new("<b>", 3.0), Bar::new("b", 1.0)],
        )
        .into_string();
        assert!(svg.contains("&lt;b&gt;") && !svg.contains("<b>"));
        assert!(svg.contains("highest: 3 items at &lt;b&gt;"));
        assert!(svg.contains("role=\"img\""));
        let empty = bar_chart("e", "t", "u", &[]).into_string();
        assert!(empty.contains("0 bars, all zero."));
    }

    #[test]
    fn ceilings_are_round() {
        assert_eq!(nice_ceiling(0.0), 1.0);
        assert_eq!(nice_ceiling(3.0), 5.0);
        assert_eq!(nice_ceiling(11.0), 20.0);
        assert_eq!(nice_ceiling(100.0), 100.0);
    }
}
